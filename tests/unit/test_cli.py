"""The command line fails with one clear line, never a traceback."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from goodput_operator import cli
from goodput_operator.operator import main as operator_main

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("fleet_ref", "message"),
    [
        ("tpu-v5", "unknown fleet 'tpu-v5'"),
        ("synthetic:trn2:x", "bad synthetic fleet"),
    ],
)
def test_up_with_a_bad_fleet_fails_before_building_anything(
        capsys: pytest.CaptureFixture[str], fleet_ref: str, message: str) -> None:
    code, _, err = run(capsys, "sandbox", "up", "--fleet", fleet_ref, "--name", "unit-never")
    assert code == 1
    assert err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_up_with_a_malformed_fleet_file(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("apiVersion: sandbox.goodput.dev/v1alpha1\nkind: SimulatedFleet\n"
                   "metadata: {name: b}\nspec: {pools: [{name: x}]}\n")
    code, _, err = run(capsys, "sandbox", "up", "--fleet", str(bad), "--name", "unit-never")
    assert code == 1
    assert str(bad) in err and "spec.pools.0.instanceType" in err
    assert len(err.strip().splitlines()) == 1


def test_fleets_lists_every_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sandbox", "fleets")
    assert code == 0
    for name in ("mixed", "trn2", "p5", "nvl72"):
        assert f"fleet {name}:" in out


def test_render_fleet_prints_applyable_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sandbox", "render-fleet", "--fleet", "nvl72")
    assert code == 0
    document = yaml.safe_load(out)
    assert document["kind"] == "List"
    assert len(document["items"]) == 36
    assert document["items"][0]["metadata"]["labels"]["nvidia.com/gpu.clique"].endswith(".0")


def test_unknown_verb_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["sandbox", "explode"])
    assert exited.value.code == 2


def test_kubectl_plugin_is_the_same_cli() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-goodput"] == scripts["goodput"] == "goodput_operator.cli:main"


def test_operator_without_a_cluster_fails_fast_with_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from kubernetes.config import kube_config

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "missing"))
    code = operator_main.main(["--metrics-port", "0", "--health-port", "0"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("goodput-operator: error: no cluster to talk to")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("given", "parsed"), [([], 500), (["--reports-per-job", "2"], 2)])
def test_reports_per_job_defaults_to_what_one_leader_answers(
        given: list[str], parsed: int) -> None:
    assert operator_main.parse(given).reports_per_job == parsed


def test_reports_per_job_below_one_is_refused_by_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        operator_main.parse(["--reports-per-job", "0"])
    assert exited.value.code == 2
    assert "--reports-per-job must be at least 1, not 0" in capsys.readouterr().err


@pytest.mark.parametrize("error", ["ImageError", "RealNodeError", "HostError"])
def test_a_real_node_failure_is_one_line_not_a_traceback(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, error: str) -> None:
    from goodput_operator.sandbox import cluster, hostnet, images, realnode

    kind = {"ImageError": images.ImageError, "RealNodeError": realnode.RealNodeError,
            "HostError": hostnet.HostError}[error]

    def fail(*_: object, **__: object) -> None:
        raise kind("debootstrap failed (1): E: no mirror")
    monkeypatch.setattr(cluster, "up", fail)
    code, _, err = run(capsys, "sandbox", "up", "--name", "x", "--real-nodes", "1")
    assert code == 1 and err.strip() == "error: debootstrap failed (1): E: no mirror"


def test_connect_to_sandboxes_that_do_not_run_is_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sandbox", "connect", "unit-never-manager", "unit-never-a")
    assert code == 1
    assert err.strip() == ("error: sandbox 'unit-never-manager' is not running: start it "
                           "with `goodput sandbox up --name unit-never-manager`")


def test_up_with_kueue_starts_it_after_the_sandbox(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from goodput_operator.sandbox import cluster, fleet, kueue

    started: list[str] = []
    monkeypatch.setattr(cluster, "up", lambda box, *_, **__: (started.append("up"),
                                                              fleet.load("trn2"))[1])
    monkeypatch.setattr(kueue, "start", lambda box: started.append(f"kueue {box.name}"))
    code, out, _ = run(capsys, "sandbox", "up", "--name", "region-a", "--kueue")
    assert code == 0 and started == ["up", "kueue region-a"]
    assert "fleet trn2" in out


def test_up_with_peers_starts_each_after_the_sandbox(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from goodput_operator.sandbox import cluster, fleet, jobset, kueue, scalers

    started: list[str] = []
    monkeypatch.setattr(cluster, "up", lambda box, *_, **__: (started.append("up"),
                                                              fleet.load("trn2"))[1])
    monkeypatch.setattr(kueue, "start", lambda box: started.append("kueue"))
    monkeypatch.setattr(jobset, "start", lambda box: started.append("jobset"))
    monkeypatch.setattr(scalers, "start_adapter", lambda box, url: started.append(f"hpa {url}"))
    monkeypatch.setattr(scalers, "start_keda", lambda box: started.append("keda"))
    code, _, _ = run(capsys, "sandbox", "up", "--name", "h2h", "--peers", "keda,jobset,kueue,hpa",
                     "--prometheus-url", "http://127.0.0.1:9091")
    assert code == 0
    assert started == ["up", "kueue", "jobset", "hpa http://127.0.0.1:9091", "keda"]


def test_an_unknown_peer_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(capsys, "sandbox", "up", "--name", "h2h", "--peers", "jobset,volcano")
    assert "unknown peer(s) volcano: known are kueue, jobset, lws, hpa, keda" in \
        capsys.readouterr().err
