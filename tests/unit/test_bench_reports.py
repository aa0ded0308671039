"""The report benchmark's driver: every worker from an address of its own, the gang's
reports all sent at the offered rate when the server keeps up, one step per slot."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import subprocess
import sys
import time
from typing import ClassVar

import pytest
from bench.harness import free_port
from bench.reports import _drive, source_address

from tests.unit.local_http import AskingEvery, serving

pytestmark = pytest.mark.unit


def test_each_of_rainier_s_workers_reports_from_a_loopback_address_of_its_own() -> None:
    addresses = [source_address(i) for i in range(31_000)]
    assert len(set(addresses)) == len(addresses)
    assert all(ipaddress.ip_address(a).is_loopback for a in addresses)


def test_the_driver_sends_every_report_of_the_offered_rate_to_a_server_that_keeps_up(
        ) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bench.reports", "--bare", str(port)])
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline, "the bare server did not start"
            time.sleep(0.1)
        # two workers at 4 reports/s: each every 0.5 s, the second 0.25 s after the
        # first; in 2.2 s the first has 5 slots (0 .. 2.0 s), the second 4 (.25 .. 1.75 s)
        workers = [{"token": "t0"}, {"token": "t1"}]
        result = asyncio.run(_drive(f"http://127.0.0.1:{port}/v1/reports/step", workers,
                                    rate=4.0, seconds=2.2, keepalive=True))
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert result["codes"] == {"200": 9}
    assert result["sent"] == 9 and result["offered_per_s"] == result["per_s"] == 4.1


def test_the_longest_observation_is_bounded_by_the_first_bucket_holding_them_all() -> None:
    from bench.reports import longest

    assert longest({0.1: 0.0, 0.25: 2.0, 0.5: 3.0, float("inf"): 3.0}) == 0.5
    assert longest({0.1: 0.0, float("inf"): 0.0}) == 0.0


class EveryOther(AskingEvery):
    every = 2
    sent: ClassVar[list[tuple[int, int]]] = []


def test_with_the_cadence_the_driver_reports_the_steps_the_leader_asks_for() -> None:
    """One worker at 4 steps a second for 0.5 s of settling and 2 s measured: step 1 (k is
    1 until the first answer), then only the even steps; the settling apart."""
    EveryOther.sent.clear()
    with serving(EveryOther) as url:
        result = asyncio.run(_drive(f"{url}/v1/reports/step", [{"token": "t0"}], rate=4.0,
                                    seconds=2.0, keepalive=True, cadence="burst",
                                    settle=0.5))
    assert [step for _, step in EveryOther.sent] == [1, 2, 4, 6, 8, 10]  # slots at 0, .25,
    assert result["every"] == [2]                                        # .5, ... 2.25 s
    assert result["settling"]["sent"] == 2 and result["sent"] == 4  # steps 1, 2 settling


class AtStep(EveryOther):
    """EveryOther that also records the gang's step each report was sent at (the driver's
    loss is 1 / that step): which step a rank sends at, not when a loaded machine's
    scheduler let it run."""

    at: ClassVar[dict[tuple[int, int], int]] = {}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.sent.append((body["rank"], body["step"]))
        self.at[body["rank"], body["step"]] = round(1 / body["metrics"]["loss"])
        self.answer(200, {"accepted": True, "every": self.every})


@pytest.mark.parametrize(("cadence", "phase"), [
    ("burst", 0),   # every rank at the voted step itself
    ("spread", 1),  # rank 1 a step later (its phase, as the SDK does)
])
def test_the_driver_sends_each_rank_s_report_at_the_step_the_sdk_would(
        cadence: str, phase: int) -> None:
    """Two workers at 4 reports a second (each steps every 0.5 s, rank 1 0.25 s after rank
    0), k = 2 after the first answer, 1.9 s measured after 0.5 s settling: steps 1 to 5,
    the voted steps 2 and 4 sent by both ranks, rank 1 PHASE steps after the voted one."""
    AtStep.sent.clear()
    AtStep.at.clear()
    with serving(AtStep) as url:
        asyncio.run(_drive(f"{url}/v1/reports/step", [{"token": "t0"}, {"token": "t1"}],
                           rate=4.0, seconds=1.9, keepalive=True, cadence=cadence,
                           settle=0.5))
    assert AtStep.sent == [(0, 1), (1, 1), (0, 2), (1, 2), (0, 4), (1, 4)]
    for step in (2, 4):
        assert (AtStep.at[0, step], AtStep.at[1, step]) == (step, step + phase), AtStep.at


def test_k_is_given_time_to_reach_every_worker_before_the_cadence_level_is_measured() -> None:
    """Four windows for k to climb to the rule's 16 at Rainier's rate, then 16 steps: a
    worker at k = 16 hears of it only in the answer to its next report."""
    from bench.reports import SETTLE_SECONDS, settle_seconds

    assert settle_seconds(2048, 6200.0) == pytest.approx(SETTLE_SECONDS + 16 * 2048 / 6200)
    assert settle_seconds(8192, 6200.0) == pytest.approx(SETTLE_SECONDS + 16 * 8192 / 6200)
    assert settle_seconds(100, 400.0) == pytest.approx(SETTLE_SECONDS + 100 / 400)  # k = 1
