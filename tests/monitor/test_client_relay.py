"""The relay process (`ragmon.client.relay`): what only it can get wrong. Everything else the
SDK promises is tested through it and in-process alike (tests/monitor/test_client.py)."""

from __future__ import annotations

import http.client
import logging
import os
import signal
import subprocess
import sys

import psutil
import pytest

from ragmon.client import RetrievalMonitor, relay
from tests.monitor.test_client import (
    PASSAGES,
    Sidecar,
    assert_conserved,
    records,
    wait_for,
)
from tests.support.stack import REPO

pytestmark = pytest.mark.process  # the relay process


@pytest.fixture
def sidecar():
    server = Sidecar()
    yield server
    server.stop()


def relay_process(monitor: RetrievalMonitor) -> psutil.Process:
    assert wait_for(lambda: monitor._relay is not None)
    assert monitor._relay is not None
    return psutil.Process(monitor._relay.pid)


def test_the_relay_follows_the_sdks_priority_switch(sidecar: Sidecar) -> None:
    """With `state.IDLE_THREADS` off (every test but those marked lowest_priority), the relay
    runs at normal priority too: beside CPU-bound processes a relay at SCHED_IDLE got no CPU
    to start, and a test of what it sends failed its wait."""
    monitor = RetrievalMonitor(sidecar.url, flush_interval=0.05, relay=True)
    records(monitor, 5)
    child = relay_process(monitor)
    assert wait_for(lambda: len(sidecar.events()) == 5)  # started, past its priority calls
    mine = (psutil.Process().nice(), os.sched_getscheduler(0))  # the app's own
    assert (child.nice(), os.sched_getscheduler(child.pid)) == mine
    threads = {t.id: os.sched_getscheduler(t.id) for t in child.threads()}
    assert len(threads) > 1 and set(threads.values()) == {mine[1]}  # its sender's too
    monitor.close()


@pytest.mark.lowest_priority
def test_the_relay_sends_from_its_own_process_at_the_lowest_priority(
    sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects: list[object] = []
    real = http.client.HTTPConnection.connect
    conn = http.client.HTTPConnection
    monkeypatch.setattr(conn, "connect", lambda c: connects.append(c) or real(c))
    monitor = RetrievalMonitor(sidecar.url, flush_interval=0.05, relay=True)
    records(monitor, 50)
    child = relay_process(monitor)
    assert child.ppid() == os.getpid() and wait_for(lambda: child.nice() == relay.NICE)
    assert wait_for(lambda: os.sched_getscheduler(child.pid) == os.SCHED_IDLE)
    assert wait_for(lambda: len(sidecar.events()) == 50)
    assert connects == []  # the app's process never connected to the sidecar
    monitor.close()
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    stats = monitor.stats()
    assert stats["sent"] == 50 and stats["recorded"] == 50
    assert_conserved(stats)


def test_a_killed_relay_is_counted_and_replaced(
    sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "RESPAWN_AFTER_S", 0.2)
    monitor = RetrievalMonitor(sidecar.url, flush_interval=60, relay=True)  # it holds what it gets
    records(monitor, 30)
    first = relay_process(monitor)
    assert wait_for(lambda: monitor.stats()["buffered"] == 30 and monitor._child.get("recorded"))
    first.send_signal(signal.SIGKILL)
    first.wait(5)
    # the next write finds it dead; what it held is counted, then a new relay takes over
    assert wait_for(lambda: records(monitor, 1) or monitor.stats()["dropped_relay_died"] >= 30)
    # a new relay starts with a write past RESPAWN_AFTER_S (on a busy machine the writes above
    # may all have come before it)
    assert wait_for(
        lambda: (
            records(monitor, 1) or (monitor._relay is not None and monitor._relay.pid != first.pid)
        )
    )
    monitor.record("after", PASSAGES, 2, event_id="after-the-kill")
    monitor.close()
    stats = monitor.stats()
    assert "after-the-kill" in {e["event_id"] for e in sidecar.events()}
    assert stats["dropped_relay_died"] >= 30 and stats["sent"] >= 1
    assert_conserved(stats)


def test_without_a_python_to_start_it_the_monitor_works_in_process(
    sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    monitor = RetrievalMonitor(sidecar.url, flush_interval=0.05, relay=True)
    with caplog.at_level(logging.WARNING, logger="ragmon.client"):
        records(monitor, 20)
        assert monitor.flush(10)
    assert monitor._relay is None and len(sidecar.events()) == 20
    assert any("relay could not start" in r.getMessage() for r in caplog.records)
    monitor.close()
    assert_conserved(monitor.stats())


def test_frames_survive_any_split_of_the_stream() -> None:
    data = b"".join(relay.frame(k, b) for k, b in [(b"e", b"[1]"), (b"s", b"{}"), (b"e", b"")])
    for cut in range(len(data) + 1):
        frames = relay.Frames()
        got = [*frames.feed(data[:cut]), *frames.feed(data[cut:])]
        assert got == [(b"e", b"[1]"), (b"s", b"{}"), (b"e", b"")]


def test_what_the_relay_holds_survives_the_app_being_killed(sidecar: Sidecar) -> None:
    """SIGKILL gives the app no atexit: the relay sees EOF and sends what it had."""
    app = f"""
import os, signal, time
from ragmon.client import RetrievalMonitor
monitor = RetrievalMonitor({sidecar.url!r}, flush_interval=60, relay=True)
for i in range(50):
    monitor.record(f"query {{i}}", [("a", "first passage", 1.0)], 1, event_id=f"kill-{{i}}")
while monitor.stats()["buffered"] != 50 or monitor._child.get("recorded") != 50:
    time.sleep(0.01)  # all 50 are in the relay, none sent (flush_interval = 60 s)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", app], timeout=60, cwd=REPO)
    assert proc.returncode == -signal.SIGKILL
    assert wait_for(lambda: len(sidecar.events()) == 50)
    assert {e["event_id"] for e in sidecar.events()} == {f"kill-{i}" for i in range(50)}
