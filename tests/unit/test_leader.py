"""Leader election: when a replica may write the Lease (pure decision, table-tested)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from goodput_operator import names
from goodput_operator.controllers.kube import Kube, NotLeading
from goodput_operator.operator.leader import (
    LeaderElection,
    Observed,
    leading_pod,
    next_record,
)
from goodput_operator.times import micros

ME, OTHER = "op-a_1", "op-b_2"
T0 = 1_800_000_000.0


def lease(holder: str, renewed: str = "2027-01-15T08:00:00.000000Z", duration: int = 15,
          transitions: int = 0) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": "7"},
            "spec": {"holderIdentity": holder, "renewTime": renewed,
                     "acquireTime": "2027-01-15T07:00:00.000000Z",
                     "leaseDurationSeconds": duration, "leaseTransitions": transitions}}


def seen(record: dict[str, Any], at: float) -> Observed:
    spec = record["spec"]
    return Observed(spec["holderIdentity"], spec["renewTime"], "7", at)


@pytest.mark.parametrize(("case", "current", "observed_at", "now", "expect"), [
    ("no lease yet: create it", None, None, 100.0, "take"),
    ("released lease (empty holder): take at once", lease(""), 100.0, 100.0, "take"),
    ("our own lease: renew", lease(ME), 0.0, 100.0, "renew"),
    ("another's live lease: wait", lease(OTHER), 95.0, 100.0, None),
    ("another's lease seen unchanged for its whole duration: take over", lease(OTHER), 85.0,
     100.0, "take"),
    ("a longer lease duration is honoured", lease(OTHER, duration=60), 85.0, 100.0, None),
])
def test_who_may_write_the_lease(case: str, current: dict[str, Any] | None,
                                 observed_at: float | None, now: float,
                                 expect: str | None) -> None:
    observed = seen(current, observed_at) if current and observed_at is not None else None
    record = next_record(current, ME, observed, T0, now, 15.0)
    if expect is None:
        assert record is None, case
        return
    assert record is not None, case
    assert record["holderIdentity"] == ME
    assert record["renewTime"] == micros(T0)
    held_before = current and current["spec"]["holderIdentity"] == ME
    assert (record["acquireTime"] == micros(T0)) == (not held_before), case
    # as client-go: every change of holder of an existing Lease counts, a release included
    transitions = 1 if current and current["spec"]["holderIdentity"] != ME else 0
    assert record["leaseTransitions"] == transitions, case


def test_a_record_that_just_changed_means_its_holder_is_alive() -> None:
    """Expiry is measured from when this replica saw the record change, not from the
    holder's clock: a renewal we have not observed yet never looks expired."""
    stale_view = Observed(OTHER, "2027-01-15T07:59:00.000000Z", "6", 0.0)
    assert next_record(lease(OTHER), ME, stale_view, T0, 1000.0, 15.0) is None


def test_micro_time_is_the_api_servers_format() -> None:
    assert micros(0.5) == "1970-01-01T00:00:00.500000Z"


def _pod(name: str, ready: bool = True, labelled: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {names.LEADER_LABEL: "true"} if labelled else {}},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


@pytest.mark.parametrize(("pods", "identity", "leads"), [
    ([_pod("op-a"), _pod("op-b", labelled=False)], "op-a_1f2e3d4c", "op-a"),
    ([_pod("op-a"), _pod("op-b")], "op-b_00aa", "op-b"),       # a stale label on op-a
    ([_pod("op-a", ready=False)], "op-a_1f2e3d4c", None),      # holds it, not Ready yet
    ([_pod("op-a", labelled=False)], "op-a_1f2e3d4c", None),   # not labelled yet
    ([_pod("op-a")], "", None),                                # released: nobody leads
    ([_pod("op-a")], "op-gone_77", None),                      # the holder's pod is gone
])
def test_the_leading_pod_holds_the_lease_is_ready_and_labelled(
        pods: list[dict[str, Any]], identity: str, leads: str | None) -> None:
    found = leading_pod(pods, identity)
    assert (found["metadata"]["name"] if found else None) == leads


def test_a_replica_holds_the_lease_only_within_the_renew_deadline_and_writes_only_then(
        ) -> None:
    """What every write asks first: leading, and renewed within the renew deadline. A
    replica stalled past it may have a successor already, so its queued writes are
    dropped before they reach the API server (this client has no server to reach)."""
    kube = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    election = LeaderElection(kube, "ns", "lease", ME, renew_deadline=10.0)
    kube.fence = election.holds
    assert not election.holds()                  # never led
    election.leading, election.last_renewed = True, time.monotonic() - 3
    assert election.holds()
    election.last_renewed = time.monotonic() - 11    # renewals stalled past the deadline
    assert not election.holds()
    with pytest.raises(NotLeading):
        kube.patch_status("trainingjobs", "ns", "j", {"phase": "Running"})
    with pytest.raises(NotLeading):
        kube.create({"kind": "Pod", "metadata": {"namespace": "ns", "name": "p"}})


def test_a_release_that_meets_a_renewal_in_flight_reads_again_and_gives_the_lease_up(
        ) -> None:
    """The leader's last renewal may land between the release's read and its write (the
    test_operator flake of 2026-12-02: `could not release lease: Conflict`, and the
    standby waited for the lease to expire): the release reads again."""
    class Leases:
        def __init__(self) -> None:
            self.version, self.writes, self.conflicts = 1, [], 1

        def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Any:
            return {"metadata": {"name": name, "resourceVersion": str(self.version)},
                    "spec": {"holderIdentity": ME}}

        def replace_namespaced_lease(self, name: str, namespace: str, body: Any) -> None:
            if self.conflicts:
                self.conflicts -= 1
                self.version += 1                  # a renewal landed first
                raise ApiException(status=409, reason="Conflict")
            self.writes.append(body)

    kube = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    election = LeaderElection(kube, "ns", "lease", ME)
    leases = Leases()
    election.api = leases  # type: ignore[assignment]
    election._read = lambda: leases.read_namespaced_lease("lease", "ns")  # type: ignore[method-assign]
    election.leading = True
    election.release()
    [written] = leases.writes
    assert written["spec"]["holderIdentity"] == "" and not election.leading
