"""The UltraServerGroup status computed from the fleet model."""

from __future__ import annotations

from goodput_operator.api.ultraservergroup import UltraServerGroupSpec, UltraServerGroupStatus
from goodput_operator.decide.group import Notes, group_status
from tests.unit.fleets import node, trn2

AT = "2026-01-01T00:00:00Z"
SPEC = UltraServerGroupSpec.model_validate({
    "nodeSelector": {"t": "trn2"}, "accelerator": {"perNode": 16}, "nodesPerDomain": 4,
    "spares": {"perDomain": 1, "perGroup": 2}})


def test_one_degraded_domain_gives_integer_totals_that_validate() -> None:
    fleet = trn2(1, spares=1)
    fleet.upsert_node(node("us0-n0", "us-0", fleet.domains["us-0"].path[1], ready=False))
    status = group_status(SPEC, fleet, [], Notes(None, 3, AT))
    assert status["totals"]["healthyDomains"] == 0
    assert all(type(v) is int for v in status["totals"].values())
    UltraServerGroupStatus.model_validate(status)        # what the API server would check
    assert status["health"] == "Degraded"
    assert status["domains"][0]["nodesReady"] == 3 and status["domains"][0]["spares"] == ["us0-n3"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Degraded"]["status"] == "True"
    assert "SparesPerGroup" not in conditions       # honoured now: nothing to warn about


def test_a_storm_is_a_condition() -> None:
    status = group_status(SPEC, trn2(2), [], Notes("5 node(s) failing ...", 1, AT))
    storm = next(c for c in status["conditions"] if c["type"] == "StormGuard")
    assert (storm["status"], storm["reason"]) == ("True", "TooManyFailing")
    assert status["totals"]["healthyDomains"] == 2 and status["health"] == "Healthy"


def test_a_large_group_lists_its_notable_domains_first_and_counts_the_rest() -> None:
    """At most MAX_LISTED_DOMAINS domains in status.domains (every domain of a 5,000-domain
    group made a 1.4 MB object): the degraded and quarantined ones always among them,
    fabric order kept; totals count every domain."""
    from goodput_operator.api.ultraservergroup import MAX_LISTED_DOMAINS

    count = MAX_LISTED_DOMAINS + 44
    fleet = trn2(count, spares=1)
    last = f"us-{count - 1}"
    fleet.upsert_node(node(f"us{count - 1}-n0", last, fleet.domains[last].path[1],
                           ready=False))
    status = group_status(SPEC, fleet, [], Notes(None, 3, AT))
    UltraServerGroupStatus.model_validate(status)
    listed = [d["id"] for d in status["domains"]]
    assert len(listed) == MAX_LISTED_DOMAINS and status["domainsOmitted"] == 44
    assert last in listed, "a degraded domain is listed whatever its place"
    assert listed == [d.id for d in fleet.ordered_domains() if d.id in set(listed)]
    assert status["totals"]["domains"] == count
    small = group_status(SPEC, trn2(3, spares=1), [], Notes(None, 3, AT))
    assert len(small["domains"]) == 3 and small["domainsOmitted"] == 0
