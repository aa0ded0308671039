"""The API client's instrumentation (every request counted and timed by method and
resource, with names and namespaces left out of the labels), and a status write with its
events."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from goodput_operator import metrics
from goodput_operator.controllers.kube import (
    Kube,
    _count_requests,
    apply_quota,
    resource_of,
    write_status,
)
from goodput_operator.controllers.state import WORKLOAD_RETRY_TIMES, State
from goodput_operator.decide import Event
from goodput_operator.decide.types import ConditionUpdate, Quota

Obj = dict[str, Any]

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("path", "resource"), [
    ("/api/v1/namespaces/team-a/pods", "pods"),
    ("/api/v1/namespaces/team-a/pods/worker-0", "pods"),
    ("/api/v1/namespaces/team-a/pods/worker-0/eviction", "pods/eviction"),
    ("/apis/goodput.dev/v1alpha1/namespaces/team-a/trainingjobs/llm/status",
     "trainingjobs/status"),
    ("/api/v1/nodes", "nodes"),
    ("/api/v1/nodes/trn2-0", "nodes"),
    ("/api/v1/namespaces/team-a", "namespaces"),
    ("/api/v1/namespaces/team-a/events", "events"),
    ("/apis/authentication.k8s.io/v1/tokenreviews", "tokenreviews"),
    ("/apis/coordination.k8s.io/v1/namespaces/goodput-system/leases/goodput", "leases"),
    ("/api/v1", "-"),
])
def test_a_request_is_labelled_with_its_resource_not_its_object(path: str,
                                                                 resource: str) -> None:
    assert resource_of(f"https://127.0.0.1:6443{path}?limit=500") == resource


def test_every_request_is_counted_and_timed_even_when_it_fails() -> None:
    api = client.ApiClient(client.Configuration())
    calls: list[tuple[Any, ...]] = []

    def send(*args: Any) -> Any:
        calls.append(args)
        if len(calls) == 2:
            raise client.exceptions.ApiException(status=500)
        return "answer"

    api.rest_client.request = send  # type: ignore[method-assign]
    _count_requests(api)
    timed = metrics.API_REQUEST_SECONDS.labels("PATCH", "trainingjobs/status")
    counted = metrics.API_REQUESTS.labels("PATCH")
    before = counted._value.get(), _count(timed)  # type: ignore[attr-defined]
    url = "https://h/apis/goodput.dev/v1alpha1/namespaces/a/trainingjobs/j/status"
    assert api.rest_client.request("PATCH", url) == "answer"
    with pytest.raises(client.exceptions.ApiException):
        api.rest_client.request("PATCH", url)
    assert counted._value.get() == before[0] + 2  # type: ignore[attr-defined]
    assert _count(timed) == before[1] + 2
    assert calls[0][-1] is not None  # a timeout is always given


def _count(histogram: Any) -> float:
    return float(sum(bucket.get() for bucket in histogram._buckets))


class RecordingKube:
    """What write_status calls, recorded with how many events were in flight at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.in_flight = self.most = 0
        self.lock = threading.Lock()

    def patch_status(self, plural: str, namespace: str, name: str, body: Obj) -> str:
        self.calls.append("status")
        return "42"

    def event(self, obj: Obj, reason: str, message: str, type_: str) -> None:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        time.sleep(0.05)
        with self.lock:
            self.in_flight -= 1
            self.calls.append(reason)


def test_a_status_write_comes_first_and_its_events_are_posted_together() -> None:
    kube = RecordingKube()
    obj: Obj = {"metadata": {"namespace": "a", "name": "e"}, "status": {"replicas": 1}}
    events = [Event("Normal", "Placed", f"group {i}") for i in range(8)]
    changed = asyncio.run(write_status(cast(Kube, kube), "inferenceendpoints", obj,
                                       obj["status"], {"replicas": 2}, events))
    assert changed == {"replicas"}
    assert kube.calls == ["status", *["Placed"] * 8]
    assert kube.most > 1, "events are posted together, not one after another"
    assert obj["status"] == {"replicas": 2} and obj["metadata"]["resourceVersion"] == "42"


class RefusingKube:
    """Creates fail with STATUS (None: they succeed)."""

    def __init__(self, status: int | None) -> None:
        self.status = status
        self.created: list[Obj] = []

    def create(self, body: Obj) -> Obj:
        if self.status is not None:
            raise ApiException(status=self.status, reason="Refused")
        self.created.append(body)
        return body


@pytest.mark.parametrize(("status", "said"), [(422, True), (403, True), (409, False),
                                              (500, False), (None, False)])
def test_a_workload_refused_for_good_is_noted_for_its_owner(status: int | None,
                                                            said: bool) -> None:
    state = State()
    owner = ("TrainingJob", "ns", "j")
    quota = Quota("trainingjob-j-abcde", True, ConditionUpdate("Admitted", False, "Queued", ""),
                  create={"kind": "Workload", "metadata": {"name": "trainingjob-j-abcde",
                                                           "namespace": "ns"}}, owner=owner)
    for _ in range(12):
        asyncio.run(apply_quota(cast(Kube, RefusingKube(status)), quota, state.note_workload))
    if not said:
        assert owner not in state.workload_refusals
        return
    workload, refusal = state.workload_refusals[owner]
    assert workload == "trainingjob-j-abcde" and "Refused" in refusal.message
    assert refusal.times == WORKLOAD_RETRY_TIMES  # the backoff stops growing
    assert state.wake.is_set()
    asyncio.run(apply_quota(cast(Kube, RefusingKube(None)), quota, state.note_workload))
    assert owner not in state.workload_refusals  # created at last: nothing more to say
    state.note_workload(owner, workload, "no", 0.0)
    state.remove_job("ns", "j")
    assert owner not in state.workload_refusals
