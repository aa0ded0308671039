"""The placement record in status: slices per domain, nodes as hostlists, read back exactly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput_operator.decide.gang import domain_summary
from goodput_operator.topology.record import (
    MAX_RANKS,
    compress,
    expand,
    node_of,
    nodes_of,
    ranks_of,
    to_slices,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("names", "written"), [
    (["trn2-us-0007-n0", "trn2-us-0007-n1", "trn2-us-0007-n2", "trn2-us-0007-n3"],
     "trn2-us-0007-n[0-3]"),
    (["n0", "n1", "n3"], "n[0-1,3]"),                                 # a gap: two runs
    (["n3", "n1", "n2"], "n[3,1-2]"),                                 # rank order is kept
    (["gpu-007", "gpu-008", "gpu-009", "gpu-010"], "gpu-[007-010]"),  # zero padding kept
    (["n9", "n10", "n11"], "n9,n[10-11]"),                            # widths differ
    (["ip-10-0-1-23.ec2.internal", "ip-10-0-1-57.ec2.internal"],     # EKS names
     "ip-10-0-1-[23,57].ec2.internal"),
    (["a-0-x", "a-1-x", "a-1-y"], "a-[0-1]-x,a-1-y"),                 # one number varies
    (["login", "login"], "login,login"),
    (["node"], "node"),
    ([], ""),
])
def test_node_names_are_written_as_hostlists_and_read_back(names: list[str],
                                                           written: str) -> None:
    assert compress(names) == written
    assert expand(written) == names


@pytest.mark.parametrize("bad", [
    "n[3-0]", "n[0-99999]", "n[a-b]", "n[0-3", "n]0[", "a,,b", "n[0-1]x[2]", "n[-1]",
])
def test_a_malformed_or_oversized_hostlist_is_an_error_not_a_blow_up(bad: str) -> None:
    with pytest.raises(ValueError, match="hostlist"):
        expand(bad)


def test_expansion_stops_at_the_largest_gang() -> None:
    assert len(expand(f"n[1-{MAX_RANKS}]")) == MAX_RANKS
    with pytest.raises(ValueError, match="longer than"):
        expand(f"n[1-{MAX_RANKS}],m")


NAME = st.from_regex(r"[a-z]{1,3}(-[0-9]{1,3}){0,3}(\.[a-z]{1,3})?", fullmatch=True)


@given(st.lists(NAME, max_size=40))
def test_any_node_names_round_trip_in_order(names: list[str]) -> None:
    assert expand(compress(names)) == names


@given(st.lists(st.tuples(NAME, st.sampled_from(["us-0", "us-1", None])), max_size=40))
def test_any_placement_round_trips_through_its_slices(placed: list[tuple[str, str | None]]
                                                     ) -> None:
    ranks = [{"rank": i, "node": node, "domain": domain}
             for i, (node, domain) in enumerate(placed)]
    record = {"slices": to_slices(ranks)}
    assert ranks_of(record) == ranks
    assert nodes_of(record) == [node for node, _ in placed]
    assert [node_of(record, r) for r in range(len(placed) + 1)] == \
        [node for node, _ in placed] + [None]     # one rank, its slice alone expanded


def test_slices_are_runs_of_consecutive_ranks_in_one_domain() -> None:
    ranks = [{"rank": 0, "node": "us0-n0", "domain": "us-0"},
             {"rank": 1, "node": "us0-n1", "domain": "us-0"},
             {"rank": 2, "node": "us1-n3", "domain": "us-1"},   # a replacement elsewhere
             {"rank": 3, "node": "us0-n3", "domain": "us-0"}]
    assert to_slices(ranks) == [
        {"firstRank": 0, "domain": "us-0", "nodes": "us0-n[0-1]"},
        {"firstRank": 2, "domain": "us-1", "nodes": "us1-n3"},
        {"firstRank": 3, "domain": "us-0", "nodes": "us0-n3"}]


@pytest.mark.parametrize(("nodes_per_domain", "name", "times_smaller"), [
    (4, "trn2-us-{d:04d}-n{n}", 3),                  # Trn2 UltraServers
    (18, "gb200-rack-{d:04d}-n{n:02d}", 15),         # NVL72 racks
    (4, "ip-10-{d1}-{d2}-{n}.ec2.internal", 3),      # EKS names: one number varies
])
def test_the_largest_gang_s_record_is_small(nodes_per_domain: int, name: str,
                                            times_smaller: int) -> None:
    """8192 ranks, one per node: the record is several times smaller than one entry per
    rank, and a small fraction of etcd's 1.5 MiB object limit."""
    ranks = []
    for rank in range(MAX_RANKS):
        d, n = divmod(rank, nodes_per_domain)
        ranks.append({"rank": rank, "domain": f"dom-{d:04d}",
                      "node": name.format(d=d, n=n, d1=d // 256, d2=d % 256)})
    record = {"slices": to_slices(ranks)}
    size, per_rank = len(json.dumps(record)), len(json.dumps({"ranks": ranks}))
    assert size * times_smaller < per_rank
    assert size < 200_000
    assert ranks_of(record) == ranks


def test_the_cli_prints_one_rank_per_line_or_one_rank_s_node() -> None:
    from goodput_operator.cli import placement_lines

    record = {"slices": [{"firstRank": 0, "domain": "us-a", "nodes": "trn2-00-[0-1]"},
                         {"firstRank": 2, "nodes": "spare-7"}]}
    assert placement_lines(record) == ["0 trn2-00-0 us-a", "1 trn2-00-1 us-a", "2 spare-7 -"]
    assert placement_lines(record, rank=1) == ["trn2-00-1"]
    assert placement_lines(None) == [] and placement_lines(record, rank=9) == []


@pytest.mark.parametrize(("domains", "column"), [
    ([], ""),
    (["us-0001"], "us-0001"),
    (["us-0001", "us-0002", "us-0003"], "us-0001,us-0002,us-0003"),
    ([f"us-{i:04d}" for i in range(1, 130)], "us-0001,us-0002,us-0003 +126"),  # 8,192 workers
])
def test_the_domains_column_stays_one_short_line(domains: list[str], column: str) -> None:
    assert domain_summary(domains) == column
