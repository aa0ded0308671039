"""The Go build recipe: generated replaces, binary names, version stamps, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from goodput_operator.sandbox import build, versions

pytestmark = pytest.mark.unit

UPSTREAM_GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tk8s.io/api v0.0.0
\t// a comment
\tk8s.io/client-go v0.0.0
\tgithub.com/spf13/cobra v1.10.0
)

require go.etcd.io/etcd/api/v3 v3.6.16

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/some/fork => github.com/other/fork v1.2.3
)

replace go.etcd.io/etcd/api/v3 => ../api
replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
"""


def test_relative_replaces_of_required_modules_are_repinned() -> None:
    # remote replaces stay as they are; guard replaces of unrequired modules are skipped
    assert build.relative_replaces(UPSTREAM_GO_MOD) == [
        "go.etcd.io/etcd/api/v3",
        "k8s.io/api",
        "k8s.io/client-go",
    ]


@pytest.mark.parametrize(
    ("package", "binary"),
    [
        ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
        ("go.etcd.io/etcd/server/v3", "server"),
        ("helm.sh/helm/v3/cmd/helm", "helm"),
        ("sigs.k8s.io/kwok/cmd/kwokctl", "kwokctl"),
        (versions.wrapper_module("coredns"), "coredns"),
    ],
)
def test_go_binary_name_follows_go_build(package: str, binary: str) -> None:
    assert build.go_binary_name(package) == binary


def test_a_main_of_our_own_is_cached_apart_from_upstreams_command() -> None:
    # a warm cache holding CoreDNS built from its own main must not pass for the trimmed one
    component = versions.COREDNS_COMPONENT
    assert component.key.startswith(f"coredns-{versions.COREDNS}-")
    upstream = versions.Component(component.name, component.module, component.version,
                                  {component.module: "coredns"})
    assert upstream.key == f"coredns-{versions.COREDNS}"
    other = versions.Component(component.name, component.module, component.version,
                               component.binaries, main_go="package main\n")
    assert len({component.key, upstream.key, other.key}) == 3


def test_kubernetes_binaries_are_stamped_with_their_version() -> None:
    flags = build.ldflags(versions.KUBERNETES_COMPONENT)
    assert f"k8s.io/component-base/version.gitVersion={versions.KUBERNETES}" in flags
    assert f"k8s.io/client-go/pkg/version.gitVersion={versions.KUBERNETES}" in flags
    assert "gitMinor=36" in flags
    assert flags.startswith("-s -w")


def test_no_compile_makes_debug_information_the_linker_strips() -> None:
    flags = build.build_flags(versions.COREDNS_COMPONENT)
    assert "-s -w" in flags[flags.index("-ldflags") + 1]
    assert "-gcflags=all=-dwarf=false" in flags and "-trimpath" in flags


def test_binaries_are_cached_per_version_outside_the_repo(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.setenv("GOODPUT_CACHE", str(tmp_path))
    folder = build.bin_dir(versions.ETCD_COMPONENT)
    assert folder == tmp_path / "bin" / f"etcd-{versions.ETCD}"
    assert not build.is_built(versions.ETCD_COMPONENT)


def test_missing_go_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(build.Path, "is_file", lambda self: False)
    with pytest.raises(build.BuildError) as caught:
        build.find_go()
    message = str(caught.value)
    assert "\n" not in message
    assert "install Go 1.26 or newer" in message


def test_too_old_go_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go1.19.8\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.BuildError, match=r"go1\.19\.8; the sandbox needs Go >= 1\.26"):
        build.find_go()


def test_failed_go_command_names_the_cause() -> None:
    line = build._one_line_failure(
        ("mod", "download", "x"),
        "go: downloading x\ngo: x@v1: Get \"https://proxy.golang.org/x\": dial tcp: lookup\n",
    )
    assert line.startswith("go mod download failed:")
    assert "module proxy was not reachable" in line
    assert "\n" not in line


def test_a_failed_go_command_keeps_its_output_for_the_reports_tail(tmp_path: Path) -> None:
    fake_go = tmp_path / "go"
    fake_go.write_text("#!/bin/sh\necho 'compiling k8s.io/api' >&2\n"
                       "echo 'cmd/kubelet: undefined: Foo' >&2\nexit 1\n")
    fake_go.chmod(0o755)
    go = build._Go(str(fake_go), tmp_path / "work", keep_log=True)
    go.workdir.mkdir()
    with pytest.raises(build.BuildError) as caught:
        go.run("build", "./...")
    assert str(caught.value) == "go build ./... failed: cmd/kubelet: undefined: Foo"
    assert caught.value.log == go.log
    assert caught.value.tail().splitlines() == [
        "$ go build ./...", "compiling k8s.io/api", "cmd/kubelet: undefined: Foo"]
    assert build.BuildError("no log").tail() == ""
