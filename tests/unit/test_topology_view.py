"""The fleet pictures: what a person sees in the terminal and in the SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from goodput_operator import names
from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Request, commit, place
from goodput_operator.topology.view import (
    STATE_COLORS,
    job_colors,
    render_svg,
    render_text,
    shorten,
)
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
    assert len([t for t in titles if t and ": " in t]) == 8
    assert "us-0" in titles and "us-1" in titles              # the domains' full names
    assert "us0-n0: pretrain" in titles and "us1-n1: NotReady" in titles
    assert "pretrain" in svg and "legend" in svg


@pytest.mark.parametrize(("text", "width", "short"), [
    ("pretrain", 9, "pretrain"),
    ("llama-70b-sft", 9, "llama-…"),               # after a whole word, never "llama-70b"
    ("a-very-long-training-job", 10, "a-very-…"),
    ("supercalifragilistic", 9, "supercal…"),       # one long word: cut, marked
])
def test_names_are_shortened_after_a_whole_word(text: str, width: int, short: str) -> None:
    assert shorten(text, width) == short and len(short) <= width


def test_a_box_stays_closed_whatever_its_title_and_long_names_are_given_in_full() -> None:
    fleet = nvl72(1)
    commit(fleet, place(fleet, Request(10, 4)), Request(10, 4), "tj/ns/a-very-long-job-name")
    long = Fleet.from_objects(fleet.shape, [
        node(f"n{i}", "a-very-long-nvlink-domain-identifier-0123456789abcdef-and-more", "b0", 4,
             label="nvidia.com/gpu.clique") for i in range(2)])
    for picture in (render_text(fleet, "gb"), render_text(long, "gb")):
        box = [line for line in picture.splitlines() if line.lstrip()[:1] in "┌│└"]
        assert len({len(line) for line in box}) == 1, box   # every line as wide as the top
        assert box[0].rstrip().endswith("┐") and box[-1].rstrip().endswith("┘")
    text = render_text(fleet, "gb")
    assert "a-very-…" in text and "jobs in full: a-very-long-job-name" in text


def test_job_colours_differ_from_each_other_and_from_every_state_colour() -> None:
    colors = job_colors([f"job-{i}" for i in range(12)])
    assert len(set(colors.values())) == 12
    for color in colors.values():
        hue = int(color[4:].split(",")[0])
        assert 60 <= hue <= 240, color          # never red, orange, purple or magenta
    assert not set(colors.values()) & set(STATE_COLORS.values())


def test_a_node_quarantined_lately_is_marked_and_its_score_is_in_the_tooltip() -> None:
    fleet = trn2(1)
    body = node("us0-n2", "us-0", "b0")
    body["metadata"]["annotations"] = {names.LEMON_ANNOTATION: "2"}
    fleet.upsert_node(body)
    box = next(line for line in render_text(fleet, "g").splitlines() if " 2!" in line)
    assert " 1 ." in box and " 2!." in box
    assert "us0-n2: . (incident score 2)" in render_svg({"g": fleet})
