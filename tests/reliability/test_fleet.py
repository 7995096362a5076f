"""The fleet under faults, short (tests/reliability/fleet.py): Redis primary + replica + three
Sentinels, two APIs, three workers, the fake OpenAI judge, steady single-event traffic; the
replica falls behind, then SIGKILL the primary, then a judging worker, then an API. With
RAGMON_WAIT_REPLICAS=1 every acknowledged event is judged and counted exactly once; without
it the events lost are exactly those acknowledged while the replica was behind (the replication
lag the docs name), and every other one is judged and counted once."""

from __future__ import annotations

import pytest

from tests.reliability import fleet

pytestmark = pytest.mark.slow


def test_with_wait_every_acknowledged_event_is_judged_and_counted_once() -> None:
    o = fleet.run(step=30, wait_replicas=1, pause=0.05, lag=True)
    t = o.tally.record()
    assert not o.lost, o.lost
    assert t.sent == t.accepted == t.done == t.counted, t.line()
    assert o.observed == (t.done, t.done), o.observed
    assert o.retries > 0, "no request met the failover: it tested nothing"


def test_without_wait_the_loss_is_the_replication_lag() -> None:
    o = fleet.run(step=30, wait_replicas=0, pause=0.06, lag=True)
    t = o.tally.record()
    # lost: what was acknowledged after the replica's link was cut (but for the one request
    # in flight at the cut), and nothing acknowledged before
    assert 1 <= o.acked_in_lag - 1 <= len(o.lost) <= o.acked_in_lag, t.line()
    assert all(s <= o.lag_s for s in o.lost_before_kill_s), (o.lost_before_kill_s, o.lag_s)
    kept = t.accepted - len(o.lost)
    assert t.sent == t.accepted and kept == t.done == t.counted, t.line()
    assert o.observed == (t.done, t.done), o.observed
