"""The fleet under faults, short (tests/reliability/fleet.py): Redis primary + replica + three
Sentinels, two APIs, three workers, the fake OpenAI judge, steady single-event traffic; SIGKILL
the primary, then a judging worker, then an API. With RAGMON_WAIT_REPLICAS=1 every acknowledged
event is judged and counted exactly once; without it the events lost are only those acknowledged
within the documented window before the primary died."""

from __future__ import annotations

import pytest

from tests.reliability import fleet
from tests.support.waiting import scaled

pytestmark = pytest.mark.slow


def test_with_wait_every_acknowledged_event_is_judged_and_counted_once() -> None:
    o = fleet.run(step=40, wait_replicas=1, pause=0.04)
    t = o.tally.record()
    assert not o.lost, o.lost
    assert t.sent == t.accepted == t.done == t.counted, t.line()
    assert o.observed == (t.done, t.done), o.observed
    assert o.retries > 0, "no request met the failover: it tested nothing"


def test_without_wait_the_loss_is_within_the_replication_window() -> None:
    o = fleet.run(step=40, wait_replicas=0, pause=0.04)
    t = o.tally.record()
    assert all(s <= scaled(fleet.WINDOW_S) for s in o.lost_before_kill_s), o.lost_before_kill_s
    assert len(o.lost) <= o.acked_last_window
    kept = t.accepted - len(o.lost)
    assert t.sent == t.accepted and kept == t.done == t.counted, t.line()
    assert o.observed == (t.done, t.done), o.observed
    assert o.retries > 0, "no request met the failover: it tested nothing"
