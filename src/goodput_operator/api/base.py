"""Shared pieces of the three APIs: the model base, CEL rules, conditions, pod templates.

The pydantic models are the single source of truth: field docstrings become the CRD's
descriptions (and `kubectl explain`), field constraints become schema bounds, and rules
declared with `cel()` become `x-kubernetes-validations` checked at admission.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

GROUP = "goodput.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "goodput"

# A Kubernetes DNS-1123 label / subdomain and a qualified label key.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
LABEL_KEY = rf"^{_PREFIX}[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
RESOURCE_NAME = rf"^{_PREFIX}[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
CONDITION_TYPE = rf"^{_PREFIX}(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
PERCENT_OR_COUNT = r"^(100|[1-9]?[0-9])%$"
HOSTNAME_LABEL = "kubernetes.io/hostname"
NODE_NAME_FIELD = "metadata.name"  # a node selector field (matchFields): the node's name

K8S_EXTRA = "x-kubernetes-validations"
JsonDict = dict[str, Any]
"""A JSON object as pydantic's json_schema_extra takes it."""


def cel(rule: str, message: str, field_path: str | None = None,
        reason: str = "FieldValueInvalid") -> JsonDict:
    """A CEL validation rule; its message names the field and says what is allowed."""
    validation: JsonDict = {"rule": rule, "message": message, "reason": reason}
    if field_path:
        validation["fieldPath"] = field_path
    return validation


MESSAGE_LENGTH = 1024  # characters the operator keeps of a message, reason or evidence it
# writes into a status (the rest of a long one is in the operator's log and events)
SHORT_MESSAGE_LENGTH = 512  # the same inside a reason that carries several of them

LabelKey = Annotated[str, Field(max_length=317, pattern=LABEL_KEY)]
"""A label (or condition type, taint) key such as topology.k8s.aws/ultraserver-id."""


def immutable(field: str) -> JsonDict:
    return cel("self == oldSelf", f"{field} is immutable once set", reason="FieldValueForbidden")


def schema_default(value: Any) -> JsonDict:
    """The default written into the schema when pydantic only knows a default_factory."""
    return {"default": value}


def rules(*validations: JsonDict, extra: Literal["allow"] | None = None) -> ConfigDict:
    """Model-level CEL rules (cross-field checks), merged into ApiModel's config; EXTRA:
    "allow" for pass-through core/v1 types."""
    config = ConfigDict(json_schema_extra={K8S_EXTRA: list(validations)})
    if extra:
        config["extra"] = extra
    return config


def field_rules(*validations: JsonDict) -> JsonDict:
    """Field-level CEL rules, for Field(json_schema_extra=...)."""
    return {K8S_EXTRA: list(validations)}


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; docstrings are the field docs."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="forbid",
        validate_default=True,
    )


def describe_errors(err: ValidationError) -> str:
    """A validation error in one line: `field.path: message; ...`."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                     for e in err.errors())


def nested(model: type[ApiModel], **schema: Any) -> Any:
    """A sub-object that defaults to all of its own defaults, spelled out in the schema:
    the API server checks a default against CEL rules without applying nested defaults."""
    default = model().model_dump(by_alias=True, exclude_none=True, mode="json")
    return Field(default_factory=model, json_schema_extra={"default": default, **schema})


# int-or-string, as Kubernetes' IntOrString: a count (>= 0) or a percentage ("25%").
IntOrPercent = Annotated[
    int | str,
    Field(json_schema_extra={
        "x-kubernetes-int-or-string": True,
        **field_rules(cel(
            "type(self) == int ? self >= 0 : self.matches('" + PERCENT_OR_COUNT + "')",
            "must be a count >= 0 or a percentage such as \"25%\"",
        )),
    }),
]


def resolve(value: int | str, total: int, round_up: bool = True) -> int:
    """An IntOrPercent against TOTAL. Percentages round up (a budget of 20% of 8 nodes is 2,
    a rollout's surge) or down (a rollout's maxUnavailable), as Deployments do."""
    if isinstance(value, int):
        return value
    if value.endswith("%"):
        fraction = total * int(value[:-1]) / 100
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(value)


class Condition(ApiModel):
    """A metav1.Condition: the latest observation of one aspect of the object's state."""

    type: str = Field(max_length=316, pattern=CONDITION_TYPE)
    """Type of condition in CamelCase, e.g. Ready, Placed, ScalingLimited."""
    status: Literal["True", "False", "Unknown"]
    """Status of the condition: True, False or Unknown."""
    reason: str = Field(max_length=1024, min_length=1,
                        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """A programmatic identifier in CamelCase for the last transition."""
    message: str = Field(default="", max_length=32768)
    """A human-readable message with details about the transition."""
    last_transition_time: datetime
    """When the condition last changed status (not when its message last changed)."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation the condition was set from."""


def conditions_field() -> Any:
    return Field(
        default_factory=list, max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


def _not_ours(field: str) -> JsonDict:
    return cel("self.all(k, !k.matches('^([^/]*[.])?goodput[.]dev/'))",
               f"template.metadata.{field}: keys in goodput.dev/ are set by the operator only")


MAX_TEMPLATE_KEYS = 128  # labels or annotations on a pod template: what keeps the CEL
# rule that checks their keys within the API server's cost budget for 5 templates a job


class ObjectMetaTemplate(ApiModel):
    """Labels and annotations copied onto each pod."""

    model_config = ConfigDict(extra="allow")

    labels: dict[str, str] = Field(default_factory=dict, max_length=MAX_TEMPLATE_KEYS,
                                   json_schema_extra=field_rules(_not_ours("labels")))
    """Labels added to every pod. Keys in goodput.dev/ (and its subdomains) are the
    operator's word about a pod (its job, rank, node) and are refused."""
    annotations: dict[str, str] = Field(default_factory=dict, max_length=MAX_TEMPLATE_KEYS,
                                        json_schema_extra=field_rules(_not_ours("annotations")))
    """Annotations added to every pod; goodput.dev/ keys are refused, as for labels."""


class Container(ApiModel):
    """A container (core/v1 Container). Only name and image are checked here; the rest is
    passed through and checked by the API server when the pod is created."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(max_length=63, pattern=DNS_LABEL)
    """Container name, unique within the pod."""
    image: str = Field(min_length=1, max_length=1024)
    """Container image."""


class NodeSelectorRequirement(ApiModel):
    """A node selector requirement (core/v1); only its key is checked here."""

    model_config = ConfigDict(extra="allow")

    key: str = Field(max_length=317)
    """The label (or field) the requirement is about."""


class NodeSelectorTerm(ApiModel):
    """A node selector term (core/v1). Terms may not name nodes: the operator pins each
    worker to the node its gang was placed on."""

    model_config = rules(
        cel(f"!has(self.matchExpressions) || "
            f"self.matchExpressions.all(e, e.key != '{HOSTNAME_LABEL}')",
            f"template.spec.affinity: a required node affinity on {HOSTNAME_LABEL} would "
            "fight the placement; select nodes by their labels instead"),
        cel("!has(self.matchFields)",
            "template.spec.affinity: matchFields selects nodes by name, which the operator "
            "chooses; select nodes by their labels instead"),
        extra="allow")

    match_expressions: list[NodeSelectorRequirement] | None = Field(default=None,
                                                                     max_length=64)
    """Requirements on node labels."""
    match_fields: list[NodeSelectorRequirement] | None = Field(default=None, max_length=64)
    """Requirements on node fields: refused (they name nodes)."""


class NodeSelector(ApiModel):
    """Required node selector terms (ORed)."""

    model_config = ConfigDict(extra="allow")

    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list, max_length=32)
    """The terms; a node matching any of them qualifies."""


class NodeAffinity(ApiModel):
    """Node affinity (core/v1); the required part is checked, the rest passes through."""

    model_config = ConfigDict(extra="allow")

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    """Nodes a worker may run on: the operator adds its placed node to every term."""


class Affinity(ApiModel):
    """Affinity (core/v1); node affinity is checked, pod (anti-)affinity passes through."""

    model_config = ConfigDict(extra="allow")

    node_affinity: NodeAffinity | None = None
    """Node affinity."""


class PodSpecTemplate(ApiModel):
    """A core/v1 PodSpec. Containers are checked here; other fields pass through, except
    those that would take a worker's placement away from the operator."""

    model_config = rules(
        cel("!has(self.nodeName)",
            "template.spec.nodeName: the operator chooses each worker's node; select nodes "
            "with spec.nodeSelector or the UltraServerGroup instead", ".nodeName",
            reason="FieldValueForbidden"),
        cel("!has(self.schedulingGates)",
            "template.spec.schedulingGates: the operator gates workers until their gang is "
            "placed; other gates would hold a placed gang forever", ".schedulingGates",
            reason="FieldValueForbidden"),
        extra="allow")

    containers: list[Container] = Field(min_length=1, max_length=32)
    """The worker's containers; at least one."""
    node_name: str | None = None
    """Refused: the operator chooses each worker's node."""
    scheduling_gates: list[dict[str, str]] | None = Field(default=None, max_length=16)
    """Refused: the operator gates workers until their gang is placed."""
    affinity: Affinity | None = None
    """Affinity; a required node affinity may not name nodes (by hostname or by field)."""


class PodTemplate(ApiModel):
    """The pod each worker runs (a core/v1 PodTemplateSpec). The operator adds placement
    (node affinity, scheduling gates), rank environment, and accelerator requests."""

    metadata: ObjectMetaTemplate = nested(ObjectMetaTemplate)
    """Labels and annotations for every pod."""
    spec: PodSpecTemplate
    """The pod spec: containers, volumes, tolerations, service account and so on."""
