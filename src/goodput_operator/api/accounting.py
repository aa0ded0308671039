"""An UltraServerGroup's accelerator-seconds, accounted: status.accounting.

Every accelerator of the group's nodes is, at each moment, in exactly one state: held by
a TrainingJob that is computing (productive) or losing its time (badput, by cause), by an
InferenceEndpoint's replicas (serving), by someone else's pod (other), held free on
standby for an endpoint, kept as a spare, quarantined, on a node that is not Ready
(unavailable), or free (idle); when the operator was not watching, unobserved. The
states' seconds add up to `acceleratorSeconds` (health/accounting.py; a unit test and an
e2e test check it). Each namespace's share of what its objects held is listed too.
"""

from __future__ import annotations

from pydantic import Field

from goodput_operator.api.base import ApiModel, nested

MAX_ACCOUNTED_NAMESPACES = 64  # status.accounting.namespaces' length: the largest first


class BadputSeconds(ApiModel):
    """Accelerator-seconds a TrainingJob held to no use, by cause (as its goodput books
    name them)."""

    launch: float = Field(default=0, ge=0)
    """Placed, until every worker ran."""
    detection: float = Field(default=0, ge=0)
    """From a failure until the operator acted (moved here from productive once known)."""
    replacement: float = Field(default=0, ge=0)
    """From the operator acting until the new placement (the rest of the gang waiting)."""
    restart: float = Field(default=0, ge=0)
    """From the new placement until every worker ran again."""
    lost_work: float = Field(default=0, ge=0)
    """Steps redone after a restart: the work since the checkpoint it resumed from."""
    checkpoint: float = Field(default=0, ge=0)
    """Training stalled by checkpoint saves (the SDK's timing)."""


class NamespaceAccount(ApiModel):
    """What one namespace's objects held in the group."""

    namespace: str = Field(max_length=63)
    """The namespace."""
    productive: float = Field(default=0, ge=0)
    """Held by its TrainingJobs while they computed."""
    serving: float = Field(default=0, ge=0)
    """Held by its InferenceEndpoints' replicas."""
    standby: float = Field(default=0, ge=0)
    """Held free on standby for its InferenceEndpoints."""
    badput: BadputSeconds = nested(BadputSeconds)
    """Held by its TrainingJobs to no use, by cause."""
    total: float = Field(default=0, ge=0)
    """The sum of the above."""


class Accounting(ApiModel):
    """Where the group's accelerator-seconds went since `since`: every state's seconds,
    and each namespace's; the states add up to `acceleratorSeconds`."""

    since: str | None = None
    """When accounting began (the operator's first pass over the group)."""
    as_of: str | None = None
    """The time the figures are counted to (written at least every minute)."""
    accelerator_seconds: float = Field(default=0, ge=0)
    """Accelerators on the group's nodes, integrated over time: the whole."""
    productive: float = Field(default=0, ge=0)
    """Held by TrainingJobs while every worker computed."""
    serving: float = Field(default=0, ge=0)
    """Held by InferenceEndpoints' replicas."""
    badput: BadputSeconds = nested(BadputSeconds)
    """Held by TrainingJobs to no use, by cause."""
    idle: float = Field(default=0, ge=0)
    """Free on usable nodes, not spare, not standby."""
    standby: float = Field(default=0, ge=0)
    """Free, held on standby for InferenceEndpoints (scaling.standbyDomains)."""
    spare: float = Field(default=0, ge=0)
    """On nodes held as spares (spec.spares), not in use."""
    quarantined: float = Field(default=0, ge=0)
    """On quarantined nodes."""
    unavailable: float = Field(default=0, ge=0)
    """On nodes that are not Ready, cordoned or not shaped as declared."""
    other: float = Field(default=0, ge=0)
    """Held by pods the operator does not run (another controller's, a person's)."""
    unobserved: float = Field(default=0, ge=0)
    """While no operator replica counted (a gap of over ten minutes between passes, or a
    leader hand-over)."""
    namespaces: list[NamespaceAccount] = Field(default_factory=list,
                                               max_length=MAX_ACCOUNTED_NAMESPACES)
    """Each namespace's share, the largest first (at most 64)."""
    namespaces_omitted: int = Field(default=0, ge=0)
    """Namespaces left out of `namespaces`."""
