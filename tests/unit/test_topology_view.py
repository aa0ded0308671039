"""The fleet pictures: what a person sees in the terminal and in the SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from goodput_operator import names
from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Request, commit, place
from goodput_operator.topology.view import render_svg, render_text
from tests.unit.fleets import node, nvl72, trn2

pytestmark = pytest.mark.unit


def busy_fleet() -> Fleet:
    fleet = trn2(2, spares=1)
    commit(fleet, place(fleet, Request(3, 16)), Request(3, 16), "tj/ns/pretrain")
    fleet.upsert_node(node("us1-n1", "us-1", "b0", ready=False))
    fleet.upsert_node({**node("us1-n2", "us-1", "b0"),
                       "spec": {"taints": [{"key": names.QUARANTINE_TAINT}]}})
    return fleet


def test_text_shows_each_domain_in_slot_order_with_its_jobs() -> None:
    text = render_text(busy_fleet(), "trn2-pool")
    assert text.splitlines()[0] == ("trn2-pool: 2 UltraServers, 8 nodes (3 in use), "
                                    "16 aws.amazon.com/neuron per node")
    box = next(line for line in text.splitlines() if "pretrain" in line)
    assert box.index("0 pretrain") < box.index("1 pretrain") < box.index("2 pretrain")
    assert "3 spare" in box
    other = next(line for line in text.splitlines() if "NotReady" in line)
    assert "0 ." in other and "1 NotReady" in other and "2 QUARANTINE" in other


def test_text_wraps_large_domains() -> None:
    rows = [line for line in render_text(nvl72(1), "gb").splitlines() if line.startswith("  │")]
    assert len(rows) == 3  # 18 nodes, 6 per row


def test_svg_is_well_formed_and_names_every_node() -> None:
    fleet = busy_fleet()
    svg = render_svg({"trn2-pool": fleet})
    root = ET.fromstring(svg)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert len(titles) == 8
    assert "us0-n0: pretrain" in titles and "us1-n1: NotReady" in titles
    assert "pretrain" in svg and "legend" in svg
