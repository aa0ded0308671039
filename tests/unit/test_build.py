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


ETCD_GO_MOD = """module go.etcd.io/etcd/server/v3

require (
\tgo.etcd.io/etcd/api/v3 v3.6.16
\tgo.etcd.io/etcd/client/v3 v3.6.16
\tk8s.io/api v0.0.0
)

replace (
\tgo.etcd.io/etcd/api/v3 => ../api
\tgo.etcd.io/etcd/client/v3 => ../client/v3
)
"""


def _member(name: str, module: str, version: str, replace_version: str | None,
            main_go: str | None = None) -> versions.Component:
    return versions.Component(name, module, version, {f"{module}/cmd/{name}": name},
                              replace_version=replace_version, main_go=main_go)


def test_a_graph_pins_every_members_relative_replaces_but_not_the_members() -> None:
    k8s = _member("kubernetes", "k8s.io/kubernetes", "v1.36.3", "v0.36.3")
    etcd = _member("etcd", "go.etcd.io/etcd/server/v3", "v3.6.16", "v3.6.16")
    kwok = _member("kwok", "sigs.k8s.io/kwok", "v0.8.0", None)
    k8s_go_mod = UPSTREAM_GO_MOD.replace("replace go.etcd.io/etcd/api/v3 => ../api\n", "")
    pins = build.graph_replaces((k8s, etcd, kwok), (k8s_go_mod, ETCD_GO_MOD, ""))
    assert pins == {"k8s.io/api": "v0.36.3", "k8s.io/client-go": "v0.36.3",
                    "go.etcd.io/etcd/api/v3": "v3.6.16", "go.etcd.io/etcd/client/v3": "v3.6.16"}
    # two members that replace one module pin it at two versions: a graph that cannot be
    # built says so before Go runs
    with pytest.raises(build.BuildError, match=r"etcd/api/v3 is pinned to both v0\.36\.3 and v3"):
        build.graph_replaces((k8s, etcd), (UPSTREAM_GO_MOD, ETCD_GO_MOD))


def test_a_graph_asks_go_for_every_members_commands_at_its_version() -> None:
    k8s = _member("kubernetes", "k8s.io/kubernetes", "v1.36.3", "v0.36.3")
    # a member whose command is the wrapper's own main: the packages of its module that
    # the main imports, never the module's root (CoreDNS's root links every plugin)
    main = ('package main\n\nimport (\n\t"github.com/coredns/coredns/coremain"\n'
            '\t_ "github.com/coredns/coredns/plugin/cache"\n\t"fmt"\n'
            '\t_ "github.com/coredns/corednsx/plugin"\n)\n')
    dns = _member("coredns", "github.com/coredns/coredns", "v1.14.7", None, main)
    assert build.graph_requirements((k8s, dns)) == [
        "k8s.io/kubernetes/cmd/kubernetes@v1.36.3",
        "github.com/coredns/coredns/coremain@v1.14.7",
        "github.com/coredns/coredns/plugin/cache@v1.14.7"]


def test_corednss_requirements_are_the_plugins_its_main_links() -> None:
    wanted = build.graph_requirements((versions.COREDNS_COMPONENT,))
    plugins = {f"github.com/coredns/coredns/plugin/{p}@{versions.COREDNS}"
               for p in versions.COREDNS_PLUGINS}
    assert set(wanted) == plugins | {f"github.com/coredns/coredns/coremain@{versions.COREDNS}"}


def test_the_shared_graph_is_kubernetes_and_what_links_its_packages() -> None:
    shared = {c.name for c in versions.SHARED_GRAPH}
    assert shared == {"kubernetes", "etcd", "kwok", "helm", "coredns"}
    for component in versions.ALL_COMPONENTS:
        graph = versions.graph_of(component)
        assert component in graph and (len(graph) > 1) == (component.name in shared)


def test_kubeadm_builds_on_the_shared_graph_without_moving_its_members_keys() -> None:
    # kubeadm is another command of the Kubernetes module: built on the shared go.mod, its
    # packages in common with Kubernetes' build are cache hits; as a non-member it leaves
    # the members' keys (every warm cache's Kubernetes build) where they were
    kubeadm = versions.KUBEADM_COMPONENT
    assert versions.graph_of(kubeadm) == (*versions.SHARED_GRAPH, kubeadm)
    assert kubeadm not in versions.SHARED_GRAPH
    for member in versions.SHARED_GRAPH:
        assert kubeadm not in versions.graph_of(member)
    wanted = build.graph_requirements(versions.graph_of(kubeadm))
    assert f"k8s.io/kubernetes/cmd/kubeadm@{versions.KUBERNETES}" in wanted
    assert set(build.graph_requirements(versions.SHARED_GRAPH)) < set(wanted)


def test_a_members_cache_key_changes_with_any_other_members_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # kwok's binary compiles the dependency versions the whole graph resolves: a new etcd
    # may move them, so a warm cache of the old kwok must not pass for the new one
    before, dns_before = versions.KWOK_COMPONENT.key, versions.COREDNS_COMPONENT.key
    kueue_before = versions.KUEUE_COMPONENT.key
    newer_etcd = versions.Component("etcd", versions.ETCD_COMPONENT.module, "v3.6.99",
                                    versions.ETCD_COMPONENT.binaries, replace_version="v3.6.99")
    graph = tuple(newer_etcd if c.name == "etcd" else c for c in versions.SHARED_GRAPH)
    monkeypatch.setattr(versions, "SHARED_GRAPH", graph)
    assert versions.KWOK_COMPONENT.key != before
    assert versions.KWOK_COMPONENT.key.startswith(f"kwok-{versions.KWOK}-")
    assert versions.COREDNS_COMPONENT.key != dns_before  # a member with a main of its own
    assert versions.COREDNS_COMPONENT.key.startswith(f"coredns-{versions.COREDNS}-")
    assert versions.KUEUE_COMPONENT.key == kueue_before  # not a member: unmoved


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
    assert folder.parent == tmp_path / "bin" and folder.name.startswith(f"etcd-{versions.ETCD}-")
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
