"""How many of the endpoints' bulk writes may be in flight: a limit that follows the API
server's latency (additive increase, multiplicative decrease, as TCP's congestion window).

A rollout of thousands of replica pods keeps the API server busy; a node failure's
quarantine and its job's new placement are written to the same server and wait in the
same queues. A fixed number of bulk writes in flight is too many when the server is slow
(every urgent write waits behind them) and too few when it is fast. So the limit halves
when a bulk write takes SLOW_FACTOR times as long as the quickest bulk write seen (the API
server is queueing; never less than SLOW_FLOOR: a fast server's jitter is not a queue),
once per round (the writes already in flight when it halved do not halve it again), and
grows by one per round of quick writes, between FLOOR and the ceiling. The quickest write
is the server's own pace, as TCP's smallest round trip: a threshold of so many seconds
would mean always slow on one cluster and never on another. Pure: State.bulk applies it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SLOW_FACTOR = 4.0  # a write this many times the quickest one: the API server is queueing
SLOW_FLOOR = 0.05  # seconds: never slower than this counts as slow
FLOOR = 2  # a rollout always makes progress


@dataclass
class WriteLimit:
    ceiling: int
    floor: int = FLOOR
    limit: float = 0.0  # starts at the ceiling
    in_flight: int = 0
    halved_at: float = float("-inf")  # when it last halved (monotonic seconds)
    quickest: float = math.inf  # seconds: the quickest bulk write seen

    def __post_init__(self) -> None:
        self.floor = min(self.floor, self.ceiling)
        self.limit = float(self.limit or self.ceiling)

    @property
    def slow(self) -> float:
        """A write that took longer than this says the API server is queueing."""
        return max(SLOW_FLOOR, SLOW_FACTOR * self.quickest)

    def admits(self) -> bool:
        return self.in_flight < int(self.limit)

    def observe(self, started: float, ended: float) -> None:
        """A bulk write that STARTED and ENDED then (monotonic seconds), done or failed."""
        took = ended - started
        self.quickest = min(self.quickest, took)
        if took > self.slow:
            if started >= self.halved_at:  # began after the last halving: news
                self.limit = max(float(self.floor), self.limit / 2)
                self.halved_at = ended
        else:
            self.limit = min(float(self.ceiling), self.limit + 1 / self.limit)
