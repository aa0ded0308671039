"""How many of the endpoints' bulk writes may be in flight: a limit that follows the API
server's latency (additive increase, multiplicative decrease, as TCP's congestion window).

A rollout of thousands of replica pods keeps the API server busy; a node failure's
quarantine and its job's new placement are written to the same server and wait in the
same queues. A fixed number of bulk writes in flight is too many when the server is slow
(every urgent write waits behind them) and too few when it is fast. So the limit halves
when a bulk write takes longer than SLOW_WRITE_SECONDS (once per round: the writes already
in flight when it halved do not halve it again) and grows by one per round of writes that
were quick, between FLOOR and the ceiling. Pure: State.bulk applies it.
"""

from __future__ import annotations

from dataclasses import dataclass

SLOW_WRITE_SECONDS = 0.1  # a pod write slower than this: the API server is queueing
FLOOR = 2  # a rollout always makes progress


@dataclass
class WriteLimit:
    ceiling: int
    slow: float = SLOW_WRITE_SECONDS
    floor: int = FLOOR
    limit: float = 0.0  # starts at the ceiling
    in_flight: int = 0
    halved_at: float = float("-inf")  # when it last halved (monotonic seconds)

    def __post_init__(self) -> None:
        self.floor = min(self.floor, self.ceiling)
        self.limit = float(self.limit or self.ceiling)

    def admits(self) -> bool:
        return self.in_flight < int(self.limit)

    def observe(self, started: float, ended: float) -> None:
        """A bulk write that STARTED and ENDED then (monotonic seconds), done or failed."""
        if ended - started > self.slow:
            if started >= self.halved_at:  # began after the last halving: news
                self.limit = max(float(self.floor), self.limit / 2)
                self.halved_at = ended
        else:
            self.limit = min(float(self.ceiling), self.limit + 1 / self.limit)
