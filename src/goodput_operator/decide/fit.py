"""Which of a group's nodes a workload's pod fits (topology.constraints), worked out once
per pass for each group and pod spec: every gang waiting for the same template asks once."""

from __future__ import annotations

import json
from typing import Any

from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.topology.constraints import eligibility, pod_requests
from goodput_operator.topology.model import Fleet

Obj = dict[str, Any]


def pod_fit(snapshot: Snapshot, fleet: Fleet, group: str, pod_spec: Obj
            ) -> tuple[frozenset[str] | None, str]:
    """The nodes of FLEET a pod of POD_SPEC may run on (None: all of them), and why the
    others may not."""
    relevant = {k: pod_spec.get(k) for k in ("nodeSelector", "affinity", "tolerations")}
    relevant["requests"] = {k: str(v) for k, v in pod_requests(pod_spec).items()}
    key = ("pod_fit", group, json.dumps(relevant, sort_keys=True))
    if key not in snapshot.memo:
        nodes = [snapshot.nodes[n] for n in fleet.nodes if n in snapshot.nodes]
        snapshot.memo[key] = eligibility(nodes, pod_spec)
    found: tuple[frozenset[str] | None, str] = snapshot.memo[key]
    return found
