"""The time the sampling planner reads, as one seam: the API passes the system's clock
(`time.time`); a test passes a `SteppedClock` and runs a UTC day of traffic in minutes through
the real API, Redis and workers, instead of monkeypatching `time` (as httpx swaps its transport).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]  # unix seconds now


@dataclass
class SteppedClock:
    """A clock that moves only when told: `now` unix seconds, `advance(seconds)`."""

    now: float

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
