"""The API client's instrumentation: every request counted and timed by method and
resource, with names and namespaces left out of the labels."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from goodput_operator import metrics
from goodput_operator.controllers.kube import _count_requests, resource_of

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
