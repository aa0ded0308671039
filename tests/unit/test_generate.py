"""One generator, one check: every generated file is current, and `make verify` fails the
moment one is not."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from goodput_operator import generate

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
GENERATED = sorted(str(path.relative_to(ROOT)) for path in generate.outputs(ROOT))


def test_generated_files_are_up_to_date() -> None:
    behind = generate.stale(ROOT)
    assert not behind, f"stale generated files {behind}: run `make generate`"


def test_every_generated_file_is_covered() -> None:
    assert {"docs/api.md", "docs/metrics.md", "docs/operating.md"} <= set(GENERATED)
    assert sum(p.startswith("crds/") for p in GENERATED) == 3
    assert sum(p.startswith("charts/goodput-operator/crds/") for p in GENERATED) == 3


@pytest.mark.parametrize("relative", GENERATED)
def test_the_check_names_a_stale_file(tmp_path: Path, relative: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "operating.md", tmp_path / "docs" / "operating.md")
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert generate.main(["--root", str(tmp_path), "--check"]) == 0
    target = tmp_path / relative
    target.write_text(target.read_text().replace("|", "¦", 1) + "edited by hand\n")
    capsys.readouterr()
    assert generate.main(["--root", str(tmp_path), "--check"]) == 1
    assert f"stale: {target}" in capsys.readouterr().err


def test_the_settings_table_needs_its_markers(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "operating.md").write_text("# Operating guide\n\nno table here\n")
    with pytest.raises(ValueError, match="lacks the markers"):
        generate.outputs(tmp_path)


def test_make_verify_fails_when_a_generated_file_is_stale(tmp_path: Path) -> None:
    """The real `make verify` (ruff, mypy, the check) on a copy of the working tree."""
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("needs make and git")
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp_path / name)
    if (ROOT / ".mypy_cache").is_dir():  # `make test` types the tree first: warm, not cold
        shutil.copytree(ROOT / ".mypy_cache", tmp_path / ".mypy_cache")
    venv = Path(os.environ.get("VIRTUAL_ENV") or ROOT / ".venv")
    make = ["make", "--no-print-directory", "-o", str(venv / ".installed"), "verify",
            f"VENV={venv}"]
    clean = subprocess.run(make, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    metrics_doc = tmp_path / "docs" / "metrics.md"
    metrics_doc.write_text(metrics_doc.read_text() + "| `goodput_made_up` | gauge | - | x |\n")
    stale = subprocess.run(make, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert stale.returncode != 0
    assert f"stale: {metrics_doc}" in stale.stderr
