"""The upstream versions the sandbox builds, pinned in one place.

Kubernetes stays on 1.36: 1.37 pulls modules that need a newer Go than the machine's 1.26.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

KUBERNETES = "v1.36.3"
KUBERNETES_STAGING = "v0.36.3"  # the k8s.io/* staging modules published with KUBERNETES
ETCD = "v3.6.16"
KWOK = "v0.8.0"
HELM = "v3.21.4"
KUEUE = "v0.17.0"  # quotas and MultiKueue (goodput sandbox up --kueue)
JOBSET = "v0.11.1"  # a peer, for the head-to-head benchmarks only (sandbox/jobset.py)
LWS = "v0.8.0"  # a peer: multi-node serving groups (sandbox/lws.py)
PROMETHEUS_ADAPTER = "v0.12.0"  # a peer: the HPA's custom metrics (sandbox/scalers.py)
KEDA = "v2.21.0"  # a peer: KEDA's operator and metrics server (sandbox/scalers.py)
VERSITYGW = "v1.8.0"  # the S3-compatible server checkpoints go to (sandbox/objectstore.py)
KIND = "v0.33.0"  # `goodput kind up` (sandbox/kind.py; shared/design/KIND.md)
CRI_TOOLS = "v1.36.0"  # crictl, in the kind node image as kind's own image has it
LOCAL_PATH = "v0.0.30"  # the kind node image's default StorageClass (the only one served)
# cluster DNS for real nodes: the newest on k8s.io v0.35 (v1.15 needs v0.37, newer than
# Kubernetes' own staging), so it joins SHARED_GRAPH and compiles against Kubernetes' client-go
COREDNS = "v1.14.7"
MIN_GO = (1, 26)


@dataclass(frozen=True)
class Component:
    """One upstream Go module and the commands built from it."""

    name: str
    module: str
    version: str
    # package path -> binary name
    binaries: dict[str, str]
    # version that relative `replace` targets of the upstream go.mod are pinned to
    # (they are not inherited by a depending module, so the wrapper re-pins them)
    replace_version: str | None = None
    # `-X` variables stamped so the binaries report their real version
    version_vars: dict[str, str] = field(default_factory=dict)
    # Go source of the wrapper module's own main package, built (as the wrapper's module
    # path) instead of an upstream command that links far more than the sandbox runs
    main_go: str | None = None
    # non-relative `replace` lines of the upstream go.mod, copied into the wrapper (a
    # depending module does not inherit them): module@version -> module@version
    replaces: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The cache folder's name: a different main, or a different module graph (another
        member's version decides which dependency versions are compiled in), is a
        different binary."""
        inputs = self.main_go or ""
        graph = graph_of(self)
        if len(graph) > 1:
            inputs += "".join(f"\n{m.module}@{m.version} {m.replace_version} {sorted(m.binaries)}"
                              for m in graph)
        inputs += "".join(f"\n{old}={new}" for old, new in sorted(self.replaces.items()))
        if not inputs:
            return f"{self.name}-{self.version}"
        return f"{self.name}-{self.version}-{hashlib.sha256(inputs.encode()).hexdigest()[:8]}"


def wrapper_module(name: str) -> str:
    """The module path of the wrapper a component is built in."""
    return f"goodput.dev/sandbox/build/{name}"


def _k8s_version_vars() -> dict[str, str]:
    stamped: dict[str, str] = {}
    major, minor = KUBERNETES.lstrip("v").split(".")[:2]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamped |= {
            f"{pkg}.gitVersion": KUBERNETES,
            f"{pkg}.gitMajor": major,
            f"{pkg}.gitMinor": minor,
            f"{pkg}.gitTreeState": "clean",
            f"{pkg}.buildDate": "2026-01-01T00:00:00Z",
        }
    return stamped


KUBERNETES_COMPONENT = Component(
    name="kubernetes",
    module="k8s.io/kubernetes",
    version=KUBERNETES,
    binaries={
        f"k8s.io/kubernetes/cmd/{cmd}": cmd
        for cmd in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
                    "kubelet", "kube-proxy")
    },
    replace_version=KUBERNETES_STAGING,
    version_vars=_k8s_version_vars(),
)

ETCD_COMPONENT = Component(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    version=ETCD,
    binaries={"go.etcd.io/etcd/server/v3": "etcd"},
    replace_version=ETCD,
)

KWOK_COMPONENT = Component(
    name="kwok",
    module="sigs.k8s.io/kwok",
    version=KWOK,
    # kwok's release tag already carries its version in pkg/consts; nothing to stamp
    binaries={"sigs.k8s.io/kwok/cmd/kwok": "kwok", "sigs.k8s.io/kwok/cmd/kwokctl": "kwokctl"},
)

HELM_COMPONENT = Component(
    name="helm",
    module="helm.sh/helm/v3",
    version=HELM,
    binaries={"helm.sh/helm/v3/cmd/helm": "helm"},
    version_vars={"helm.sh/helm/v3/internal/version.version": HELM},
)

# The plugins the real nodes' Corefile uses (realnode.corefile). CoreDNS's own main links
# every plugin it ships (cloud DNS SDKs, tracing, gRPC: 1,403 packages to compile); a main
# with these four links 795: alone on the 2-core machine it built in 120 s wall / 211 s CPU
# against 160 s / 289 s, and the binary is 55 MB instead of 79 MB.
COREDNS_PLUGINS = ("bind", "errors", "kubernetes", "cache")


def _coredns_main() -> str:
    imports = "".join(f'\t_ "github.com/coredns/coredns/plugin/{p}"\n'
                      for p in sorted(COREDNS_PLUGINS))
    return ("// CoreDNS with the plugins the goodput sandbox's Corefile uses.\npackage main\n\n"
            f'import (\n\t"github.com/coredns/coredns/coremain"\n{imports})\n\n'
            "func main() { coremain.Run() }\n")


COREDNS_COMPONENT = Component(
    name="coredns",
    module="github.com/coredns/coredns",
    version=COREDNS,
    binaries={wrapper_module("coredns"): "coredns"},
    version_vars={"github.com/coredns/coredns/coremain.GitCommit": COREDNS},
    main_go=_coredns_main(),
)

KUEUE_COMPONENT = Component(
    name="kueue",
    module="sigs.k8s.io/kueue",
    version=KUEUE,
    binaries={"sigs.k8s.io/kueue/cmd/kueue": "kueue"},
    version_vars={"sigs.k8s.io/kueue/pkg/version.GitVersion": KUEUE},
)

# An S3 gateway over a POSIX directory (shared/design/PARTS.md): a real S3 API server for
# checkpoints on an object store, without a container engine
VERSITYGW_COMPONENT = Component(
    name="versitygw",
    module="github.com/versity/versitygw",
    version=VERSITYGW,
    binaries={"github.com/versity/versitygw/cmd/versitygw": "versitygw"},
)

JOBSET_COMPONENT = Component(
    name="jobset",
    module="sigs.k8s.io/jobset",
    version=JOBSET,
    binaries={"sigs.k8s.io/jobset": "jobset"},
    version_vars={"sigs.k8s.io/jobset/pkg/version.GitVersion": JOBSET},
)

LWS_COMPONENT = Component(
    name="lws",
    module="sigs.k8s.io/lws",
    version=LWS,
    binaries={"sigs.k8s.io/lws/cmd": "lws"},
    version_vars={"sigs.k8s.io/lws/pkg/version.GitVersion": LWS},
)

# The HPA's custom-metrics API from Prometheus: a peer of our autoscaler, never in
# `make test`'s critical path (PEERS.md: v0.12.0's dependencies are old, k8s.io v0.30).
PROMETHEUS_ADAPTER_COMPONENT = Component(
    name="prometheus-adapter",
    module="sigs.k8s.io/prometheus-adapter",
    version=PROMETHEUS_ADAPTER,
    binaries={"sigs.k8s.io/prometheus-adapter/cmd/adapter": "prometheus-adapter"},
)

# KEDA's operator (scalers, ScaledObjects -> HPAs) and its metrics server (the external
# metrics API the HPA asks). Both link every scaler KEDA ships (the cloud SDKs): the
# heaviest build of the sandbox, done once, on demand.
KEDA_COMPONENT = Component(
    name="keda",
    module="github.com/kedacore/keda/v2",
    version=KEDA,
    binaries={"github.com/kedacore/keda/v2/cmd/operator": "keda",
              "github.com/kedacore/keda/v2/cmd/adapter": "keda-adapter"},
    version_vars={"github.com/kedacore/keda/v2/version.Version": KEDA},
    replaces={"github.com/nexus-rpc/nexus-proto-annotations@v0.1.0":
              "github.com/nexus-rpc/nexus-proto-annotations@"
              "v0.1.1-0.20260629224316-835bd8d49cb4"},
)

# `goodput kind up`: kind's CLI, and what its node image holds that the sandbox does not
# build: kubeadm (the same Kubernetes module and stamps), crictl and the storage provisioner.
# Apart from SHARED_GRAPH, so that adding them rebuilds nothing the sandbox has; kubeadm is
# built on that graph (BUILT_ON_SHARED_GRAPH), and Go's build cache serves most of its packages.
KIND_COMPONENT = Component(
    name="kind",
    module="sigs.k8s.io/kind",
    version=KIND,
    binaries={"sigs.k8s.io/kind": "kind"},
)

KUBEADM_COMPONENT = Component(
    name="kubeadm",
    module="k8s.io/kubernetes",
    version=KUBERNETES,
    binaries={"k8s.io/kubernetes/cmd/kubeadm": "kubeadm"},
    replace_version=KUBERNETES_STAGING,
    version_vars=_k8s_version_vars(),
)

CRICTL_COMPONENT = Component(
    name="crictl",
    module="sigs.k8s.io/cri-tools",
    version=CRI_TOOLS,
    binaries={"sigs.k8s.io/cri-tools/cmd/crictl": "crictl"},
    version_vars={"sigs.k8s.io/cri-tools/pkg/version.Version": CRI_TOOLS},
)

LOCAL_PATH_COMPONENT = Component(
    name="local-path-provisioner",
    module="github.com/rancher/local-path-provisioner",
    version=LOCAL_PATH,
    binaries={"github.com/rancher/local-path-provisioner": "local-path-provisioner"},
    version_vars={"main.VERSION": LOCAL_PATH},
)

KIND_COMPONENTS = (KIND_COMPONENT, KUBEADM_COMPONENT, CRICTL_COMPONENT, LOCAL_PATH_COMPONENT)

# Built in one module graph, so every package they share is compiled once: each resolves
# the same dependency versions and Go's build cache serves the rest. By source bytes, 73% of
# etcd's packages, 90% of kwok's and 89% of helm's are in Kubernetes' build; built apart
# (each at the versions its own go.mod picks) they reuse nothing, and on the 2-core machine
# they took 1:00, 2:10 and 2:18 after Kubernetes' build against 0:19, 0:41 and 0:26 inside
# its graph. CoreDNS's client-go, apimachinery and api are Kubernetes' too (it took 5:09
# apart in a cold run, on the real-node lane's critical path). Kueue stays apart: v0.17
# links Kubeflow Trainer v2.2, whose generated code needs k8s.io/api v0.35
# (corev1.WorkloadReference is gone in v0.36).
SHARED_GRAPH = (KUBERNETES_COMPONENT, ETCD_COMPONENT, KWOK_COMPONENT, HELM_COMPONENT,
                COREDNS_COMPONENT)


# Built against the shared graph's go.mod without joining it: kubeadm is another command of
# the Kubernetes module at the same version, so it adds no requirement and moves no version
# the graph selects, and every package it shares with Kubernetes' build is a cache hit. In
# its own graph (Kubernetes' go.mod alone, without the versions etcd, kwok, helm and CoreDNS
# raise) it compiled 999 packages again, 3:22 on the 2-core machine. Not a member, so the
# shared graph's cache key (every warm cache's Kubernetes build) stays as it was.
BUILT_ON_SHARED_GRAPH = (KUBEADM_COMPONENT,)


def graph_of(component: Component) -> tuple[Component, ...]:
    """The components built in one module graph with COMPONENT (itself alone if none)."""
    if component in SHARED_GRAPH:
        return SHARED_GRAPH
    if component in BUILT_ON_SHARED_GRAPH:
        return (*SHARED_GRAPH, component)
    return (component,)


SANDBOX_COMPONENTS = (KUBERNETES_COMPONENT, ETCD_COMPONENT, KWOK_COMPONENT)
# what real nodes need besides the control plane (kubelet is part of KUBERNETES_COMPONENT)
REAL_NODE_COMPONENTS = (COREDNS_COMPONENT,)
ALL_COMPONENTS = (*SANDBOX_COMPONENTS, HELM_COMPONENT, COREDNS_COMPONENT, VERSITYGW_COMPONENT,
                  KUEUE_COMPONENT)
