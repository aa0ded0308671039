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
    save_seconds: float | None = Field(default=None, ge=0, le=86_400, alias="saveSeconds")
    """How long the save stalled training (write, flush, and for a sharded save the wait
    for every part): the job's goodput counts it as lost (lostSeconds.checkpoint)."""
    corrupt: str | None = Field(default=None, max_length=1024)
    """Set when a worker about to load this committed checkpoint found it is not what was
    committed (sdk.checkpoint.verified): why. The job never resumes from it again."""


class StepReport(Report):
    """A training step's numbers, and the replica's fingerprint for the SDC vote."""

    metrics: dict[str, float] = Field(default_factory=dict, max_length=64)
    """Loss, throughput and the like (NaN and Inf are evidence against the step)."""
    fingerprint: str | None = Field(default=None, pattern=r"^[0-9a-f]{8,64}$")
    """goodput_operator.sdk.fingerprint of the replica's parameters (or gradients)."""
    shard: str = Field(default="0", max_length=64)
    """The model shard this rank holds: equal shards must agree."""


class DeviceVerdict(BaseModel):
    index: int = Field(ge=0, le=1024)
    name: str = Field(default="", max_length=256)
    digest: str = Field(default="", max_length=128)
    ok: bool
    detail: str = Field(default="", max_length=1024)


class ProbeReport(BaseModel):
    """The SDC probe's verdict on a node (python -m goodput_operator.probe --report)."""

    model_config = ConfigDict(extra="ignore")

    node: str = Field(min_length=1, max_length=253)
    """The node probed: must be the probe pod's own node."""
    ok: bool
    """Every device agreed with the others and the reference."""
    bad: list[int] = Field(default_factory=list, max_length=1024)
    """Indexes of the devices that did not."""
    devices: list[DeviceVerdict] = Field(default_factory=list, max_length=1024)
    message: str = Field(default="", max_length=4096)
    backend: str = Field(default="", max_length=32)
    gflops: float = 0.0


KINDS: dict[str, type[BaseModel]] = {"checkpoint": CheckpointReport, "step": StepReport,
                                     "probe": ProbeReport}
