"""Every generated file, from its one source, written by `make generate` and checked by
`make verify` (`--check`: exit 1 and name the stale files):

- crds/*.yaml, the chart's copy and docs/api.md: goodput_operator.api's models;
- src/goodput_operator/api/statuses.py: the status models as TypedDicts (api.typed);
- docs/metrics.md: goodput_operator.metrics;
- the settings table in docs/operating.md (between its markers): operator.flags.FLAGS.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from goodput_operator import metrics
from goodput_operator.api import crds, typed
from goodput_operator.operator import flags

BEGIN = "<!-- flags: generated from goodput_operator/operator/flags.py by `make generate` -->"
END = "<!-- /flags -->"


def with_table(guide: str, table: str) -> str:
    """GUIDE with the text between its flag markers replaced by TABLE."""
    head, begin, rest = guide.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"docs/operating.md lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def outputs(root: Path) -> dict[Path, str]:
    files = crds.outputs(root)
    files[root / "docs" / "metrics.md"] = metrics.reference()
    files[root / "src" / "goodput_operator" / "api" / "statuses.py"] = typed.source()
    guide = root / "docs" / "operating.md"
    files[guide] = with_table(guide.read_text() if guide.is_file() else f"{BEGIN}\n{END}\n",
                              flags.table())
    return files


def stale(root: Path) -> list[Path]:
    return [path for path, text in outputs(root).items()
            if not path.is_file() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument("--check", action="store_true", help="fail if any output is stale")
    args = parser.parse_args(argv)
    if args.check:
        behind = stale(args.root)
        for path in behind:
            print(f"stale: {path} (run `make generate`)", file=sys.stderr)
        return 1 if behind else 0
    for path, text in outputs(args.root).items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
