"""The fleet under faults (issue 49): a Redis primary, a replica and three Sentinels; two APIs and
three workers on them; the fake OpenAI judge; single events posted at a steady rate, alternating
between the two APIs and retried on `503` as the SDK does. Under that traffic the primary dies by
SIGKILL (the Sentinels fail over, and the old primary comes back as a replica, as a restarted node
would), then the worker in a drain job, then one API. With `lag`, the replica first falls behind:
it is stopped and its link cut, so that what the primary acknowledges from then on never reaches
it (the replication lag a failover loses without RAGMON_WAIT_REPLICAS), and it resumes as the
primary dies.

`tests/reliability/test_fleet.py` runs it short; `python -m tests.bench.bench_fleet` runs it long
and prints the figures.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

import redis
from rq import Worker

from tests.bench.common import pct
from tests.reliability.conftest import llm_env
from tests.reliability.support import (
    Sender,
    Tally,
    events,
    labeled,
    observed,
    statuses,
    wait_status,
    worker_name,
)
from tests.support.fake_llm import FakeLLM
from tests.support.sentinel import SentinelFleet
from tests.support.stack import Stack
from tests.support.waiting import scaled, wait_until

# What the docs promise without RAGMON_WAIT_REPLICAS: an event acknowledged this long before the
# primary died is on the replica (the replication lag on a healthy link is far shorter).
WINDOW_S = 1.0


@dataclass
class Outcome:
    """What one run saw: the tally (sent, accepted, done, counted) and the failover's figures."""

    tally: Tally
    lost: list[str] = field(default_factory=list)  # acknowledged, absent after the failover
    lost_before_kill_s: list[float] = field(default_factory=list)  # each lost one's ack to kill
    acked_last_window: int = 0  # events acknowledged in the WINDOW_S before the kill
    lag_s: float = 0.0  # the replica's link cut to the kill (0: no lag made)
    acked_in_lag: int = 0  # events acknowledged meanwhile
    failover_s: float = 0.0  # the kill to the Sentinels naming the replica
    unavailable_s: float = 0.0  # the longest time without a 202 around the kill
    replica_back_s: float = 0.0  # the kill to the old primary replicating the new one
    leased_at_worker_kill: int = 0
    retries: int = 0
    rate: float = 0.0  # events acknowledged per second, start to end of the traffic
    latency_ms: tuple[float, float] = (0.0, 0.0)  # p50, p99 of a 202 before the kill
    observed: tuple[int, int] = (0, 0)  # support.observed() on the new primary


def _more(sender: Sender, step: int) -> None:
    """Until `step` more events are acknowledged."""
    want = len(sender.accepted) + step
    wait_until(lambda: len(sender.accepted) >= want or not sender.is_alive(), 60,
               f"{want} events acknowledged", every=0.02)  # fmt: skip
    assert sender.is_alive(), "the traffic ended before the fault"


def _replicating(fleet: SentinelFleet) -> bool:
    """The restarted old primary is a replica with its link up."""
    try:
        info = redis.Redis(port=fleet.primary.port).info("replication")
    except redis.ConnectionError:
        return False
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


def _fall_behind(fleet: SentinelFleet, sender: Sender) -> float:
    """Stop the replica and cut its link (what the primary had sent is in its socket; nothing
    after), then return once events were acknowledged or refused meanwhile; the time of the cut.
    The replica stays stopped for less than the Sentinels' DOWN_AFTER_MS, so it is promoted."""
    replica = fleet.replica.proc
    assert replica is not None
    replica.send_signal(signal.SIGSTOP)
    primary = redis.Redis(port=fleet.primary.port)
    try:
        primary.client_kill_filter(_type="replica")
        cut, acked, refused = time.monotonic(), len(sender.accepted), sender.retries
        wait_until(lambda: len(sender.accepted) >= acked + 3 or sender.retries > refused, 0.5,
                   "an answer while the replica is behind", every=0.01)  # fmt: skip
        return cut
    finally:
        primary.close()


def _kill_a_judging_worker(stacks: list[Stack], conn: redis.Redis) -> int:
    """SIGKILL the worker (and its work horse) that runs a drain job holding leases, or, if none
    does within a few seconds, the first; the leases it held."""
    workers = {worker_name(w.pid): w for s in stacks for w in s.workers if w.poll() is None}
    deadline = time.monotonic() + scaled(10)
    victim = None
    while victim is None and time.monotonic() < deadline:
        try:
            for w in Worker.all(connection=conn):
                if w.name in workers and w.get_current_job_id() and conn.zcard("ragmon:leased"):
                    victim = workers[w.name]
        except redis.RedisError:  # a connection still on its way to the new primary
            pass
        time.sleep(0.05)
    held = int(conn.zcard("ragmon:leased"))
    (victim or next(iter(workers.values()))).kill_tree()
    return held


def run(step: int, wait_replicas: int, pause: float, lag: bool, seed0: int = 20_000) -> Outcome:
    """The whole scenario with RAGMON_WAIT_REPLICAS=`wait_replicas` (waiting at most 200 ms):
    one event every `pause` seconds (plus the request's own time); each fault once `step` more
    events were acknowledged since the last, and the traffic ends `step` events after the last
    fault; with `lag`, the replica behind when the primary dies."""
    fleet = SentinelFleet(sentinels=3, quorum=2)
    fake = FakeLLM(latency=0.05).start()
    env = llm_env(fake, RAGMON_WAIT_REPLICAS=str(wait_replicas), RAGMON_WAIT_TIMEOUT_MS="200")
    stacks: list[Stack] = []
    conn = None
    try:
        stacks += [Stack(fleet.url, workers=2, env=env).start()]
        stacks += [Stack(fleet.url, workers=1, env=env).start()]
        conn = redis.Redis(port=fleet.primary.port)  # replaced by the new primary's client below
        evs = events(100 * step, seed0, passages=2, k=1)  # more than the run needs
        sender = Sender([s.url for s in stacks], evs, batch=1, pause=pause)
        behind = ", the replica behind" if lag else ""
        outcome = Outcome(Tally(f"fleet, RAGMON_WAIT_REPLICAS={wait_replicas}{behind}"))
        started = time.monotonic()
        sender.start()

        _more(sender, step)
        cut = _fall_behind(fleet, sender) if lag else None
        fleet.primary.stop(kill=True)
        killed = time.monotonic()
        if lag:
            fleet.replica.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        acked_before = dict(sender.acked_at)
        fleet.wait_promoted()
        outcome.failover_s = time.monotonic() - killed
        fleet.wait_settled()
        fleet.primary.start()  # empty (no persistence): the Sentinels make it a replica
        try:
            wait_until(lambda: _replicating(fleet), 60, "the old primary to replicate")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{fleet.logs()}") from None
        outcome.replica_back_s = time.monotonic() - killed
        conn.close()
        conn = redis.Redis(port=fleet.replica.port)

        _more(sender, step)
        outcome.leased_at_worker_kill = _kill_a_judging_worker(stacks, conn)
        _more(sender, step)
        assert stacks[1].api is not None
        stacks[1].api.kill_tree()
        _more(sender, step)
        sender.halt.set()

        sender.join(scaled(120))
        assert not sender.is_alive() and not sender.errors, sender.errors
        around = sorted(t for t in sender.acked_at.values() if t > killed - WINDOW_S)
        outcome.unavailable_s = max(b - a for a, b in zip(around, around[1:], strict=False))
        outcome.rate = len(sender.accepted) / (max(sender.acked_at.values()) - started)
        outcome.retries = sender.retries
        outcome.tally.sent = len(sender.sent)
        steady = sorted(sender.took[i] * 1000 for i in acked_before)
        outcome.latency_ms = (pct(steady, 50), pct(steady, 99))
        outcome.acked_last_window = sum(t > killed - WINDOW_S for t in acked_before.values())
        if cut is not None:
            outcome.lag_s = killed - cut
            outcome.acked_in_lag = sum(t >= cut for t in acked_before.values())

        ids = sorted(sender.accepted)
        present = statuses(stacks[0], ids)
        outcome.lost = [i for i in ids if present[i] == "unknown"]
        outcome.lost_before_kill_s = [killed - sender.acked_at[i] for i in outcome.lost]
        kept = [i for i in ids if i not in set(outcome.lost)]
        st = wait_status(stacks[0], kept, timeout=150)
        t = outcome.tally
        t.accepted = len(sender.accepted)
        t.done = sum(s == "done" for s in st.values())
        t.failed = sum(s == "failed" for s in st.values())
        t.counted = labeled(stacks[0])
        outcome.observed = observed(fleet.url)
        t.notes += [
            f"lost {len(outcome.lost)} acknowledged (of {outcome.acked_last_window} "
            f"acknowledged in the {WINDOW_S:g} s before the kill, {outcome.acked_in_lag} in the "
            f"{outcome.lag_s * 1000:.0f} ms the replica was behind)",
            f"failover {outcome.failover_s:.1f} s, no 202 for {outcome.unavailable_s:.1f} s",
            f"old primary replicating after {outcome.replica_back_s:.1f} s",
            f"killed worker held {outcome.leased_at_worker_kill} leases",
            f"{outcome.retries} retries, {outcome.rate:.0f} events/s acknowledged",
            "202 before the kill: p50 {:.1f} ms, p99 {:.1f} ms".format(*outcome.latency_ms),
        ]
        return outcome
    finally:
        if conn is not None:
            conn.close()
        for s in stacks:
            s.stop()
        fake.stop()
        fleet.stop()
