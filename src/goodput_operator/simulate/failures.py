"""What fails, how often, and for how long: a rate model (Llama 3's published breakdown by
default) drawn into a list of failures, or a trace of them read from a file.

Meta's Llama 3 paper (2024, table 5) lists the 419 unexpected interruptions of 54 days of
pre-training on 16,384 H100s (2,048 hosts of 8). Grouped by what they do to a job:

- accelerator (faulty GPU 148, HBM3 72, SRAM 19, GSP 17, thermal 6): 262, per
  accelerator; the node is lost until repaired;
- sdc (silent data corruption): 6, per accelerator; the node computes wrong results
  until found;
- host (maintenance 32, NIC 7, SSD 3, PSU 3, chassis 2, IO board 2, CPU 2, DRAM 2): 53,
  per node; the node is lost until repaired;
- network (switch or cable): 35, per node; the node's whole domain is lost until repaired;
- crash (software bug 54, dependency 2): 56, per accelerator; the job's processes exit;
- hang (NCCL watchdog timeout): 7, per accelerator; the job stops making progress.

Rates are per unit per day (the counts over 16,384 accelerators or 2,048 nodes and 54
days), so a fleet of any size and shape fails in proportion. Repair times are assumptions
(not in the paper), documented in docs/planning.md and overridable.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

Effect = Literal["node", "domain", "sdc", "crash", "hang"]
DAY = 86_400.0
LLAMA3_ACCELERATORS, LLAMA3_NODES, LLAMA3_DAYS = 16_384, 2_048, 54


@dataclass(frozen=True)
class Cause:
    name: str
    effect: Effect
    per: Literal["accelerator", "node"]
    rate: float  # failures per accelerator (or node) per day
    repair_hours: float = 0.0  # until the node is healthy again (node, domain, sdc)


def _llama3(count: int, per: Literal["accelerator", "node"]) -> float:
    units = LLAMA3_ACCELERATORS if per == "accelerator" else LLAMA3_NODES
    return count / units / LLAMA3_DAYS


LLAMA3 = (
    Cause("accelerator", "node", "accelerator", _llama3(262, "accelerator"), 72.0),
    Cause("sdc", "sdc", "accelerator", _llama3(6, "accelerator"), 72.0),
    Cause("host", "node", "node", _llama3(53, "node"), 24.0),
    Cause("network", "domain", "node", _llama3(35, "node"), 4.0),
    Cause("crash", "crash", "accelerator", _llama3(56, "accelerator")),
    Cause("hang", "hang", "accelerator", _llama3(7, "accelerator")),
)


@dataclass(frozen=True)
class FailureModel:
    causes: tuple[Cause, ...] = LLAMA3
    scale: float = 1.0  # every rate times this (0 switches failures off)

    def cause(self, name: str) -> Cause:
        for cause in self.causes:
            if cause.name == name:
                return cause
        raise ValueError(f"unknown failure cause {name!r}: one of "
                         f"{', '.join(c.name for c in self.causes)}")

    def with_overrides(self, overrides: Mapping[str, float]) -> FailureModel:
        """RATE.<cause>=per-day and REPAIR.<cause>=hours overrides, e.g.
        {"rate.sdc": 1e-5, "repair.accelerator": 24}."""
        causes = {c.name: c for c in self.causes}
        for key, value in overrides.items():
            what, _, name = key.partition(".")
            cause = self.cause(name)
            if what == "rate":
                causes[name] = replace(cause, rate=float(value))
            elif what == "repair":
                causes[name] = replace(cause, repair_hours=float(value))
            else:
                raise ValueError(f"bad failure override {key!r}: write rate.CAUSE or "
                                 "repair.CAUSE")
        return replace(self, causes=tuple(causes.values()))

    def per_day(self, accelerators: int, nodes: int) -> float:
        """Failures a day on a fleet (or job) of this size."""
        return self.scale * sum(c.rate * (accelerators if c.per == "accelerator" else nodes)
                                for c in self.causes)

    @property
    def longest_repair(self) -> float:
        """Seconds: a node failed this long before a run may still be out at its start."""
        return max((c.repair_hours * 3600.0 for c in self.causes
                    if c.effect in ("node", "domain")), default=0.0)

    def mtbf(self, accelerators: int, nodes: int) -> float:
        """Mean seconds between failures that interrupt a job of this size (all causes)."""
        rate = self.per_day(accelerators, nodes)
        return math.inf if rate <= 0 else DAY / rate


@dataclass(frozen=True, order=True)
class Failure:
    time: float  # seconds from the start
    node: str
    cause: str


def draw(model: FailureModel, nodes: Sequence[str], accelerators_per_node: int,
         horizon: float, seed: int, start: float = 0.0) -> list[Failure]:
    """Failures from START (negative: before the run, to find the fleet with the nodes
    still under repair then) to HORIZON seconds: each cause a Poisson process over the
    whole fleet, striking a node drawn uniformly (the fleet's nodes are alike)."""
    rng = random.Random(seed)
    failures: list[Failure] = []
    for cause in model.causes:
        units = len(nodes) * (accelerators_per_node if cause.per == "accelerator" else 1)
        rate = model.scale * cause.rate * units / DAY  # per second, whole fleet
        if rate <= 0:
            continue
        at = start + rng.expovariate(rate)
        while at < horizon:
            failures.append(Failure(at, nodes[rng.randrange(len(nodes))], cause.name))
            at += rng.expovariate(rate)
    return sorted(failures)


def read_trace(path: Path, known: Iterable[str], model: FailureModel) -> list[Failure]:
    """A trace of failures, one JSON object a line: {"time": s, "node": NAME, "kind":
    CAUSE}. Every line is checked: an unknown node or cause names its line."""
    nodes = set(known)
    failures = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            failure = Failure(float(item["time"]), str(item["node"]), str(item["kind"]))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{number}: want {{\"time\": s, \"node\": name, "
                             f"\"kind\": cause}}: {err}") from None
        if failure.node not in nodes:
            raise ValueError(f"{path}:{number}: node {failure.node!r} is not in the fleet")
        try:
            model.cause(failure.cause)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        failures.append(failure)
    return sorted(failures)
