"""Quarantine decisions: what counts as unhealthy, grace, storm guard, release."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.ultraservergroup import Quarantine
from goodput_operator.health import quarantine as q
from goodput_operator.times import millis

NOW = 1_800_000_000.0


def node(name: str, ready: str = "True", conditions: tuple[tuple[str, str], ...] = (),
         taints: tuple[str, ...] = (), record: q.Finding | None = None,
         by: str = q.BY_OPERATOR, at: float = NOW - 1000) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "resourceVersion": "7", "annotations": {}},
        "spec": {"taints": [{"key": k, "value": "x", "effect": "NoSchedule"} for k in taints]},
        "status": {"conditions": [{"type": "Ready", "status": ready,
                                   "lastTransitionTime": "2027-01-15T07:59:50Z"}]
                   + [{"type": t, "status": s} for t, s in conditions]},
    }
    if record is not None:
        patch = q.quarantine_patch(body, record, at, by)
        body["spec"]["taints"] = patch["spec"]["taints"]
        body["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    return body


POLICY = Quarantine()  # grace 5 s, maxUnavailable 20%, release after 600 s healthy


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (node("a"), None),
        (node("a", ready="False"), "NodeNotReady"),
        (node("a", ready="Unknown"), "NodeNotReady"),
        (node("a", conditions=(("NeuronHealth", "True"),)), "NodeCondition"),
        (node("a", conditions=(("NeuronHealth", "False"),)), None),
        (node("a", conditions=(("GpuHealth", "True"),)), "NodeCondition"),
        (node("a", taints=("sagemaker.amazonaws.com/node-health-status",)), "HealthTaint"),
        (node("a", taints=("node.kubernetes.io/not-ready",)), None),  # kubelet's, not ours
    ],
)
def test_what_counts_as_unhealthy(body: dict[str, Any], reason: str | None) -> None:
    found = q.finding(body, POLICY, None, NOW)
    assert (found.reason if found else None) == reason


def test_not_ready_waits_out_the_grace_period_from_when_it_was_first_seen() -> None:
    nodes = {"a": node("a", ready="False")}
    early = q.decide(nodes, POLICY, NOW, {"a": NOW - 4}, {}, {})
    assert early.quarantine == [] and early.wake_at == NOW + 1
    due = q.decide(nodes, POLICY, NOW, {"a": NOW - 5}, {}, {})
    assert [n for n, _ in due.quarantine] == ["a"]
    assert due.quarantine[0][1].since == NOW - 5     # later than the stale transition time


def test_device_conditions_and_worker_reports_count_at_once() -> None:
    nodes = {"a": node("a", conditions=(("NeuronHealth", "True"),)), "b": node("b"),
             **{f"x{i}": node(f"x{i}") for i in range(8)}}
    report = q.Finding("WorkerFailure", "worker w1 exited with code 74", NOW)
    decision = q.decide(nodes, POLICY, NOW, {}, {}, {"b": report})
    assert sorted(n for n, _ in decision.quarantine) == ["a", "b"]


@pytest.mark.parametrize(
    ("failing", "already", "limit", "tripped"),
    [
        (1, 0, "20%", False),   # 20% of 8 rounds up to 2
        (2, 0, "20%", False),
        (3, 0, "20%", True),
        (1, 2, "20%", True),    # quarantined nodes count against the budget
        (5, 0, "50%", True),
        (4, 0, "50%", False),
        (1, 0, 0, True),
    ],
)
def test_the_storm_guard_holds_every_quarantine_beyond_max_unavailable(
        failing: int, already: int, limit: int | str, tripped: bool) -> None:
    old = q.Finding("NodeNotReady", "Ready=False", NOW - 900)
    nodes = {f"n{i}": node(f"n{i}", ready="False" if i < failing else "True",
                           record=old if failing <= i < failing + already else None)
             for i in range(8)}
    policy = Quarantine(maxUnavailable=limit)
    decision = q.decide(nodes, policy, NOW, {n: NOW - 60 for n in nodes}, {}, {})
    assert (decision.storm is not None) is tripped
    assert len(decision.quarantine) == (0 if tripped else failing)
    assert len(decision.held) == (failing if tripped else 0)


@pytest.mark.parametrize(
    ("reason", "by", "healthy_for", "released"),
    [
        ("NodeNotReady", q.BY_OPERATOR, 600, True),
        ("NodeNotReady", q.BY_OPERATOR, 599, False),
        ("NodeNotReady", q.BY_HAND, 6000, False),            # by hand: released by hand
        ("SilentDataCorruption", q.BY_OPERATOR, 6000, False),  # by clean probes only
        ("Straggler", q.BY_OPERATOR, 6000, False),             # the same
    ],
)
def test_release_after_being_healthy_for_the_policy_period(
        reason: str, by: str, healthy_for: float, released: bool) -> None:
    body = node("a", record=q.Finding(reason, "evidence", NOW - 9000), by=by, at=NOW - 9000)
    decision = q.decide({"a": body}, POLICY, NOW, {}, {"a": NOW - healthy_for}, {})
    assert bool(decision.release) is released


def test_a_node_still_failing_is_never_released() -> None:
    body = node("a", ready="False", record=q.Finding("NodeNotReady", "e", NOW - 9000),
                at=NOW - 9000)
    assert q.decide({"a": body}, POLICY, NOW, {"a": NOW - 9000}, {}, {}).release == []


def test_the_patches_carry_taint_label_evidence_and_the_resource_version() -> None:
    body = node("a", taints=("other",))
    found = q.Finding("NodeNotReady", "Ready=False (SimulatedFailure)", NOW - 6)
    patch = q.quarantine_patch(body, found, NOW)
    assert patch["metadata"]["resourceVersion"] == "7"
    assert [t["key"] for t in patch["spec"]["taints"]] == ["other", names.QUARANTINE_TAINT]
    assert patch["metadata"]["labels"] == {names.QUARANTINE_LABEL: "NodeNotReady"}
    body["spec"]["taints"] = patch["spec"]["taints"]
    body["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    record = q.record_of(body)
    assert record == q.Record("NodeNotReady", found.evidence, NOW - 6, NOW, q.BY_OPERATOR)
    release = q.release_patch(body)
    assert [t["key"] for t in release["spec"]["taints"]] == ["other"]
    assert release["metadata"]["labels"] == {names.QUARANTINE_LABEL: None}


def test_observe_remembers_when_health_flipped() -> None:
    seen: dict[str, float] = {}
    healthy: dict[str, float] = {}
    q.observe("a", True, 10, seen, healthy)
    q.observe("a", True, 20, seen, healthy)
    assert seen == {"a": 10} and healthy == {}
    q.observe("a", False, 30, seen, healthy)
    q.observe("a", False, 40, seen, healthy)
    assert seen == {} and healthy == {"a": 30}


def test_failures_arriving_together_are_judged_together() -> None:
    nodes = {f"n{i}": node(f"n{i}", ready="False" if i < 3 else "True") for i in range(8)}
    seen = {"n0": NOW - 5, "n1": NOW - 4.99, "n2": NOW - 4.98}  # one due, two in grace
    decision = q.decide(nodes, POLICY, NOW, seen, {}, {})
    assert decision.quarantine == [] and [n for n, _ in decision.held] == ["n0"]
    assert decision.storm is not None and "3 node(s) failing" in decision.storm


@pytest.mark.parametrize("reason", ["SilentDataCorruption", "Straggler"])
@pytest.mark.parametrize(("clean", "released"), [(0, False), (2, False), (3, True)])
def test_a_corruption_or_straggler_suspect_is_released_after_enough_clean_probes(
        reason: str, clean: int, released: bool) -> None:
    body = node("a", record=q.Finding(reason, "rank 2 diverged", NOW - 9000), at=NOW - 9000)
    decision = q.decide({"a": body}, POLICY, NOW, {}, {"a": NOW - 9000}, {}, {"a": clean})
    assert bool(decision.release) is released            # releaseAfterCleanProbes: 3


def test_every_quarantine_raises_the_lemon_score() -> None:
    body = node("a")
    first = q.quarantine_patch(body, q.Finding("NodeNotReady", "e", NOW), NOW)
    assert first["metadata"]["annotations"][names.LEMON_ANNOTATION] == "1"
    body["metadata"]["annotations"][names.LEMON_ANNOTATION] = "4"
    again = q.quarantine_patch(body, q.Finding("NodeNotReady", "e", NOW), NOW)
    assert again["metadata"]["annotations"][names.LEMON_ANNOTATION] == "5"


def test_a_tenants_hold_raises_no_lemon_score_and_the_probes_answer_does() -> None:
    """A job's reports only ask for a probe (TENANCY.md rule 1): the hold they put on a
    node is no incident of the node's, so placement does not learn to avoid it; the probe's
    bad answer is, and raises the score as any quarantine does."""
    body = node("a")
    body["metadata"]["annotations"][names.LEMON_ANNOTATION] = "2"
    vote = q.Finding(q.SDC, "rank 2 diverged", NOW, owner="a/forger")
    held = q.quarantine_patch(body, vote, NOW)["metadata"]["annotations"]
    assert names.LEMON_ANNOTATION not in held and names.LEMON_AT_ANNOTATION not in held
    probe = q.quarantine_patch(body, q.Finding(q.SDC, "probe: bad device 3", NOW), NOW)
    assert probe["metadata"]["annotations"][names.LEMON_ANNOTATION] == "3"


@pytest.mark.parametrize(("by", "owner", "reason", "hold"), [
    ("operator", "a/forger", q.SDC, True),
    ("operator", "a/forger", q.STRAGGLER, True),
    ("operator", "", q.SDC, False),               # a probe's finding: the admin's
    ("manual", "a/forger", q.SDC, False),         # put there by hand
    ("operator", "a/forger", "NodeNotReady", False),
])
def test_what_is_a_tenants_hold(by: str, owner: str, reason: str, hold: bool) -> None:
    assert q.Record(reason, "e", NOW, NOW, by, owner).is_hold is hold


def test_a_kubelet_silent_past_lease_silence_seconds_fails_its_node_at_once() -> None:
    """A kubelet renewing every 10 s: 25 s of silence (leaseSilenceSeconds 20) fails the
    node while it still reads Ready (the node controller would take 40-50 s); 5 s is
    nothing, and the pass is asked for when that silence would reach 20 s."""
    nodes = {"silent": node("silent"), "fine": node("fine"),
             **{f"x{i}": node(f"x{i}") for i in range(8)}}
    renewing = {"silent": q.Renewal(NOW - 25, 10), "fine": q.Renewal(NOW - 4, 10)}
    decision = q.decide(nodes, POLICY, NOW, {}, {}, {}, renewing=renewing)
    [(name, found)] = decision.quarantine
    assert (name, found.reason, found.since) == ("silent", "NodeLeaseExpired", NOW - 5)
    assert "has not renewed the node's Lease for 25s" in found.evidence
    assert decision.wake_at == pytest.approx(NOW + 16.1)
    off = q.decide(nodes, Quarantine(leaseSilenceSeconds=0), NOW, {}, {}, {}, renewing=renewing)
    assert off.quarantine == [] and off.wake_at is None


def test_a_lease_renewed_slowly_is_judged_by_its_own_pace() -> None:
    """A simulated node's Lease (KWOK renews every 40-50 s under load) or a kubelet set to
    renew less often: the limit is two of its own intervals, never a false failure."""
    slow = q.Renewal(NOW - 60, 45)
    assert q.finding(node("kwok"), POLICY, None, NOW, slow, heard=NOW) is None
    found = q.finding(node("kwok"), POLICY, None, NOW + 31, slow, heard=NOW + 31)
    assert found is not None and "the limit is 90s" in found.evidence


def test_a_lease_counts_once_it_has_been_seen_renewed_and_its_pace_is_remembered() -> None:
    """A Lease nobody renews (a simulated node's, one a deleted node left) says nothing."""
    from goodput_operator.controllers.state import State

    state = State()
    state.renew_lease("n", NOW - 100)
    state.renew_lease("n", NOW - 100)
    assert state.renewing == {}
    state.renew_lease("n", NOW - 90)
    state.renew_lease("n", NOW - 60)
    state.renew_lease("n", NOW - 50)
    assert state.renewing == {"n": q.Renewal(NOW - 50, 30)}  # the longest recent interval
    state.forget_lease("n")
    assert state.leases == {} and state.renewing == {}


def test_a_kubelet_back_from_a_silence_is_alive_by_its_ready_heartbeat() -> None:
    """Healed and released by hand, a node must not be failed again on its old Lease before
    the watch brings the next renewal: the Ready heartbeat it posted on return counts."""
    body = node("back")
    body["status"]["conditions"][0]["lastHeartbeatTime"] = millis(NOW - 2)
    assert q.finding(body, POLICY, None, NOW, q.Renewal(NOW - 40, 10), heard=NOW) is None
    stale = node("dead")
    stale["status"]["conditions"][0]["lastHeartbeatTime"] = millis(NOW - 300)
    found = q.finding(stale, POLICY, None, NOW, q.Renewal(NOW - 40, 10), heard=NOW)
    assert found is not None and found.reason == "NodeLeaseExpired"


def test_when_every_lease_falls_silent_together_no_node_is_failed_for_it() -> None:
    """The control plane, the operator's watch or the simulator stalled, not the nodes:
    a silence counts only once another node has been heard after it ran out."""
    nodes = {f"x{i}": node(f"x{i}") for i in range(10)}
    stalled = {name: q.Renewal(NOW - 48, 10) for name in nodes}
    decision = q.decide(nodes, POLICY, NOW, {}, {}, {}, renewing=stalled)
    assert decision.quarantine == [] and decision.storm is None
    assert decision.wake_at == NOW + 1  # and looks again soon


@pytest.mark.parametrize(("annotations", "score"), [
    ({}, "1"),
    ({names.LEMON_ANNOTATION: "4"}, "5"),                                   # before decay
    ({names.LEMON_ANNOTATION: "2", names.LEMON_AT_ANNOTATION: millis(NOW - 14 * 86_400)},
     "2"),                                                                   # 2 x 1/2 + 1
    ({names.LEMON_ANNOTATION: "garbage"}, "1"),
])
def test_a_quarantine_raises_the_decayed_incident_score_and_stamps_it(
        annotations: dict[str, str], score: str) -> None:
    body = node("a")
    body["metadata"]["annotations"] = annotations
    patch = q.quarantine_patch(body, q.Finding("NodeNotReady", "e", NOW), NOW,
                               half_life_days=14)
    written = patch["metadata"]["annotations"]
    assert written[names.LEMON_ANNOTATION] == score
    assert written[names.LEMON_AT_ANNOTATION] == millis(NOW)


SDC_VOTE = q.Finding(q.SDC, "replicas disagree at step 40", NOW - 10, owner="team-a/llm")
PROBE_FOUND = q.Finding(q.SDC, "probe: matmul mismatch on device 3", NOW - 10)


@pytest.mark.parametrize(("found", "hold_ended_at", "clean_probe_at", "held_until"), [
    (SDC_VOTE, None, None, None),           # never held: the vote holds the node
    (SDC_VOTE, None, NOW - 60, None),       # a clean probe no tenant asked for silences none
    (SDC_VOTE, NOW - q.REHOLD_SECONDS - 1, None, None),  # a hold long ended: it may ask again
    (SDC_VOTE, NOW - 60, NOW - 60, NOW - 60 + q.REHOLD_SECONDS),  # answered a minute ago
    (SDC_VOTE, NOW - 60, None, NOW - 60 + q.REHOLD_SECONDS),  # or timed out unanswered
    (SDC_VOTE, NOW - 5, None, NOW - 5 + q.REHOLD_SECONDS),  # even for evidence from before
    (PROBE_FOUND, NOW - 60, NOW - 60, None),  # the admin's probe is never held back
])
def test_a_tenants_hold_on_a_node_is_not_renewed_for_half_an_hour_after_it_ends(
        found: q.Finding, hold_ended_at: float | None, clean_probe_at: float | None,
        held_until: float | None) -> None:
    """A namespace that blames a node again right after each hold ends would have the
    operator probe it, and hold it out of placements, without end: within REHOLD_SECONDS
    of a hold's end (written on the node by release_patch) its reports are held (listed,
    kept, woken for), not acted on. A clean probe on its own (the admin's schedule, a
    probe-on-start) silences nobody's real evidence."""
    blamed = node("a")
    if hold_ended_at is not None:
        released = q.release_patch(blamed, hold_ended_at)["metadata"]["annotations"]
        blamed["metadata"]["annotations"].update(
            {k: v for k, v in released.items() if v is not None})
    nodes = {"a": blamed, **{f"x{i}": node(f"x{i}") for i in range(8)}}
    probed = {} if clean_probe_at is None else {"a": clean_probe_at}
    decision = q.decide(nodes, POLICY, NOW, {}, {}, {"a": found}, probed_at=probed)
    if held_until is None:
        assert decision.quarantine == [("a", found)] and not decision.held_blame
        assert decision.not_before == {}
    else:
        assert decision.quarantine == [] and decision.held_blame == [("a", found)]
        assert decision.not_before == {"a": held_until}
        assert decision.wake_at == held_until
        later = q.decide(nodes, POLICY, held_until, {}, {}, {"a": found}, probed_at=probed)
        assert later.quarantine == [("a", found)]  # then it asks again


def test_the_end_of_a_tenants_hold_is_written_on_the_node_and_read_back() -> None:
    body = node("a", record=SDC_VOTE)
    assert q.hold_ended(body) is None
    patch = q.release_patch(body, NOW)
    assert patch["metadata"]["annotations"] == {names.EVIDENCE_ANNOTATION: None,
                                                names.HOLD_ENDED_ANNOTATION: millis(NOW)}
    body["metadata"]["annotations"] = {names.HOLD_ENDED_ANNOTATION: millis(NOW)}
    assert q.hold_ended(body) == NOW
    body["metadata"]["annotations"] = {names.HOLD_ENDED_ANNOTATION: "last tuesday"}
    assert q.hold_ended(body) is None  # edited by hand: no hold ended that we know of
    assert names.HOLD_ENDED_ANNOTATION not in q.release_patch(body)["metadata"]["annotations"]
