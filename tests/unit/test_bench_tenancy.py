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
