"""What the sandbox benchmarks share: a fresh sandbox with the CRDs, an UltraServerGroup,
and the operator running as a process, torn down afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from goodput_operator.sandbox import cluster

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def operator_sandbox(name: str, fleet: str, group: dict[str, Any],
                     namespaces: Sequence[str] = (),
                     wait_seconds: float = 120) -> Iterator[cluster.Sandbox]:
    """Sandbox NAME (recreated) with FLEET, the CRDs, GROUP and NAMESPACES; the operator
    logs to operator.log in the sandbox's home."""
    box = cluster.Sandbox(name)
    if box.is_running():
        cluster.down(box)
    cluster.up(box, fleet, wait_seconds=wait_seconds)
    try:
        box.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        box.kubectl("wait", "--for", "condition=Established", "--timeout=60s",
                    "crd/trainingjobs.goodput.dev")
        for namespace in namespaces:
            box.kubectl("create", "namespace", namespace)
        box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(group))
        with open(Path(box.home) / "operator.log", "w") as log:
            operator = subprocess.Popen(
                [sys.executable, "-m", "goodput_operator.operator.main", "--health-port", "0",
                 "--metrics-port", "0", "--report-port", "0"],
                env={**os.environ, "KUBECONFIG": str(box.kubeconfig)}, stdout=log,
                stderr=subprocess.STDOUT)
            try:
                yield box
            finally:
                operator.terminate()
                operator.wait(timeout=30)
    finally:
        cluster.down(box)
