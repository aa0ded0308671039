"""/sd/serving: the serving pods Prometheus scrapes, labelled as the default queries select."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.resources.inference import scrape_targets

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
IE = {"metadata": {"namespace": "team", "name": "chat"}, "spec": {"port": 8000}}


def pod(name: str, annotations: Obj | None = None, phase: str = "Running",
        ip: str | None = "10.244.1.7", **labels: str) -> Obj:
    return {"metadata": {"name": name, "annotations": annotations or {},
                         "labels": {names.ENDPOINT_LABEL: "chat", **labels}},
            "status": {"phase": phase, **({"podIP": ip} if ip else {})}}


SCRAPED = {"prometheus.io/scrape": "true"}


@pytest.mark.parametrize(("given", "want"), [
    (pod("a", SCRAPED), [{"targets": ["10.244.1.7:8000"], "labels": {
        "namespace": "team", "endpoint": "chat", "pod": "a"}}]),
    (pod("a", SCRAPED | {"prometheus.io/port": "9400", "prometheus.io/path": "/m"},
         **{names.SERVING_ROLE_LABEL: "prefill"}),
     [{"targets": ["10.244.1.7:9400"], "labels": {
         "namespace": "team", "endpoint": "chat", "pod": "a", "role": "prefill",
         "__metrics_path__": "/m"}}]),
    (pod("a"), []),                                   # not annotated: not scraped
    (pod("a", {"prometheus.io/scrape": "false"}), []),
    (pod("a", SCRAPED, phase="Pending"), []),         # not serving yet
    (pod("a", SCRAPED, ip=None), []),
])
def test_a_pod_is_a_target_when_annotated_running_and_addressed(given: Obj, want: list[Obj]
                                                               ) -> None:
    assert scrape_targets([IE], {("team", "chat"): {"a": given}}) == want


def test_a_pod_labelled_for_another_endpoint_is_not_this_ones() -> None:
    other = pod("a", SCRAPED)
    other["metadata"]["labels"][names.ENDPOINT_LABEL] = "elsewhere"
    assert scrape_targets([IE], {("team", "chat"): {"a": other}}) == []
