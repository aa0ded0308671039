"""What a failed worker means: an application error, an infrastructure error (blame the
node), a reason to fail the job, or nothing. Pure: pods are plain dicts.

Kubernetes itself says when it killed a pod for infrastructure reasons (the
DisruptionTarget condition, pod reasons such as NodeLost); otherwise the job's exit-code
rules decide, first match wins, and an unmatched non-zero code is an application error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from goodput_operator import names

if TYPE_CHECKING:
    from collections.abc import Sequence

    from goodput_operator.api.trainingjob import ExitCodeRule

Obj = dict[str, Any]
Kind = Literal["application", "infrastructure", "fail", "ignore"]
LAST_WORDS = 160  # characters of a failed worker's last log line an incident quotes
INFRA_POD_REASONS = ("NodeLost", "UnexpectedAdmissionError", "Evicted", "Terminated",
                     "NodeShutdown")


@dataclass(frozen=True)
class Classified:
    kind: Kind
    blame_node: bool  # suspect the pod's node: probe it before the gang restarts there
    detail: str
    finished_at: str | None  # when the worker exited (RFC 3339), if known


def exit_status(pod: Obj) -> tuple[int | None, str | None]:
    """The first non-zero exit code of the pod's containers, and when it exited."""
    terminated = _first_failed(pod)
    if terminated is None:
        return None, None
    return int(terminated["exitCode"]), terminated.get("finishedAt")


def _first_failed(pod: Obj) -> Obj | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return dict(terminated)
    return None


def last_words(pod: Obj) -> str:
    """` (last words: "...")`: the last line of the failed container's termination
    message (its log's tail, by the policy the operator sets on workers), cut to
    LAST_WORDS characters, so that an incident says what the worker said (its exception,
    say) and a reader need not find a deleted pod's log. Empty when there is none."""
    message = str((_first_failed(pod) or {}).get("message") or "")
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    line = "".join(c if c.isprintable() else "?" for c in lines[-1])
    return f' (last words: "{_cut(line)}")'


def how_it_failed(pod: Obj) -> str:
    """`exited with code N`, with the runtime's reason where it says more than "Error"
    (OOMKilled, ContainerCannotRun, ...); for a pod that failed with no container exit
    (a kubelet that refused it: OutOfcpu, NodeAffinity, ...), the pod's own reason and
    message, so that an incident never reads "code None" with nothing to go on."""
    terminated = _first_failed(pod)
    if terminated is not None:
        reason = str(terminated.get("reason") or "")
        said = f" ({reason})" if reason and reason not in ("Error", "Completed") else ""
        return f"exited with code {terminated['exitCode']}{said}"
    status = pod.get("status", {})
    why = _cut(": ".join(str(status[k]) for k in ("reason", "message") if status.get(k)))
    return f"failed with no container exit ({why or 'no reason given'})"


def _cut(text: str) -> str:
    """TEXT, at most LAST_WORDS characters ("..." where cut)."""
    return text if len(text) <= LAST_WORDS else text[:LAST_WORDS - 3] + "..."


def action_for(rules: Sequence[ExitCodeRule], code: int | None) -> str:
    """The exit-code rules' action for CODE (first matching rule; else restart)."""
    for rule in rules:
        if code is not None and code in rule.codes:
            return str(rule.action)
    return "restart"


def classify(pod: Obj, rules: Sequence[ExitCodeRule], node_failed: bool) -> Classified:
    """Why POD failed. NODE_FAILED: its node is known to be unhealthy."""
    rank = (pod["metadata"].get("labels") or {}).get(names.RANK_LABEL)
    name = pod["metadata"]["name"]
    if rank is not None:
        name = f"worker w{rank} ({name})"
    code, finished = exit_status(pod)
    status = pod.get("status", {})
    disruption = next((c for c in status.get("conditions") or []
                       if c.get("type") == "DisruptionTarget" and c.get("status") == "True"),
                      None)
    if node_failed:
        return Classified("infrastructure", False, f"{name} failed on a failed node "
                          f"(exit code {code})", finished)
    if disruption is not None or status.get("reason") in INFRA_POD_REASONS:
        why = (disruption or {}).get("reason") or status.get("reason")
        return Classified("infrastructure", False, f"{name} was stopped by Kubernetes "
                          f"({why})", finished)
    action = action_for(rules, code)
    where = f"{name} {how_it_failed(pod)}"
    if action == "probe":
        return Classified("infrastructure", True, f"{where}: its node is suspect by "
                          "failurePolicy.exitCodes", finished)
    if action == "fail":
        return Classified("fail", False, f"{where}; failurePolicy.exitCodes says fail"
                          f"{last_words(pod)}", finished)
    if action == "ignore":
        return Classified("ignore", False, f"{where} (ignored)", finished)
    # the worker's own words stay on its job: a node's evidence (the probe verdict above,
    # read cluster-wide) never quotes a tenant's log
    return Classified("application", False, f"{where}: an application error"
                      f"{last_words(pod)}", finished)
