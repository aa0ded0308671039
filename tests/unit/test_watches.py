"""The watches' handling of one event: its place moves on, tracked pods and Lease renewals
reach the state, and an expired place (410) asks for a new list."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from goodput_operator import names
from goodput_operator.controllers.kube import wrote
from goodput_operator.controllers.shapes import Decode
from goodput_operator.controllers.state import State, node_digest, slim_node
from goodput_operator.controllers.trainingjob import follow_up
from goodput_operator.health.quarantine import Renewal, record_of
from goodput_operator.operator import watches
from goodput_operator.operator.watches import Expired, NodeWatch, PodWatch, Watch, WorkloadWatch

pytestmark = pytest.mark.unit


def pod(name: str, version: str, devices: int = 0) -> dict[str, Any]:
    quantity = {"example.com/device": str(devices)}
    resources = {"requests": quantity, "limits": quantity} if devices else {}
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "spec": {"containers": [{"name": "c", "resources": resources}]}}


def watched() -> tuple[PodWatch, State, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    state = State()
    return PodWatch(state, None, loop), state, loop  # type: ignore[arg-type]


def test_tracked_pods_reach_the_state_and_untracked_ones_do_not() -> None:
    watch, state, loop = watched()
    try:
        watch.apply({"type": "ADDED", "object": pod("gpu", "10", devices=1)})
        watch.apply({"type": "ADDED", "object": pod("web", "11")})
        watch.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}})
        loop.run_until_complete(asyncio.sleep(0))  # the handed-over changes run
        assert list(state.pods) == ["ns/gpu"]
        assert watch.resource_version == "12"
        watch.apply({"type": "DELETED", "object": pod("gpu", "13", devices=1)})
        loop.run_until_complete(asyncio.sleep(0))
        assert not state.pods and watch.resource_version == "13"
    finally:
        loop.close()


@pytest.mark.parametrize(("event", "error"), [
    ({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}},
     Expired),
    ({"type": "ERROR", "object": {"code": 500, "message": "internal"}}, RuntimeError),
])
def test_an_error_event_ends_the_request(event: dict[str, Any], error: type) -> None:
    watch, _, loop = watched()
    try:
        with pytest.raises(error):
            watch.apply(event)
    finally:
        loop.close()


def test_a_lease_event_hands_over_the_node_s_last_renewal() -> None:
    from goodput_operator.operator.watches import LeaseWatch

    loop = asyncio.new_event_loop()
    state = State()
    watch = LeaseWatch(state, None, loop)  # type: ignore[arg-type]
    try:
        for renewed in ("2027-01-15T08:00:00.000000Z", "2027-01-15T08:00:10.000000Z"):
            watch.apply({"type": "MODIFIED", "object": {
                "metadata": {"name": "n1", "resourceVersion": "5"},
                "spec": {"holderIdentity": "n1", "renewTime": renewed}}})
        watch.apply({"type": "ADDED", "object": {"metadata": {"name": "n2"}, "spec": {}}})
        loop.run_until_complete(asyncio.sleep(0))
        assert state.renewing == {"n1": Renewal(1_800_000_010.0, 10.0)}
        assert "n2" not in state.leases
        watch.apply({"type": "DELETED", "object": {"metadata": {"name": "n1"}}})
        loop.run_until_complete(asyncio.sleep(0))
        assert state.leases == {} and state.renewing == {}
    finally:
        loop.close()


def test_an_object_gone_since_the_pass_read_it_is_forgotten_and_the_others_go_on() -> None:
    """A deletion the watch never delivered (between the initial list and the watch's
    start) shows as a 404 on the status write: the state forgets the object instead of
    failing on it, and holding its nodes, every pass for ever."""
    from goodput_operator.controllers.kube import Gone, apply_each

    forgotten: list[str] = []
    applied: list[str] = []

    async def apply(name: str) -> None:
        if name == "deleted":
            raise Gone(f"ultraservergroups /{name}")
        applied.append(name)

    asyncio.run(apply_each("UltraServerGroup", ["deleted", "live"], apply,
                           lambda name: {"metadata": {"name": name}}, forgotten.append))
    assert (forgotten, applied) == (["deleted"], ["live"])


def test_an_older_event_never_undoes_a_status_write_the_operator_made() -> None:
    """The report handler commits a checkpoint and records the version its write made; an
    event from before that write, still on its way, must not bring back the old status
    (a corrupt report right after the commit found no checkpoint to mark: CI, stop 29)."""
    state = State()
    state.upsert_job({"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "5"},
                      "spec": {}, "status": {}})
    held = state.jobs[("ns", "j")]
    held["status"]["checkpoint"] = {"latest": {"step": 200}}
    wrote(held, "9")
    state.upsert_job({"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "7"},
                      "spec": {}, "status": {"phase": "Running"}})
    assert state.jobs[("ns", "j")]["status"]["checkpoint"] == {"latest": {"step": 200}}
    state.upsert_job({"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "10"},
                      "spec": {}, "status": {"phase": "Running", "checkpoint": {}}})
    assert state.jobs[("ns", "j")]["status"] == {"phase": "Running", "checkpoint": {}}
    wrote(held, "")  # a write whose answer carried no version changes nothing
    assert held["metadata"]["resourceVersion"] == "9"


def test_a_report_s_write_reaches_the_job_an_echo_put_in_the_cache_while_it_was_on_its_way(
        ) -> None:
    """Reports of a job are written one after another. The echo of one write (its own
    version) replaces the cached job while the next write is on its way; that next write
    must land in the job the cache now holds, or the report after it reads the status
    from before it and writes that back (a commit undone: the job's latest checkpoint
    stayed at step 10 of 60, fresh-clone run of 58d6cbf)."""
    def job(version: str, latest: int, uid: str = "u") -> dict[str, Any]:
        return {"metadata": {"name": "j", "namespace": "ns", "uid": uid,
                             "resourceVersion": version},
                "spec": {}, "status": {"checkpoint": {"latest": {"step": latest}}}}

    for current_version, uid, reached in [
        ("100", "u", True),    # the echo of the write before: older than this one
        ("102", "u", False),   # someone's write after this one: it holds this one already
        ("100", "v", False),   # a new job of the same name
    ]:
        state = State()
        held = job("100", 50)  # what the report read, before the echo replaced it
        state.jobs[("ns", "j")] = job(current_version, 50, uid)
        state.wrote_job_status(held, "101", {"checkpoint": {"latest": {"step": 60}}})
        assert held["status"]["checkpoint"]["latest"]["step"] == 60
        assert held["metadata"]["resourceVersion"] == "101"
        cached = state.jobs[("ns", "j")]
        assert (cached["status"]["checkpoint"]["latest"]["step"] == 60) is reached, uid
        assert cached["metadata"]["resourceVersion"] == ("101" if reached
                                                         else current_version)


def test_the_echo_of_the_operator_s_own_status_write_wakes_no_pass() -> None:
    """A pass writes the job's progress; the watch's echo of that write (the version it
    made) must not start the next pass, or passes run back to back while workers report.
    Anyone else's change (a newer version) still does."""
    state = State()
    state.upsert_job({"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "5"},
                      "spec": {}, "status": {}})
    wrote(state.jobs[("ns", "j")], "9")
    state.wake.clear()
    state.upsert_job({"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "9"},
                      "spec": {}, "status": {"progress": {"step": 3}}})
    assert not state.wake.is_set()
    assert state.jobs[("ns", "j")]["status"] == {"progress": {"step": 3}}
    state.upsert_job({"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "11"},
                      "spec": {"suspend": True}, "status": {}})
    assert state.wake.is_set()


@pytest.mark.parametrize(("changed", "asks"), [
    (set(), False),
    ({"progress"}, False),
    ({"progress", "goodput"}, False),
    ({"progress", "phase"}, True),
    ({"conditions"}, True),
])
def test_a_pass_asks_for_the_next_only_when_it_changed_more_than_progress(
        changed: set[str], asks: bool) -> None:
    state = State()
    state.wake.clear()
    follow_up(state, changed)
    assert state.wake.is_set() == asks


class Expiring:
    """The API as a watch sees it: the first watch request answers 410 Gone (its place is
    compacted away), the list that follows holds the pods as they are now, and the next
    watch request ends the test (it stops the watch)."""

    def __init__(self, listed: list[dict[str, Any]]) -> None:
        self.listed, self.watched = listed, []
        self.watch_of: Watch | None = None

    def watch(self, path: str, query: list[tuple[str, Any]], seconds: int,
              decode: Decode) -> Any:
        self.watched.append(dict(query)["resourceVersion"])
        if len(self.watched) == 1:
            raise ApiException(status=410, reason="Gone")
        assert self.watch_of is not None
        self.watch_of.stop()
        return iter(())

    def get_json(self, path: str, query: list[tuple[str, Any]],
                 decode: Decode) -> dict[str, Any]:
        """The list as the API server writes it, read the way the watch asks."""
        return decode(json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "50"},
                                  "items": self.listed}))


def node(name: str, version: str, **labels: str) -> dict[str, Any]:
    """A node as a real kubelet posts it: images, addresses and system info included."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version,
                     "labels": {"topology.k8s.aws/ultraserver-id": "us-0", **labels},
                     "annotations": {names.EVIDENCE_ANNOTATION: '{"reason": "SDC"}'},
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": "aws:///i-0",
                 "taints": [{"key": names.QUARANTINE_TAINT, "value": "SDC",
                             "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"aws.amazon.com/neuron": "16", "cpu": "192"},
            "capacity": {"aws.amazon.com/neuron": "16", "cpu": "192"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": f"2027-01-15T08:00:{version}Z"}],
            "images": [{"names": [f"registry.example/image-{i}:latest"],
                        "sizeBytes": 10**9} for i in range(50)],
            "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}],
            "nodeInfo": {"kubeletVersion": "v1.36.3", "machineID": "0" * 32},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}


def test_a_node_is_kept_slim_with_everything_decisions_read() -> None:
    """Placement, health and quarantine read the slim node exactly as the full one;
    what no decision reads (images, addresses, system info, managedFields) is dropped."""
    full = node("n1", "10")
    kept = slim_node(json.loads(json.dumps(full)))
    assert node_digest(kept) == node_digest(full)
    assert record_of(kept) == record_of(full) is not None
    assert kept["status"]["conditions"] == full["status"]["conditions"]
    assert (kept["apiVersion"], kept["kind"], kept["metadata"]["uid"]) == ("v1", "Node",
                                                                          "uid-n1")
    assert not {"images", "addresses", "nodeInfo", "daemonEndpoints"} & set(kept["status"])
    assert "managedFields" not in kept["metadata"]
    assert len(json.dumps(kept)) * 5 < len(json.dumps(full))


def test_node_events_reach_the_state_and_a_heartbeat_wakes_no_pass() -> None:
    loop = asyncio.new_event_loop()
    state = State()
    watch = NodeWatch(state, None, loop)  # type: ignore[arg-type]
    try:
        watch.apply({"type": "ADDED", "object": node("n1", "10")})
        loop.run_until_complete(asyncio.sleep(0))
        assert "images" not in state.nodes["n1"]["status"] and watch.resource_version == "10"
        state.wake.clear()
        state.urgent.clear()
        watch.apply({"type": "MODIFIED", "object": node("n1", "20")})  # a heartbeat
        watch.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "25"}}})
        loop.run_until_complete(asyncio.sleep(0))
        assert not state.wake.is_set() and watch.resource_version == "25"
        assert state.nodes["n1"]["metadata"]["resourceVersion"] == "20"
        own = {names.GROUP_LABEL: "g", names.NODE_DOMAIN_LABEL: "us-0", names.SLOT_LABEL: "0"}
        watch.apply({"type": "MODIFIED", "object": node("n1", "26", **own)})  # our labels' echo
        loop.run_until_complete(asyncio.sleep(0))
        assert not state.wake.is_set() and not state.urgent.is_set()
        assert state.nodes["n1"]["metadata"]["labels"][names.SLOT_LABEL] == "0", "kept"
        watch.apply({"type": "MODIFIED", "object": node("n1", "30", role="spare")})
        loop.run_until_complete(asyncio.sleep(0))
        assert state.wake.is_set() and state.nodes["n1"]["metadata"]["labels"]["role"] == \
            "spare"
        watch.apply({"type": "DELETED", "object": node("n1", "40")})
        loop.run_until_complete(asyncio.sleep(0))
        assert state.nodes == {}
    finally:
        loop.close()


def expire_from_5(watch: Watch, api: Expiring, loop: asyncio.AbstractEventLoop) -> None:
    """Run WATCH on API from resourceVersion 5 until API stops it (after the relist)."""
    api.watch_of = watch
    watch.start("5")
    assert watch._thread is not None
    loop.run_until_complete(loop.run_in_executor(None, watch._thread.join, 10))


def test_an_expired_place_lists_again_and_the_state_holds_exactly_what_is_there_now(
        ) -> None:
    """410 Gone: the watch lists again, the state drops what went while it was away,
    takes what changed in its final version, and the watch goes on from the list's
    place."""
    loop = asyncio.new_event_loop()
    state = State()
    state.upsert_pod(pod("went-away", "3", devices=1))
    state.upsert_pod(pod("changed", "4", devices=1))
    api = Expiring([pod("changed", "40", devices=2), pod("new", "45", devices=1)])
    try:
        expire_from_5(PodWatch(state, api, loop), api, loop)  # type: ignore[arg-type]
        assert api.watched == ["5", "50"], "from the expired place, then the list's"
        assert sorted(state.pods) == ["ns/changed", "ns/new"]
        assert state.pods["ns/changed"]["metadata"]["resourceVersion"] == "40"
    finally:
        loop.close()


def test_an_expired_node_watch_lists_again_and_drops_the_nodes_that_left() -> None:
    loop = asyncio.new_event_loop()
    state = State()
    for name in ("left", "stays"):
        state.upsert_node(node(name, "3"))
    api = Expiring([node("stays", "41", role="spare"), node("joined", "42")])
    try:
        expire_from_5(NodeWatch(state, api, loop), api, loop)  # type: ignore[arg-type]
        assert api.watched == ["5", "50"]
        assert sorted(state.nodes) == ["joined", "stays"]
        assert state.nodes["stays"]["metadata"]["labels"]["role"] == "spare"
        assert "images" not in state.nodes["joined"]["status"]
    finally:
        loop.close()


class NoKueueThenKueue:
    """An API server without Kueue's Workloads at the first look, with them after: the
    watch says so to the state, and settles at once either way."""

    def __init__(self, watch_of: list[Watch]) -> None:
        self.looks = 0
        self.watch_of = watch_of

    def get_json(self, path: str, query: list[tuple[str, Any]],
                 decode: Decode = json.loads) -> dict[str, Any]:
        if dict(query).get("limit") == 1:
            self.looks += 1
            if self.looks == 1:
                raise ApiException(status=404, reason="Not Found")
            return {"items": []}
        wl = {"apiVersion": "kueue.x-k8s.io/v1beta2",
              "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "5",
                           "managedFields": [{"manager": "kueue"}]},
              "spec": {"podSets": [{"name": "workers", "count": 2,
                                    "template": {"spec": {"containers": []}}}]},
              "status": {"conditions": [{"type": "Admitted", "status": "True"}],
                         "clusterName": "region-a"}}
        return decode(json.dumps({"metadata": {"resourceVersion": "9"}, "items": [wl]}))

    def watch(self, *_: Any) -> Any:
        self.watch_of[0].stop()
        return iter(())


def test_a_cluster_without_kueue_is_said_and_looked_at_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watches, "KUEUE_LOOK_SECONDS", 0.01)
    loop = asyncio.new_event_loop()
    state = State()
    holder: list[Watch] = []
    api = NoKueueThenKueue(holder)
    watch = WorkloadWatch(state, api, loop)  # type: ignore[arg-type]
    holder.append(watch)
    try:
        watch.start()
        assert watch.settled.wait(5)
        for _ in range(200):
            loop.run_until_complete(asyncio.sleep(0.01))
            if state.workloads:
                break
        assert api.looks == 2 and state.kueue is True
        [(key, slim)] = state.workloads.items()
        assert key == ("ns", "w")
        assert slim["status"]["clusterName"] == "region-a"
        assert "managedFields" not in slim["metadata"]
        assert slim["spec"] == {"podSets": [{"name": "workers", "count": 2}]}  # no template
    finally:
        watch.stop()
        if watch._thread is not None:  # done before the test is: it logs nothing after
            loop.run_until_complete(loop.run_in_executor(None, watch._thread.join, 10))
        loop.close()
