"""The Dockerfile, checked statically: pinned base, a wheel built in a first stage, a
non-root final stage without build tools, the console script as entrypoint, and every file
it copies present and let through .dockerignore. (The in-cluster e2e tests build it for
real with buildah: tests/e2e/test_in_cluster.py.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> list[str]:
    return re.split(r"(?m)^FROM ", DOCKERFILE)[1:]


def test_two_stages_on_one_base_a_pinned_slim_python_by_default() -> None:
    assert len(stages()) == 2
    base = re.search(r"(?m)^ARG BASE_IMAGE=python:(\d+\.\d+\.\d+)-slim-bookworm$", DOCKERFILE)
    assert base is not None
    for stage in stages():
        assert stage.startswith("${BASE_IMAGE}")


def test_the_final_stage_installs_only_the_wheel_and_runs_as_non_root() -> None:
    final = stages()[1]
    assert "COPY --from=build /dist/*.whl" in final
    assert "build" not in re.sub(r"--from=build|/dist", "", final.split("\n", 1)[1])
    assert re.search(r"(?m)^USER 65532:65532$", final)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert 'ENTRYPOINT ["goodput-operator"]' in final and "goodput-operator" in scripts


def test_every_copied_path_exists_and_is_not_ignored() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for sources in re.findall(r"(?m)^COPY (?!--from)(.+) \S+$", DOCKERFILE):
        for source in sources.split():
            assert (ROOT / source).exists(), source
            assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"
