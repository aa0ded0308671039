"""Times as the API carries them: one parser, and one format per kind of field.

Every decision reads its clock as epoch seconds (the snapshot's `clock`) and writes times
only through these functions, so each status field has exactly one format:

- `seconds`: whole seconds, `2026-12-05T01:02:03Z` (metav1.Time). Every condition's
  `lastTransitionTime`; a TrainingJob's `startTime` and `completionTime`.
- `millis`: milliseconds, `2026-12-05T01:02:03.456Z`. Every other time the operator
  writes: incidents and their phases, quarantine records, checkpoints, progress,
  preemption, standby, regions, autoscaling.
- `micros`: microseconds, `2026-12-05T01:02:03.456789Z` (metav1.MicroTime). The leader
  Lease's `acquireTime` and `renewTime`.

Milliseconds where the operator measures: incident phases are seconds long, and whole
seconds would blur them; whole seconds where Kubernetes' own types say so.
"""

from __future__ import annotations

from datetime import UTC, datetime

LONGEST = 64  # characters: no RFC 3339 time is longer; anything longer is not one


def parse(value: str | None) -> float | None:
    """An RFC 3339 time (any of the formats above, or the API server's) as epoch seconds;
    None for None or "". A malformed value raises ValueError: the operator's own fields
    are written by the functions below, so one that does not parse is a bug to surface."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def parse_foreign(value: object) -> float | None:
    """A time a foreign object carries (a creationTimestamp, a field anyone may write) as
    epoch seconds, or None when it is absent, not a string, too long or malformed."""
    if not isinstance(value, str) or len(value) > LONGEST:
        return None
    try:
        return parse(value)
    except ValueError:
        return None


def seconds(clock: float) -> str:
    """metav1.Time for CLOCK (epoch seconds): whole seconds."""
    return datetime.fromtimestamp(clock, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def millis(clock: float) -> str:
    """RFC 3339 with milliseconds for CLOCK (epoch seconds)."""
    return datetime.fromtimestamp(clock, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def micros(clock: float) -> str:
    """metav1.MicroTime for CLOCK (epoch seconds)."""
    return datetime.fromtimestamp(clock, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
