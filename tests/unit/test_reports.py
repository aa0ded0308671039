"""What the report handlers make of workers' numbers before they reach the API server."""

from __future__ import annotations

import json
import math

import pytest

from goodput_operator.api.reports import StepReport
from goodput_operator.api.trainingjob import Progress
from goodput_operator.operator.reports import inside, progress_of

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0


@pytest.mark.parametrize(("reported", "metrics", "non_finite"), [
    ({"loss": 2.5, "tokensPerSecond": 1e6}, {"loss": 2.5, "tokensPerSecond": 1e6}, None),
    ({"loss": math.nan, "lr": 3e-4}, {"lr": 3e-4}, {"loss": "NaN"}),
    ({"loss": math.inf, "gradNorm": -math.inf}, {}, {"loss": "+Inf", "gradNorm": "-Inf"}),
    ({}, {}, None),
])
def test_step_progress_keeps_non_finite_numbers_by_name_in_valid_json(
        reported: dict[str, float], metrics: dict[str, float],
        non_finite: dict[str, str] | None) -> None:
    report = StepReport.model_validate_json(json.dumps({"step": 7, "metrics": reported}))
    progress = progress_of(report, 3, NOW)
    json.dumps(progress, allow_nan=False)  # what the API server would refuse, it never gets
    assert progress["metrics"] == metrics and progress.get("nonFinite") == non_finite
    assert progress["step"] == 7 and progress["rank"] == 3
    Progress.model_validate(progress)  # the status schema takes it


@pytest.mark.parametrize(("path", "root", "accepted"), [
    ("/fsx/llama/step-100", "/fsx/llama", True),
    ("/fsx/llama", "/fsx/llama/", True),
    ("/fsx/llama-other/step-1", "/fsx/llama", False),      # a sibling sharing the prefix
    ("/fsx/llama/../other/step-1", "/fsx/llama", False),   # climbing out
    ("/etc/passwd", "/fsx/llama", False),
    ("s3://bucket/run-1/step-5", "s3://bucket/run-1", True),
    ("s3://bucket/run-10/step-5", "s3://bucket/run-1", False),
    ("gs://bucket/run-1/step-5", "s3://bucket/run-1", False),  # another scheme
    ("s3://bucket/run-1/step-5", "/bucket/run-1", False),      # a URI under a local dir
])
def test_a_checkpoint_is_accepted_only_inside_the_jobs_directory(
        path: str, root: str, accepted: bool) -> None:
    assert inside(path, root) is accepted
