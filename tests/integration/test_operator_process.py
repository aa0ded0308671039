"""The operator process against a real API server: start-up failures are clear and final."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.conftest import Cluster


def test_a_taken_health_port_stops_the_operator_with_the_reason(crds: Cluster) -> None:
    """Not a retry loop behind a probe that someone else answers."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "goodput_operator.operator.main", "--health-port",
             str(port), "--metrics-port", "0", "--report-port", "0"],
            env={**os.environ, "KUBECONFIG": str(crds.kubeconfig)}, capture_output=True,
            text=True, timeout=60)
    assert proc.returncode != 0
    assert f"cannot serve on port {port}" in proc.stdout + proc.stderr
