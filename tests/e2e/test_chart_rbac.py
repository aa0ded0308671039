"""The chart's RBAC is exactly what the operator uses: every e2e scenario runs the operator
with a token of the chart's ServiceAccount, and the API server's audit log says what it did.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import helm
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    CHART_ACCOUNT,
    CHART_NAMESPACE,
    CHART_RELEASE,
    CHART_VALUES,
    Audited,
    Operator,
)

E2E = Path(__file__).parent


def other_lanes_audits() -> list[Path]:
    """In `make test`, the files where the other simulated-fleet lanes say what their
    operators did (tests/lanes.py writes one as each ends): waited for, since such a lane
    may end after this one reaches its last test."""
    saved = [Path(p) for p in os.environ.get("GOODPUT_TEST_AUDITED_IN", "").split(os.pathsep)
             if p]
    for path in saved:
        wait_for(path.is_file, timeout=LANE_WAIT_SECONDS,
                 what=f"{path}: another lane's audit (its lane still running?)")
    return saved


LANE_WAIT_SECONDS = 1800  # a lane ends well within `make test`'s budget


def test_chart_rbac_is_exactly_what_the_operator_used(crds: Cluster, chart_kubeconfig: Path,
                                                      operator: Operator,
                                                      audited_elsewhere: Audited,
                                                      request: pytest.FixtureRequest) -> None:
    """Runs last (tests/e2e/conftest.py orders it): nothing refused to the operator; and,
    when the whole e2e suite ran, every granted verb was used at least once, by the
    session's operator, by those tests run in sandboxes of their own (Kueue's, in
    test_multicluster.py) or by the other simulated-fleet lanes of `make test`. Run alone,
    it audits what the operator did from its start (its initial lists and watches)."""
    if not crds.is_sandbox:
        pytest.skip("reads the sandbox API server's audit log")
    from goodput_operator.sandbox.cluster import Sandbox

    assert crds.sandbox_name
    log = Sandbox(crds.sandbox_name).audit_log
    wait_for(lambda: helm.audited(log, CHART_ACCOUNT)[0], timeout=30,
             what=f"a request by {CHART_ACCOUNT} in the audit log (is auditing on?)")
    used, refused = helm.audited(log, CHART_ACCOUNT)
    unaudited = [reason for saved in other_lanes_audits()
                 if (reason := audited_elsewhere.load(saved))]
    used |= audited_elsewhere.used
    refused += audited_elsewhere.refused
    assert not refused, "the chart's RBAC refused the operator:\n" + "\n".join(refused)
    grants = helm.granted(CHART_RELEASE, CHART_NAMESPACE, **CHART_VALUES)
    assert all(any(helm.covers(g, u) for g in grants) for u in used)  # else it was refused
    ran = {Path(str(item.fspath)).name for item in request.session.items}
    # modules another lane of the same `make test` runs (tests/lanes.py): the real-node
    # module's operator runs in a sandbox of its own, whose audit this test never read
    ran |= set(os.environ.get("GOODPUT_TEST_ELSEWHERE", "").split())
    if not {p.name for p in E2E.glob("test_*.py")} <= ran:
        pytest.skip("the unused-permission half needs the whole e2e suite")
    if unaudited:
        pytest.skip(f"the unused-permission half needs every lane's audit: {unaudited}")
    unused = sorted(g for g in grants if not any(helm.covers(g, u) for u in used))
    assert not unused, f"the chart grants permissions the operator never used: {unused}"
