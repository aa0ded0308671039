"""Control-loop (launch) benchmark: apply -> every worker running, ours against JobSet and
an Indexed Job.

    python -m bench.control_loop [--quick] [--json] [--repeats N] [--no-jobset]

On a sandbox with a 512-node synthetic Trn2 fleet (128 UltraServers), for gangs of 16, 64
and 256 workers x 16 chips, in the same run, the order rotated each trial:
- ours: a TrainingJob (gated pods, topology placement, pinning, ungating by the operator);
- jobset: the same pods as a JobSet v0.11.1 (the real peer, its controller built from its
  Go module and run beside the control plane: sandbox/jobset.py) of one replicated Job,
  its defaults (a headless Service, its pod webhooks), placed by kube-scheduler;
- baseline: the same pods as a plain Indexed Job (completions = parallelism = N), placed by
  kube-scheduler alone, no gang semantics, no topology.
Time is from the create call to the moment every pod has started (phase Running, or for
the Jobs also Succeeded: KWOK completes Job pods right after they run). Medians over
--repeats; the ratios ours/JobSet and ours/Indexed Job are printed. Targets: 256 workers
within 1.5x the Indexed Job (issue 4) and within 1.0x JobSet (issue 46).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, cast

from kubernetes import client, config

from bench.harness import operator_sandbox
from goodput_operator import names
from goodput_operator.sandbox import cluster, versions
from goodput_operator.sandbox import jobset as jobsets

NAME = "bench-control-loop"
FLEET = "synthetic:trn2:128"
NEURON = "aws.amazon.com/neuron"
STARTED = ("Running", "Succeeded")


def container() -> dict[str, Any]:
    return {"name": "worker", "image": "example.com/train:1",
            "resources": {"requests": {NEURON: "16"}, "limits": {NEURON: "16"}}}


def training_job(name: str, workers: int) -> dict[str, Any]:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name},
            "spec": {"ultraServerGroup": "bench-trn2", "workers": workers,
                     "acceleratorsPerWorker": 16,
                     "template": {"spec": {"containers": [
                         {"name": "worker", "image": "example.com/train:1"}]}}}}


def indexed_job(name: str, workers: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "completions": workers,
                     "parallelism": workers, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"bench": name}},
                                  "spec": {"restartPolicy": "Never",
                                           "containers": [container()]}}}}


def jobset(name: str, workers: int) -> dict[str, Any]:
    """The same workers as a JobSet: one replicated Job, the Indexed Job's spec."""
    job = indexed_job(name, workers)["spec"]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1,
                                         "template": {"spec": job}}]}}


KINDS = ("ours", "jobset", "baseline")


class Bench:
    def __init__(self, box: cluster.Sandbox) -> None:
        self.box = box
        api = config.new_client_from_config(config_file=str(box.kubeconfig))  # type: ignore[no-untyped-call]
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)

    def started(self, namespace: str, selector: str, workers: int) -> bool:
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return sum(1 for p in pods if p.status is not None
                   and (p.status.phase or "") in STARTED) >= workers

    def run(self, kind: str, workers: int, trial: int) -> float:
        namespace = f"bench-{kind}-{workers}-{trial}"
        self.core.create_namespace(cast(Any, {"metadata": {"name": namespace}}))
        name = f"{kind}-{workers}"
        started = time.monotonic()
        if kind == "ours":
            self.custom.create_namespaced_custom_object(
                "goodput.dev", "v1alpha1", namespace, "trainingjobs",
                training_job(name, workers))
            selector = f"{names.JOB_LABEL}={name}"
        elif kind == "jobset":
            self.custom.create_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset(name, workers))
            selector = f"{jobsets.JOBSET_NAME}={name}"
        else:
            self.batch.create_namespaced_job(namespace, cast(Any, indexed_job(name, workers)))
            selector = f"bench={name}"
        deadline = started + 600
        while not self.started(namespace, selector, workers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} {workers} workers not started in 600 s")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        self.core.delete_namespace(namespace)
        while self.core.list_namespaced_pod(namespace).items:  # free the nodes again
            time.sleep(0.2)
        return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="gangs of 16 and 64, 1 repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-jobset", action="store_true",
                        help="without the JobSet peer (not built here yet, say)")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in KINDS if k != "jobset" or not args.no_jobset)
    sizes = (16, 64) if args.quick else (16, 64, 256)
    repeats = 1 if args.quick else args.repeats
    group = {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
             "metadata": {"name": "bench-trn2"},
             "spec": {"nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
                      "networkLevels": ["topology.k8s.aws/network-node-layer-1",
                                        "topology.k8s.aws/network-node-layer-2"],
                      "accelerator": {"perNode": 16}, "nodesPerDomain": 4,
                      "probes": {"schedule": ""}}}  # no idle-node sweep mid-measurement
    results: dict[int, dict[str, list[float]]] = {}
    with operator_sandbox(NAME, FLEET, group, wait_seconds=600) as box:
        if "jobset" in kinds:
            jobsets.start(box)
        bench = Bench(box)
        for workers in sizes:
            results[workers] = {kind: [] for kind in kinds}
            for trial in range(repeats):
                order = kinds[trial % len(kinds):] + kinds[:trial % len(kinds)]
                for kind in order:
                    seconds = bench.run(kind, workers, trial)
                    results[workers][kind].append(seconds)
                    print(f"# {kind} {workers} workers, trial {trial}: {seconds:.2f}s",
                          file=sys.stderr, flush=True)
    rows = [row_of(workers, times) for workers, times in results.items()]
    print(table(rows, kinds))
    if args.json:
        print(json.dumps({"fleet": FLEET, "repeats": repeats,
                          "jobset": versions.JOBSET if "jobset" in kinds else None,
                          "results": rows}, indent=1))
    return 0


def row_of(workers: int, times: dict[str, list[float]]) -> dict[str, Any]:
    """One gang size's medians, ratios of ours to each other system, and every trial."""
    median = {kind: statistics.median(seconds) for kind, seconds in times.items()}
    row: dict[str, Any] = {"workers": workers}
    for kind, seconds in median.items():
        row[f"{kind}_s"] = round(seconds, 2)
        row[f"{kind}_all"] = [round(t, 2) for t in times[kind]]
        if kind != "ours":
            row[f"ratio_{kind}"] = round(median["ours"] / seconds, 2)
    return row


def table(rows: list[dict[str, Any]], kinds: tuple[str, ...]) -> str:
    """The medians as a markdown table, with the ratios of ours to each peer."""
    titles = {"ours": "ours (TrainingJob) s", "jobset": f"JobSet {versions.JOBSET} s",
              "baseline": "Indexed Job s"}
    peers = [k for k in kinds if k != "ours"]
    head = [*(titles[k] for k in kinds), *(f"ours / {titles[k][:-2]}" for k in peers)]
    lines = ["| workers | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for row in rows:
        cells = [*(str(row[f"{k}_s"]) for k in kinds), *(str(row[f"ratio_{k}"]) for k in peers)]
        lines.append(f"| {row['workers']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
