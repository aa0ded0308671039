"""The upstream versions the sandbox builds, pinned in one place.

Kubernetes stays on 1.36: 1.37 pulls modules that need a newer Go than the machine's 1.26.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KUBERNETES = "v1.36.3"
KUBERNETES_STAGING = "v0.36.3"  # the k8s.io/* staging modules published with KUBERNETES
ETCD = "v3.6.16"
KWOK = "v0.8.0"
HELM = "v3.21.4"
KUEUE = "v0.17.0"  # quotas and MultiKueue (goodput sandbox up --kueue)
COREDNS = "v1.15.0"  # cluster DNS for real nodes: the newest the Go module proxy offers
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

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


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

COREDNS_COMPONENT = Component(
    name="coredns",
    module="github.com/coredns/coredns",
    version=COREDNS,
    binaries={"github.com/coredns/coredns": "coredns"},
    version_vars={"github.com/coredns/coredns/coremain.GitCommit": COREDNS},
)

KUEUE_COMPONENT = Component(
    name="kueue",
    module="sigs.k8s.io/kueue",
    version=KUEUE,
    binaries={"sigs.k8s.io/kueue/cmd/kueue": "kueue"},
    version_vars={"sigs.k8s.io/kueue/pkg/version.GitVersion": KUEUE},
)

SANDBOX_COMPONENTS = (KUBERNETES_COMPONENT, ETCD_COMPONENT, KWOK_COMPONENT)
# what real nodes need besides the control plane (kubelet is part of KUBERNETES_COMPONENT)
REAL_NODE_COMPONENTS = (COREDNS_COMPONENT,)
ALL_COMPONENTS = (*SANDBOX_COMPONENTS, HELM_COMPONENT, COREDNS_COMPONENT, KUEUE_COMPONENT)
