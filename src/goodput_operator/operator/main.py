"""`goodput-operator`: the operator process. Not built yet.

The controllers arrive with the TrainingJob, UltraServerGroup and InferenceEndpoint
issues; until then this entrypoint says so plainly and exits non-zero rather than
pretending to reconcile anything.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    print(
        "goodput-operator: the operator is not implemented yet — no controllers exist in this "
        "release. Use `goodput sandbox up` to start a simulated cluster.",
        file=sys.stderr,
    )
    return 3


if __name__ == "__main__":
    sys.exit(main())
