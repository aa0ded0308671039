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

from goodput_operator import metrics
from goodput_operator.controllers.kube import Kube, _count_requests, resource_of, write_status
from goodput_operator.decide import Event

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
