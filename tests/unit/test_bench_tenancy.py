"""The tenancy benchmark decides real passes on the operator's own state (no timings
asserted: what each variant does is)."""

from __future__ import annotations

import pytest
from bench import tenancy

pytestmark = pytest.mark.unit


def test_the_attack_creates_only_team_bs_pods_and_the_baseline_builds_every_gang() -> None:
    attack = tenancy.one_pass("attack", jobs=2, domains=2)
    assert (attack["pods"], attack["team_b"]) == (2, "Placing")
    baseline = tenancy.one_pass("baseline", jobs=1, domains=2)
    assert baseline["pods"] == 2 + tenancy.MAX_WORKERS


def test_the_worst_accepted_quantity_parses_and_the_bomb_is_refused() -> None:
    assert len(tenancy.WORST_ACCEPTED) == 64
    assert tenancy.parse_quantity(tenancy.WORST_ACCEPTED) > 10 ** 39
    with pytest.raises(tenancy.QuantityError):
        tenancy.parse_quantity(tenancy.BOMB)
    assert set(tenancy.quantity_costs(repeats=3)) == {
        "plain_us", "worst_accepted_us", "bomb_refused_us"}


def test_the_endpoints_variant_decides_one_namespaces_endpoints_beside_team_b() -> None:
    # two UltraServers: team B's 2 workers take half of one, the other is whole; of team
    # A's three whole-UltraServer endpoints one is placed there, the other two fit nowhere
    # and wait with no pods (decide.endpoint._place)
    run = tenancy.one_pass("endpoints", jobs=0, domains=2, endpoints=3)
    assert (run["team_b"], run["failures"]) == ("Placing", 0)
    assert run["pods"] == 2 + 4


def test_the_waiting_variant_searches_in_turns_and_its_baseline_searches_every_job() -> None:
    # of team A's 40 waiting 8-worker jobs, 32 have a turn (the default); team B's job,
    # of another namespace, is searched as ever
    turns = tenancy.one_pass("waiting", jobs=0, domains=2, waiting=40)
    every = tenancy.one_pass("waiting-unbounded", jobs=0, domains=2, waiting=40)
    assert (turns["job_searches"], every["job_searches"]) == (32 + 1, 40 + 1)
    assert turns["team_b"] == every["team_b"] == "Placing"
