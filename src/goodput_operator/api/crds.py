"""The three CustomResourceDefinitions, generated from the pydantic models.

`outputs()` is crds/, the Helm chart's copy and docs/api.md; goodput_operator.generate
writes them with the other generated files (`make generate`) and checks them
(`make verify`, and a unit test).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from goodput_operator.api.base import CATEGORY, GROUP, K8S_EXTRA, VERSION, cel
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec, InferenceEndpointStatus
from goodput_operator.api.schema import JsonSchema, k8s_schema, map_schema, strip_defaults
from goodput_operator.api.trainingjob import TrainingJobSpec, TrainingJobStatus
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec, UltraServerGroupStatus


@dataclass(frozen=True)
class Column:
    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0

    def render(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "type": self.type,
                                  "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


AGE = Column("Age", ".metadata.creationTimestamp", "date")
# A workload's name is the value of a label on each of its pods: at most 63 characters.
# (Its children's names are derived from it validly: see resources.pods.child_name.)
NAME_FITS_A_LABEL = {K8S_EXTRA: [cel(
    "size(self.metadata.name) <= 63",
    "metadata.name: at most 63 characters (it labels every pod of the workload)")]}


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    short_names: tuple[str, ...]
    scope: str
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    columns: tuple[Column, ...]
    scale: dict[str, str] | None = None
    extra_root: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def singular(self) -> str:
        return self.kind.lower()


KINDS: tuple[Kind, ...] = (
    Kind(
        kind="UltraServerGroup", plural="ultraservergroups", short_names=("usg",),
        scope="Cluster", spec=UltraServerGroupSpec, status=UltraServerGroupStatus,
        description="A pool of tightly coupled accelerator domains (Trn2 UltraServers, NVL72 "
                    "NVLink domains) found from node labels: health, spares, quarantine, "
                    "occupancy.",
        columns=(
            Column("Health", ".status.health", description="Worst domain health"),
            Column("Domains", ".status.totals.domains", "integer"),
            Column("Ready", ".status.totals.readyNodes", "integer",
                   "Ready, unquarantined nodes"),
            Column("Nodes", ".status.totals.nodes", "integer"),
            Column("Accelerators", ".status.totals.accelerators", "integer"),
            Column("Free", ".status.totals.freeAccelerators", "integer",
                   "Accelerators not requested by any pod"),
            Column("Quarantined", ".status.totals.quarantined", "integer", priority=1),
            Column("Spares", ".status.totals.spares", "integer", priority=1),
            AGE,
        ),
    ),
    Kind(
        kind="TrainingJob", plural="trainingjobs", short_names=("tj",), scope="Namespaced",
        spec=TrainingJobSpec, status=TrainingJobStatus,
        description="A gang of training workers placed topology-aware, launched with "
                    "torchrun/Neuron settings, recovered from failures on spares from its "
                    "last committed checkpoint (its last verified one with "
                    "checkpoint.verify).",
        columns=(
            Column("Phase", ".status.phase"),
            Column("Ready", ".status.workers.ready", "integer", "Workers running and ready"),
            Column("Workers", ".spec.workers", "integer"),
            Column("Accelerators", ".status.accelerators", "integer"),
            Column("Domains", ".status.placement.domainSummary",
                   description="Domains occupied (up to three names, then how many more)"),
            Column("Restarts", ".status.restarts", "integer"),
            Column("Goodput", ".status.goodput.ratio", "number", priority=1),
            Column("Cluster", ".status.cluster", description="The cluster that runs it "
                   "(MultiKueue)", priority=1),
            AGE,
        ),
        extra_root=NAME_FITS_A_LABEL,
    ),
    Kind(
        kind="InferenceEndpoint", plural="inferenceendpoints", short_names=("ie",),
        scope="Namespaced", spec=InferenceEndpointSpec, status=InferenceEndpointStatus,
        description="Model-serving replicas, each a group of pods inside one accelerator "
                    "domain, autoscaled from Prometheus metrics with stabilization and "
                    "domain-aware capacity.",
        columns=(
            Column("Model", ".spec.model.name"),
            Column("Ready", ".status.readyReplicas", "integer", "Replica groups ready"),
            Column("Desired", ".status.desiredReplicas", "integer"),
            Column("Pods/Replica", ".spec.replicaShape.workers", "integer"),
            Column("Accel/Pod", ".spec.replicaShape.acceleratorsPerWorker", "integer",
                   priority=1),
            AGE,
        ),
        scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
               "labelSelectorPath": ".status.selector"},
        extra_root=NAME_FITS_A_LABEL,
    ),
)


def _one_line(node: JsonSchema) -> JsonSchema:
    if "description" in node:
        node["description"] = re.sub(r"\s+", " ", node["description"]).strip()
    return node


def _tidy(schema: JsonSchema) -> JsonSchema:
    """Descriptions on one line each, as `kubectl explain` re-wraps them anyway."""
    return map_schema(schema, _one_line)


def crd(kind: Kind) -> dict[str, Any]:
    spec_schema = _tidy(k8s_schema(kind.spec))
    status_schema = _tidy(strip_defaults(k8s_schema(kind.status)))
    root: JsonSchema = {
        "type": "object",
        "description": kind.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "goodput.dev/v1alpha1"},
            "kind": {"type": "string", "description": kind.kind},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        **kind.extra_root,
    }
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale:
        subresources["scale"] = dict(kind.scale)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind, "listKind": f"{kind.kind}List", "plural": kind.plural,
                "singular": kind.singular, "shortNames": list(kind.short_names),
                "categories": [CATEGORY],
            },
            "scope": kind.scope,
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": root},
                "subresources": subresources,
                "additionalPrinterColumns": [c.render() for c in kind.columns],
            }],
        },
    }


HEADER = "# Generated from goodput_operator.api by `make generate`. Do not edit.\n"


def render_crd(kind: Kind) -> str:
    return HEADER + yaml.safe_dump(crd(kind), sort_keys=False, width=100, allow_unicode=True)


def crd_filename(kind: Kind) -> str:
    return f"{GROUP}_{kind.plural}.yaml"


def outputs(root: Path) -> dict[Path, str]:
    """Every generated file, by path under ROOT."""
    from goodput_operator.api.docs import render_api_docs

    files: dict[Path, str] = {}
    for kind in KINDS:
        text = render_crd(kind)
        files[root / "crds" / crd_filename(kind)] = text
        files[root / "charts" / "goodput-operator" / "crds" / crd_filename(kind)] = text
    files[root / "docs" / "api.md"] = render_api_docs(KINDS, crd)
    return files


def stale(root: Path) -> list[Path]:
    return [path for path, text in outputs(root).items()
            if not path.is_file() or path.read_text() != text]
