"""Placement record benchmark: what the largest gang's placement costs in status and in its
hostfile ConfigMap, against one entry per rank (the record before) in the same run.

    python -m bench.record [--workers N] [--json]

Gangs of N workers (default 8192, spec.workers' cap), one per node, in fabric order on
Trn2 UltraServers (4 nodes), GB200 NVL72 racks (18 nodes) and EKS-style node names
(ip-a-b-c-d.ec2.internal), fresh and after 1% of the ranks were replaced by spares of
other domains (each replacement splits a slice). Reported: the status record's bytes and
the baseline's (JSON as the API server stores it), their ratio, the time to write and to
read the record; the hostfile ConfigMap's bytes with 63-character job and namespace names
against the previous form (full DNS names plus a per-rank node list), beside the 1 MiB
ConfigMap limit.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from goodput_operator.resources import trainingjob as build
from goodput_operator.topology.record import ranks_of, to_slices

Obj = dict[str, Any]
FLEETS = {  # name: (nodes per domain, node name pattern)
    "trn2": (4, "trn2-us-{d:04d}-n{n}"),
    "nvl72": (18, "gb200-rack-{d:04d}-n{n:02d}"),
    "eks": (4, "ip-10-{d1}-{d2}-{n}.ec2.internal"),
}
CONFIG_MAP_LIMIT = 1 << 20


def gang(workers: int, per_domain: int, pattern: str, replaced: float, seed: int
         ) -> list[Obj]:
    """WORKERS ranks in fabric order; a REPLACED fraction moved to other domains' spares."""
    ranks = []
    for rank in range(workers):
        d, n = divmod(rank, per_domain)
        ranks.append({"rank": rank, "domain": f"us-{d:05d}",
                      "node": pattern.format(d=d, n=n, d1=d // 256, d2=d % 256)})
    rng = random.Random(seed)
    spare_domain = workers // per_domain + 1
    for i, moved in enumerate(rng.sample(ranks, int(workers * replaced))):
        d = spare_domain + i
        moved.update(domain=f"us-{d:05d}",
                    node=pattern.format(d=d, n=per_domain - 1, d1=d // 256, d2=d % 256))
    return ranks


def timed(fn: Any, *args: Any, repeat: int = 5) -> tuple[Any, float]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - started)
    return result, best


def measure_record(workers: int) -> list[Obj]:
    rows = []
    for fleet, (per_domain, pattern) in FLEETS.items():
        for replaced in (0.0, 0.01):
            ranks = gang(workers, per_domain, pattern, replaced, seed=1)
            slices, write_s = timed(to_slices, ranks)
            record = {"slices": slices}
            back, read_s = timed(ranks_of, record)
            assert back == ranks, "the record reads back exactly"
            compact = len(json.dumps(record, separators=(",", ":")))
            per_rank = len(json.dumps({"ranks": ranks}, separators=(",", ":")))
            rows.append({"fleet": fleet, "replaced": replaced, "slices": len(slices),
                         "bytes": compact, "baseline_bytes": per_rank,
                         "ratio": round(compact / per_rank, 3),
                         "write_ms": round(write_s * 1000, 1),
                         "read_ms": round(read_s * 1000, 1)})
    return rows


def previous_hostfile_bytes(job: Obj, workers: int, node_name: str) -> int:
    """The hostfile as it was: full DNS names, and a `<rank> <node>` line per rank."""
    meta = job["metadata"]
    service = build.service_name(meta["name"])
    lines = "".join(f"w{i}.{service}.{meta['namespace']}.svc slots=16\n"
                    for i in range(workers))
    nodes = "".join(f"{i} {node_name}\n" for i in range(workers))
    return len(lines.encode()) + len(nodes.encode())


def measure_hostfile(workers: int) -> Obj:
    job = {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "j" * 63, "namespace": "n" * 63, "uid": "u"},
           "spec": {"ultraServerGroup": "g", "workers": workers,
                    "acceleratorsPerWorker": 16, "template": {"spec": {"containers": [
                        {"name": "w", "image": "x"}]}}}}
    data = build.hostfile(job, workers)["data"]
    now = sum(len(v.encode()) for v in data.values())
    before = previous_hostfile_bytes(job, workers, "ip-10-100-200-250.us-west-2.compute.internal")
    return {"bytes": now, "baseline_bytes": before, "ratio": round(now / before, 3),
            "limit": CONFIG_MAP_LIMIT, "fits": now < CONFIG_MAP_LIMIT,
            "baseline_fits": before < CONFIG_MAP_LIMIT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8192)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"workers": args.workers, "record": measure_record(args.workers),
              "hostfile": measure_hostfile(args.workers)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"placement record of {args.workers} workers (baseline: one entry per rank)")
    print(f"{'fleet':<7}{'replaced':>9}{'slices':>8}{'bytes':>10}{'baseline':>10}"
          f"{'ratio':>7}{'write ms':>10}{'read ms':>9}")
    for row in result["record"]:
        print(f"{row['fleet']:<7}{row['replaced']:>9.0%}{row['slices']:>8}{row['bytes']:>10}"
              f"{row['baseline_bytes']:>10}{row['ratio']:>7.3f}{row['write_ms']:>10}"
              f"{row['read_ms']:>9}")
    hostfile = result["hostfile"]
    print(f"hostfile ConfigMap, 63-character job and namespace: {hostfile['bytes']} bytes "
          f"(fits: {hostfile['fits']}) against {hostfile['baseline_bytes']} before "
          f"(fits: {hostfile['baseline_fits']}); ratio {hostfile['ratio']}; "
          f"limit {hostfile['limit']}")


if __name__ == "__main__":
    main()
