"""Control-loop benchmark: apply -> every worker running, ours against kube-scheduler alone.

    python -m bench.control_loop [--quick] [--json] [--repeats N]

On a sandbox with a 512-node synthetic Trn2 fleet (128 UltraServers), for gangs of 16, 64
and 256 workers x 16 chips, in the same run and alternating:
- ours: a TrainingJob (gated pods, topology placement, pinning, ungating by the operator);
- baseline: the same pods as a plain Indexed Job (completions = parallelism = N), placed by
  kube-scheduler alone, no gang semantics, no topology.
Time is from the create call to the moment every pod has started (phase Running, or for
the Job also Succeeded: KWOK completes Job pods right after they run). Medians over
--repeats; the ratio ours/baseline is printed. Target: 256 workers within 1.5x.
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
from goodput_operator.sandbox import cluster

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
    args = parser.parse_args(argv)
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
        bench = Bench(box)
        for workers in sizes:
            results[workers] = {"ours": [], "baseline": []}
            for trial in range(repeats):
                order = ("ours", "baseline") if trial % 2 == 0 else ("baseline", "ours")
                for kind in order:
                    seconds = bench.run(kind, workers, trial)
                    results[workers][kind].append(seconds)
                    print(f"# {kind} {workers} workers, trial {trial}: {seconds:.2f}s",
                          file=sys.stderr, flush=True)
    rows = []
    for workers, times in results.items():
        ours, base = statistics.median(times["ours"]), statistics.median(times["baseline"])
        rows.append({"workers": workers, "ours_s": round(ours, 2),
                     "baseline_s": round(base, 2), "ratio": round(ours / base, 2),
                     "ours_all": [round(t, 2) for t in times["ours"]],
                     "baseline_all": [round(t, 2) for t in times["baseline"]]})
    print("| workers | ours (TrainingJob) s | baseline (Indexed Job) s | ratio ours/baseline |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['workers']} | {row['ours_s']} | {row['baseline_s']} | {row['ratio']} |")
    if args.json:
        print(json.dumps({"fleet": FLEET, "repeats": repeats, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
