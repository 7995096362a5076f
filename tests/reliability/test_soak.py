"""A 16-second soak: the long one is `python -m tests.reliability.soak --minutes 5`."""

from __future__ import annotations

import pytest

from tests.reliability.soak import soak

pytestmark = pytest.mark.slow


def test_short_soak_counts_everything_and_memory_stays_bounded():
    result = soak(seconds=16, rate=8, interval=2, warmup=6, judge="fake", log=False)
    print(result.report())
    names = {s.name for s in result.series}
    assert {"ragmon serve", "ragmon worker 0", "ragmon worker 1", "redis-server"} <= names
    assert result.sent >= 100
    assert result.sent == result.accepted == result.done == result.counted, result.report()
    # 20 s cannot prove a slow leak (the 5-minute run does); it does catch a fast one
    for s in result.series:
        if s.name != "redis-server":
            assert s.growth(result.warmup) < 25, result.report()
