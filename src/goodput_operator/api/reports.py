"""What workers may report to the operator (goodput_operator.sdk sends these)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, le=10**15)
    """Training step."""
    rank: int | None = Field(default=None, ge=0, le=10**6)
    """The reporting worker's rank (informational: the token says which pod it is)."""
    job: str | None = Field(default=None, max_length=317)
    """namespace/name of the job the worker believes it reports for (GOODPUT_JOB); a
    mismatch with the token's job is refused."""


class CheckpointReport(Report):
    """A checkpoint the worker finished writing."""

    path: str = Field(min_length=1, max_length=4096)
    """Where it was written."""
    digest: str | None = Field(default=None, max_length=256)
    """A digest of its contents, e.g. sha256:..."""


class StepReport(Report):
    """A training step's numbers."""

    metrics: dict[str, float] = Field(default_factory=dict, max_length=64)
    """Loss, throughput and the like."""


KINDS: dict[str, type[Report]] = {"checkpoint": CheckpointReport, "step": StepReport}
