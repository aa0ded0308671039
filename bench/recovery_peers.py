"""Recovery, head to head with JobSet (issue 46, item 3): a node failure under a running
gang, ours against JobSet v0.11.1 at its defaults and tuned, in one sandbox.

    python -m bench.recovery_peers [--json] [--trials N] [--default-trials N]
                                   [--kueue-trials N] [--double-trials N]

The sandbox: the built-in trn2 fleet (4 UltraServers x 4 nodes, KWOK), one control plane,
so the same node lifecycle controller and node-monitor settings for every system. The
gang: 3 workers x 16 chips (one node each). Each trial fails the node of rank (index) 1
(`faults.fail_node`: KWOK turns it NotReady) and polls the API server every 50 ms until
the gang runs again: as many pods as workers, all Running, none on the failed node. Then
the node is healed and the next trial runs.

- **ours:** a TrainingJob on an UltraServerGroup with one spare per UltraServer and
  default quarantine settings (bench/recovery.py's), the operator running.
- **JobSet, defaults:** a JobSet of one replicated Indexed Job, nothing set that JobSet or
  the Job leave to defaults: the pods tolerate the lifecycle controller's NoExecute taints
  for the default 300 s, then are evicted, and the Job (backoffLimit 6 by default) makes
  the lost index again wherever kube-scheduler puts it. Its `--default-trials` (default 1:
  each takes over five minutes).
- **JobSet, tuned:** as a user who read JobSet's docs would run a gang: tolerations of 0 s
  for the not-ready and unreachable NoExecute taints (evicted as soon as the node is
  tainted), the Job's backoffLimit 0, and `failurePolicy.maxRestarts` 10: the whole gang
  is made again (JobSet's restart) on nodes kube-scheduler chooses.
- **Kueue TAS hot swap:** Kueue v0.17.0 at its defaults (TASFailedNodeReplacement and
  TASReplaceNodeOnPodTermination are on: a NotReady node whose pods ended, or one NotReady
  for 30 s, is replaced in the Workload's topology assignment by a node of the same
  UltraServer), the gang an Indexed Job that TAS admits inside one UltraServer
  (sandbox/peers.py), tuned as above (tolerations of 0 s, so the lost pod ends at the
  taint; the Job's default backoffLimit makes its index again, and TAS puts it on the
  replacement). Its `--kueue-trials` (default 3).
The operator is stopped while the peers run (it would quarantine the failed node, which
changes nothing for them but is not their doing).

Reported per system, median (and every trial): seconds to the gang running again, the
lifecycle controller's NoExecute taint on the failed node, pods made again, whether the
surviving ranks kept their nodes (rank order) and whether the gang stayed in the
UltraServers it was in. KWOK deletes an evicted pod at once (a real kubelet that is down
never confirms; the pod stays Terminating until it is force-deleted): generous to JobSet.

A second failure during the first replacement (`--double-trials`, default 2 per system:
ours, JobSet tuned, Kueue TAS hot swap): rank 1's node fails; the moment a pod exists that
was not running before (the replacement, bound or not), rank 2's node fails too. Reported
per trial: seconds to the gang running again off both nodes, the whole-gang restarts it
took (ours' and JobSet's `status.restarts`; for Kueue, the Workload's evictions: the gang
requeued), pods made again, whether rank 0 kept its node and the gang its UltraServer.

Real nodes with the example trainer, ours against a tuned JobSet: `bench.recovery
--real-nodes --jobset N`, and Kueue TAS hot swap with `--kueue N` (bench/recovery_real.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config

from bench import recovery
from bench.harness import OperatorProcess, sandbox, wait_until
from goodput_operator import names
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.health import quarantine as q
from goodput_operator.sandbox import cluster, faults, jobset, kueue, peers, versions
from goodput_operator.topology.record import ranks_of

Obj = dict[str, Any]
NAMESPACE = "bench"
WORKERS = 3
DOMAIN_LABEL = "topology.k8s.aws/ultraserver-id"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
NEURON = "aws.amazon.com/neuron"
QUEUE = "trn2"
GROUP = UltraServerGroupSpec.model_validate(recovery.group()["spec"])
TIMEOUT = 420.0  # seconds a trial may take: the defaults' 300 s toleration and then some


def evicted_at_the_taint() -> list[Obj]:
    """Tolerations of 0 s for the lifecycle controller's NoExecute taints: a pod ends as
    soon as its node is tainted not-ready or unreachable (the peers' tuned runs)."""
    return [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}
            for key in faults.LIFECYCLE_TAINTS]


def jobset_gang(name: str, tuned: bool) -> Obj:
    """The gang as a JobSet: at its defaults, or TUNED as described above."""
    pod: Obj = {"restartPolicy": "Never", "containers": [{
        "name": "worker", "image": "example.com/train:1",
        "resources": {"requests": {NEURON: "16"}, "limits": {NEURON: "16"}}}]}
    job: Obj = {"completionMode": "Indexed", "completions": WORKERS, "parallelism": WORKERS}
    spec: Obj = {}
    if tuned:
        pod["tolerations"] = evicted_at_the_taint()
        job["backoffLimit"] = 0
        spec["failurePolicy"] = {"maxRestarts": 10}
    job["template"] = {"metadata": {"labels": {cluster.KEEP_RUNNING: "true"}}, "spec": pod}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {**spec, "replicatedJobs": [{"name": "workers", "replicas": 1,
                                                 "template": {"spec": job}}]}}


def tas_gang(name: str) -> Obj:
    """The gang as an Indexed Job for Kueue TAS, inside one UltraServer, tuned as above."""
    job = peers.tas_gang(name, NAMESPACE, QUEUE, GROUP, WORKERS, 16, "domain",
                         keep_running=True)
    job["spec"]["template"]["spec"]["tolerations"] = evicted_at_the_taint()
    return job


def gang_state(pods: list[Obj], victims: frozenset[str], rank_label: str = INDEX_LABEL,
               workers: int = WORKERS) -> dict[int, tuple[str, str]] | None:
    """Rank -> (node, pod uid) when the gang of WORKERS runs: as many pods not being
    deleted, all Running, none on a failed node (VICTIMS), one per rank (RANK_LABEL);
    else None."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if len(live) != workers or any(
            (p.get("status") or {}).get("phase") != "Running" or
            p["spec"].get("nodeName") is None or p["spec"]["nodeName"] in victims
            for p in live):
        return None
    ranks = {int(p["metadata"]["labels"].get(rank_label, -1)): (p["spec"]["nodeName"],
                                                                p["metadata"]["uid"])
             for p in live}
    return ranks if sorted(ranks) == list(range(workers)) else None


def replacing(pods: list[Obj], before: dict[int, tuple[str, str]]) -> bool:
    """Whether the first replacement is under way: a live pod of the gang that was not
    running before the failure (the replacement, bound or not yet)."""
    old = {uid for _, uid in before.values()}
    return any(p["metadata"]["uid"] not in old and not p["metadata"].get("deletionTimestamp")
               for p in pods)


def compare(before: dict[int, tuple[str, str]], after: dict[int, tuple[str, str]],
            domains: dict[str, str], *failed_ranks: int) -> Obj:
    """What a recovery kept: pods made again, the surviving ranks on their nodes, the
    gang in the UltraServers it was in."""
    return {"recreated": sum(1 for r in after if after[r][1] != before[r][1]),
            "ranks_kept": all(after[r][0] == before[r][0] for r in before
                              if r not in failed_ranks),
            "domains_kept": {domains[n] for n, _ in after.values()} <=
            {domains[n] for n, _ in before.values()}}


OURS, KUEUE = "ours", "kueue-tas-hotswap"


class Peer:
    """The gangs of each system in NAMESPACE (ours a TrainingJob, JobSet's a JobSet,
    Kueue's an Indexed Job), watched through the API the same way."""

    def __init__(self, box: cluster.Sandbox) -> None:
        self.box = box
        api = config.new_client_from_config(config_file=str(box.kubeconfig))  # type: ignore[no-untyped-call]
        self.api, self.core = api, client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def pods(self, system: str, name: str) -> list[Obj]:
        """The pods of SYSTEM's gang NAME."""
        key = {OURS: names.JOB_LABEL, KUEUE: "batch.kubernetes.io/job-name"}.get(
            system, jobset.JOBSET_NAME)
        listed = self.api.sanitize_for_serialization(self.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"{key}={name}"))
        return cast(list[Obj], listed["items"])

    def state(self, system: str, name: str, victims: frozenset[str], workers: int = WORKERS
              ) -> dict[int, tuple[str, str]] | None:
        return gang_state(self.pods(system, name), victims,
                          names.RANK_LABEL if system == OURS else INDEX_LABEL, workers)

    def tainted(self, node: str) -> bool:
        body = self.api.sanitize_for_serialization(self.core.read_node(node))
        return any(t.get("key") in faults.LIFECYCLE_TAINTS and t.get("effect") == "NoExecute"
                   for t in body["spec"].get("taints") or [])

    def body(self, system: str, name: str) -> Obj:
        if system == KUEUE:
            return cast(Obj, self.api.sanitize_for_serialization(
                client.BatchV1Api(self.api).read_namespaced_job(name, NAMESPACE)))
        group, plural = ("goodput.dev", "trainingjobs") if system == OURS else (
            "jobset.x-k8s.io", "jobsets")
        return cast(Obj, self.custom.get_namespaced_custom_object(
            group, "v1alpha1" if system == OURS else "v1alpha2", NAMESPACE, plural, name))

    def failed(self, system: str, name: str) -> bool:
        status = self.body(system, name).get("status") or {}
        if system == OURS:
            return bool(status.get("phase") == "Failed")
        return any(c.get("type") == "Failed" and c.get("status") == "True"
                   for c in status.get("conditions") or [])

    def restarts(self, system: str, name: str) -> int:
        """Whole-gang restarts so far: ours' and JobSet's `status.restarts`; for Kueue, the
        Workload's evictions (`status.schedulingStats.evictions`): the gang requeued."""
        if system != KUEUE:
            return int((self.body(system, name).get("status") or {}).get("restarts") or 0)
        found = cast(Obj, self.custom.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", NAMESPACE, "workloads"))["items"]
        return sum(int(e.get("count") or 0) for w in found
                   if any(o.get("kind") == "Job" and o.get("name") == name
                          for o in w["metadata"].get("ownerReferences") or [])
                   for e in ((w.get("status") or {}).get("schedulingStats") or {}).get(
                       "evictions") or [])

    def submit(self, system: str, name: str) -> None:
        if system == OURS:
            job = recovery.training_job()
            job["metadata"]["name"] = name
            self.box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(job))
        elif system == KUEUE:
            self.box.kubectl("apply", "--server-side", "-f", "-",
                             input_text=json.dumps(tas_gang(name)))
        else:
            self.custom.create_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets",
                jobset_gang(name, system == "jobset-tuned"))

    def delete(self, system: str, name: str) -> None:
        kind = {OURS: "trainingjob", KUEUE: "job"}.get(system, "jobset")
        self.box.kubectl("delete", kind, "-n", NAMESPACE, name, "--wait=false",
                         "--cascade=foreground")

    def running(self, system: str, name: str, workers: int = WORKERS
                ) -> dict[int, tuple[str, str]]:
        found: dict[int, tuple[str, str]] | None = None

        def runs() -> bool:
            nonlocal found
            found = self.state(system, name, frozenset(), workers)
            return found is not None
        wait_until(runs, 120, f"{system} gang {name} running")
        assert found is not None
        return found

    def trial(self, system: str, name: str, domains: dict[str, str],
              second_failure: bool = False) -> Obj:
        """One node failure under the gang (rank 1's node), to the gang running again off
        it. With SECOND_FAILURE, rank 2's node fails too the moment a replacement pod
        exists (a second failure during the first replacement), to the gang running again
        off both. With the whole-gang restarts (Kueue: evictions) it took."""
        self.submit(system, name)
        before = self.running(system, name)
        victims = [before[1][0]]
        restarts = self.restarts(system, name)
        t0 = time.monotonic()
        faults.fail_node(self.box, victims[0])
        row: Obj = {"system": system}
        after = None
        while after is None:
            now = time.monotonic() - t0
            if now > TIMEOUT or self.failed(system, name):
                row["outcome"] = "failed" if now <= TIMEOUT else "timed out"
                break
            if "k8s_taint" not in row and self.tainted(victims[0]):
                row["k8s_taint"] = round(now, 2)
            if second_failure and len(victims) == 1:
                if replacing(self.pods(system, name), before):
                    victims.append(before[2][0])
                    faults.fail_node(self.box, victims[1])
                    row["second_failure"] = round(time.monotonic() - t0, 2)
            else:
                after = self.state(system, name, frozenset(victims))
            time.sleep(recovery.POLL)
        if after is not None:
            row |= {"outcome": "recovered", "total": round(time.monotonic() - t0, 2),
                    "restarts": self.restarts(system, name) - restarts,
                    **compare(before, after, domains, *range(1, len(victims) + 1))}
        self.finish(system, name, victims)
        return row

    def finish(self, system: str, name: str, failed: list[str]) -> None:
        """The gang deleted, its pods gone, the failed nodes healed."""
        self.delete(system, name)
        wait_until(lambda: not self.pods(system, name), 120, f"{name}'s pods gone")
        for node in failed:
            heal(self.box, self.core, node)


def heal(box: cluster.Sandbox, core: client.CoreV1Api, node: str) -> None:
    """The node Ready again, out of any quarantine."""
    api = core.api_client
    faults.heal_node(box, node)
    wait_until(lambda: faults.recovered(api.sanitize_for_serialization(core.read_node(node))),
               120, f"{node} recovered")
    body = api.sanitize_for_serialization(core.read_node(node))
    core.patch_node(node, q.release_patch(body), _content_type="application/merge-patch+json")


def ours(box: cluster.Sandbox, trials: int, domains: dict[str, str]) -> list[Obj]:
    """recovery.Bench's trials, each with what it kept (ranks, domains, pods remade)."""
    bench = recovery.Bench(box)
    box.kubectl("apply", "--server-side", "-f", "-",
                input_text=json.dumps(recovery.training_job()))
    bench.wait("job running", lambda: bench.running(0))
    rows = []
    for trial in range(1, trials + 1):
        before = {r["rank"]: (r["node"], "") for r in ranks_of(bench.job()["status"]["placement"])}
        row = bench.trial(trial)
        after = {r["rank"]: (r["node"], "") for r in ranks_of(bench.job()["status"]["placement"])}
        kept = compare(before, after, domains, 1)
        rows.append({"system": "ours", "outcome": "recovered", "total": round(row["total"], 2),
                     "k8s_taint": round(row["k8s_taint"], 2),
                     "recreated": len(after), "ranks_kept": kept["ranks_kept"],
                     "domains_kept": kept["domains_kept"]})
        recovery.log(f"# ours trial {trial}: {rows[-1]}")
    box.kubectl("delete", "trainingjob", "-n", NAMESPACE, recovery.JOB, "--wait=true")
    return rows


def summary(rows: list[Obj]) -> Obj:
    """Per system: trials, recovered, median seconds to running again, the rest."""
    found: Obj = {}
    for system in dict.fromkeys(r["system"] for r in rows):
        mine = [r for r in rows if r["system"] == system]
        done = [r for r in mine if r["outcome"] == "recovered"]
        found[system] = {
            "trials": len(mine), "recovered": len(done),
            "total_median_s": round(statistics.median(r["total"] for r in done), 2)
            if done else None,
            "k8s_taint_median_s": _median(r.get("k8s_taint") for r in mine),
            "recreated": sorted({r["recreated"] for r in done}),
            "ranks_kept": f"{sum(r['ranks_kept'] for r in done)}/{len(done)}",
            "domains_kept": f"{sum(r['domains_kept'] for r in done)}/{len(done)}",
            "outcomes": sorted({r["outcome"] for r in mine})}
    return found


def _median(values: Any) -> float | None:
    found = [v for v in values if v is not None and not math.isnan(v)]
    return round(statistics.median(found), 2) if found else None


def table(found: Obj) -> str:
    lines = ["| system | recovered | to running again, median s | ours / it | NoExecute "
             "taint, median s | pods made again | ranks kept | UltraServers kept |",
             "|---|---|---|---|---|---|---|---|"]
    mine = (found.get("ours") or {}).get("total_median_s")
    for system, row in found.items():
        ratio = round(mine / row["total_median_s"], 3) if mine and row["total_median_s"] \
            else "n/a"
        lines.append(f"| {system} | {row['recovered']}/{row['trials']} | "
                     f"{row['total_median_s']} | {ratio} | {row['k8s_taint_median_s']} | "
                     f"{row['recreated']} | {row['ranks_kept']} | {row['domains_kept']} |")
    return "\n".join(lines)


def double_table(rows: list[Obj]) -> str:
    """One line per second-failure trial."""
    lines = ["| system | outcome | second failure at, s | to running again, s | whole-gang "
             "restarts (Kueue: evictions) | pods made again | rank 0 kept | UltraServers "
             "kept |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['system']} | {row['outcome']} | {row.get('second_failure')} | "
                     f"{row.get('total')} | {row.get('restarts')} | {row.get('recreated')} | "
                     f"{row.get('ranks_kept')} | {row.get('domains_kept')} |")
    return "\n".join(lines)


def double_trials(peer: Peer, system: str, trials: int, domains: dict[str, str]
                  ) -> list[Obj]:
    rows = []
    for trial in range(trials):
        rows.append(peer.trial(system, f"{system}-2nd-{trial}", domains, second_failure=True))
        recovery.log(f"# {system} second-failure trial {trial}: {rows[-1]}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3, help="ours and JobSet tuned")
    parser.add_argument("--default-trials", type=int, default=1)
    parser.add_argument("--kueue-trials", type=int, default=3)
    parser.add_argument("--double-trials", type=int, default=2,
                        help="second-failure trials of ours, JobSet tuned and Kueue TAS")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows: list[Obj] = []
    doubles: list[Obj] = []
    with sandbox("bench-recovery-peers", recovery.FLEET, recovery.group(),
                 namespaces=[NAMESPACE]) as box:
        domains = {n["metadata"]["name"]: n["metadata"]["labels"].get(DOMAIN_LABEL, "")
                   for n in json.loads(box.kubectl("get", "nodes", "-o", "json").stdout)["items"]}
        operator = OperatorProcess(box, Path(box.home) / "operator.log")
        operator.start()
        try:
            wait_until(operator.ready, 120, "operator ready")
            rows += ours(box, args.trials, domains)
            doubles += double_trials(Peer(box), OURS, args.double_trials, domains)
        finally:
            operator.stop()
        jobset.start(box)
        peer = Peer(box)
        plan = [("jobset-tuned", args.trials), ("jobset-defaults", args.default_trials)]
        for system, trials in plan:
            for trial in range(trials):
                rows.append(peer.trial(system, f"{system}-{trial}", domains))
                recovery.log(f"# {system} trial {trial}: {rows[-1]}")
        doubles += double_trials(peer, "jobset-tuned", args.double_trials, domains)
        jobset.stop(box)
        if args.kueue_trials:
            kueue.start(box)
            for obj in peers.tas_objects(QUEUE, GROUP, len(domains), NAMESPACE):
                box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(obj))
            for trial in range(args.kueue_trials):
                rows.append(peer.trial(KUEUE, f"tas-{trial}", domains))
                recovery.log(f"# kueue-tas-hotswap trial {trial}: {rows[-1]}")
            doubles += double_trials(peer, KUEUE, args.double_trials, domains)
    found = summary(rows)
    print(f"Node failure under a running {WORKERS}-worker gang, KWOK trn2 fleet, JobSet "
          f"{versions.JOBSET}, Kueue {versions.KUEUE}; one control plane, the same "
          "node-monitor settings")
    print(table(found))
    if doubles:
        print("\nA second failure during the first replacement (rank 2's node, the moment a "
              "replacement pod exists):")
        print(double_table(doubles))
    if args.json:
        print(json.dumps({"jobset": versions.JOBSET, "kueue": versions.KUEUE,
                          "fleet": recovery.FLEET, "summary": found, "trials": rows,
                          "second_failure_trials": doubles}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
