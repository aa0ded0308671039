"""Resource quantities as the API server stores them: 1000 devices come back as "1k". A
quantity the operator cannot read leaves that one object out; it never stops a pass or the
start-up (a replica that crashes on it could never lead again)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.topology.model import (
    QuantityError,
    parse_count,
    parse_quantity,
    pod_accelerators,
)
from tests.unit.fleets import node, trn2

pytestmark = pytest.mark.unit
NEURON = "aws.amazon.com/neuron"


@pytest.mark.parametrize(("text", "value"), [
    ("16", 16), (16, 16), ("1k", 1000), ("1.5k", 1500), ("2Ki", 2048), ("1Mi", 2**20),
    ("1e3", 1000), ("1E3", 1000), ("12e-1", Fraction(6, 5)), ("500m", Fraction(1, 2)),
    ("0", 0), ("+4", 4), (".5", Fraction(1, 2)), ("3G", 3 * 10**9),
])
def test_kubernetes_quantities_parse_exactly(text: Any, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["abc", "1kk", "k", "", "1 k", "1ki", "--1", "1e"])
def test_what_is_not_a_quantity_is_said(text: str) -> None:
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(("text", "count"), [("16", 16), ("1k", 1000), ("2Ki", 2048),
                                             ("1e2", 100)])
def test_device_counts_are_whole_numbers(text: str, count: int) -> None:
    assert parse_count(text) == count


@pytest.mark.parametrize("text", ["500m", "1.5", "-1", "abc"])
def test_a_fraction_or_negative_device_count_is_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_count(text)


@pytest.mark.parametrize("text", ["1e10000000", "1e-10000000", "9" * 5000, 10**5000,
                                  "1" + "0" * 64, "1e25", {"a": 1}],
                         ids=["exponent", "negative-exponent", "5000-digits",
                              "5000-digit-number", "65-chars", "1e25", "an-object"])
def test_a_quantity_bomb_is_refused_at_once(text: Any) -> None:
    """TENANCY.md rule 5: a quantity that would take seconds (or raise a plain ValueError,
    as 5,000 digits did in int()) is a QuantityError before anything is expanded."""
    with pytest.raises(QuantityError):
        parse_quantity(text)
    with pytest.raises(QuantityError):
        parse_count(text)


def test_the_worst_accepted_quantity_parses_at_once() -> None:
    """The longest, largest quantity still accepted: 64 characters, exponent 24."""
    worst = "9" * 60 + "e24"
    assert parse_quantity(worst) == 10**24 * int("9" * 60)
    assert parse_count("1e24") == 10**24


def gang_pod(name: str, node_name: str, request: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {names.JOB_LABEL: "j"}},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "main", "resources": {"requests": {NEURON: request}}}]},
            "status": {"phase": "Running"}}


def test_a_pod_asking_for_1k_devices_counts_as_1000() -> None:
    assert pod_accelerators(gang_pod("big", "us0-n0", "1k"), NEURON) == 1000


def test_an_unreadable_request_leaves_that_pod_out_and_the_rest_in() -> None:
    fleet = trn2(1)
    assert fleet.observe_pod(gang_pod("ok", "us0-n0", "16"))
    assert not fleet.observe_pod(gang_pod("odd", "us0-n1", "500m"))
    assert fleet.nodes["us0-n0"].used == 16 and fleet.nodes["us0-n1"].used == 0


def test_a_node_whose_capacity_cannot_be_read_is_unusable_not_fatal() -> None:
    fleet = trn2(1)
    odd = node("us0-n1", "us-0")
    odd["status"]["allocatable"][NEURON] = "16.5"
    fleet.upsert_node(odd)
    assert fleet.nodes["us0-n1"].state == "misshaped" and fleet.nodes["us0-n1"].capacity == 0


def test_the_cache_survives_an_unreadable_pod_at_start_up() -> None:
    """The initial sync upserts every pod: one odd pod is logged and skipped."""
    import asyncio

    from goodput_operator.controllers.state import State

    async def sync() -> State:
        state = State()
        state.upsert_group({"metadata": {"name": "g", "creationTimestamp": "t"}, "spec": {
            "nodeSelector": {"pool": "trn2"}, "nodesPerDomain": 4,
            "accelerator": {"resource": NEURON, "perNode": 16}}})
        for slot in range(4):
            state.upsert_node(node(f"us0-n{slot}", "us-0", labels={"pool": "trn2"}))
        state.upsert_pod(gang_pod("odd", "us0-n1", "500m"))
        state.upsert_pod(gang_pod("big", "us0-n0", "1k"))
        return state

    state = asyncio.run(sync())
    assert state.fleets["g"].nodes["us0-n0"].used == 1000
    assert "ns/odd" not in state.fleets["g"].pods and "ns/odd" in state.pods
