"""The report channel over TLS, end to end: the operator serves it with its certificate,
hands its CA to the workers (beside the hostfile) and to the probes (a ConfigMap in the
probe namespace), and the SDK trusts exactly that CA."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from goodput_operator import names
from goodput_operator.sdk import Reporter, ReportError
from tests.conftest import Cluster
from tests.e2e.conftest import (
    Operator,
    apply,
    get_object,
    job_pods,
    training_job,
    wait_phase,
)
from tests.e2e.test_recovery import env_of, worker_token

pytestmark = pytest.mark.e2e


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for 127.0.0.1 (openssl, as an admin would)."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
        "ca.crt", "-days", "1", "-subj", "/CN=goodput-e2e-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr",
        "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "tls.crt", "-days", "1", "-extfile", "san.cnf")
    return folder / "ca.crt", folder / "tls.crt", folder / "tls.key"


def test_workers_and_probes_get_the_ca_and_the_sdk_trusts_only_it(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str,
        chart_kubeconfig: Path, tmp_path: Path) -> None:
    ca, cert, key = certificates(tmp_path)
    tls = Operator(crds, tmp_path / "tls-operator.log", chart_kubeconfig)
    url = f"https://127.0.0.1:{tls.report_port}"
    tls.extra_args = ("--report-tls-cert", str(cert), "--report-tls-key", str(key),
                      "--report-ca", str(ca), "--report-url", url)
    e2e.stop()  # one operator at a time
    try:
        tls.start()
        apply(crds, training_job("secure", trn2_group, 1), namespace)
        wait_phase(crds, namespace, "secure", "Running")
        pod = job_pods(crds, namespace, "secure")[0]
        env = env_of(pod)
        assert env[names.ENV_REPORT_URL] == url
        assert env[names.ENV_REPORT_CA] == "/etc/goodput/report-ca.crt"
        hostfile = get_object(crds, "configmap", namespace, "secure-hostfile")["data"]
        assert hostfile["report-ca.crt"] == ca.read_text()
        probes = get_object(crds, "configmap", tls.probe_namespace, "goodput-report-ca")
        assert probes["data"]["report-ca.crt"] == ca.read_text()

        given = tmp_path / "given-ca.crt"  # what the worker reads from its mount
        given.write_text(hostfile["report-ca.crt"])
        token = worker_token(crds, namespace, pod["metadata"]["name"])
        assert Reporter(url, token, ca_file=str(given)).report_step(3)["accepted"]
        with pytest.raises(ReportError, match="CERTIFICATE_VERIFY_FAILED"):
            Reporter(url, token, retries=0).report_step(4)   # the system's CAs: refused
    finally:
        tls.stop()
        e2e.start()
