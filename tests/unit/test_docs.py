"""The docs stay true to the code: links resolve inside the repository, and the worker
environment the builders produce is the one docs/training.md documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench/README.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository_and_resolve(page: Path) -> None:
    prose = re.sub(r"`[^`\n]*`", "", page.read_text())  # code is not a link
    for target in LINK.findall(prose):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name} links outside the repo: {target}"
        assert resolved.exists(), f"{page.name}: {target} does not exist"


def test_the_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text()) < 8_000, "put the detail in docs/"


def test_docs_training_lists_every_variable_a_worker_gets() -> None:
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"},
           "spec": {"ultraServerGroup": "g", "workers": 2, "acceleratorsPerWorker": 16,
                    "launcher": {"type": "neuron"},
                    "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}}}}
    pod = build.worker_pod(job, 0, 0, Fabric("aws.amazon.com/neuron", 16))
    variables = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    page = (ROOT / "docs" / "training.md").read_text()
    assert variables and not {v for v in variables if f"`{v}" not in page}
