"""Which of a group's nodes a workload's pod fits (topology.constraints), worked out once
per pass for each group and pod spec: every gang waiting for the same template, and the
autoscaler sizing an endpoint, asks once (State.fits, emptied as each pass starts)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from goodput_operator.decide.types import Memo
from goodput_operator.topology.constraints import eligibility, pod_requests
from goodput_operator.topology.model import Fleet

Obj = dict[str, Any]


def pod_fit(nodes: Mapping[str, Obj], memo: Memo, fleet: Fleet, group: str,
            pod_spec: Obj) -> tuple[frozenset[str] | None, str]:
    """The nodes of FLEET (bodies in NODES) a pod of POD_SPEC may run on (None: all of
    them), and why the others may not; remembered in MEMO."""
    relevant = {k: pod_spec.get(k) for k in ("nodeSelector", "affinity", "tolerations")}
    relevant["requests"] = {k: str(v) for k, v in pod_requests(pod_spec).items()}
    key = ("pod_fit", group, json.dumps(relevant, sort_keys=True))
    return memo.recall(key, lambda: eligibility([nodes[n] for n in fleet.nodes if n in nodes],
                                                pod_spec))
