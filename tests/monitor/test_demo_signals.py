"""`ragmon demo` stopped by SIGTERM or SIGHUP (what `timeout`, systemd, `docker stop` and CI send)
cleans up like Ctrl-C: no process left, no temp directory left."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from tests.support.cli import Ragmon
from tests.support.stack import clean_env
from tests.support.waiting import scaled

pytestmark = pytest.mark.slow


def _processes_of(pid: int) -> list[psutil.Process]:
    """The demo and everything it started (workers, their work horses and schedulers, the
    embedded redis-server), whatever session each runs in."""
    me = psutil.Process(pid)
    return [me, *me.children(recursive=True)]


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.status()} {p.name()}: {' '.join(p.cmdline())[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def _in_group(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return out


@pytest.mark.parametrize(
    ("sig", "when", "keep"),
    [
        (signal.SIGTERM, "serving", False),
        (signal.SIGHUP, "serving", False),
        (signal.SIGTERM, "judging", False),
        (signal.SIGTERM, "serving", True),
    ],
)
def test_demo_stops_on_a_signal_and_leaves_nothing_behind(sig, when, keep, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = clean_env(TMPDIR=str(tmp))  # every temp dir the demo makes lands here
    args = ["demo", "--port", "0", "--days", "2", "--per-day", "30"]
    demo = Ragmon([*args, "--keep"] if keep else args, env, cwd=tmp_path)
    try:
        if when == "serving":
            demo.wait_for(r"^Serving http://127\.0\.0\.1:\d+/metrics until Ctrl-C", stdout=True)
        else:
            demo.wait_for(r"^judging: ")
        started = _processes_of(demo.proc.pid)
        names = " ".join(_alive(started))  # a work horse may end meanwhile
        assert "redis-server" in names and names.count("ragmon.cli worker") >= 2, names
        os.kill(demo.proc.pid, sig)  # to the demo alone, as `timeout` and `docker stop` do
        code = demo.wait(60)
    finally:
        if demo.proc.poll() is None:
            demo.stop(signal.SIGKILL)
    assert code == (0 if when == "serving" else 130), demo.text()
    assert f"stopping ({signal.Signals(sig).name})" in demo.text()
    assert "Traceback" not in demo.text()
    # multiprocessing's resource tracker (the API's child processes started it) ends on its own
    # once the demo has and its pipe closes: a moment after, re-parented to PID 1
    psutil.wait_procs(started, timeout=scaled(5))
    assert _alive(started) == []
    assert _in_group(demo.proc.pid) == []  # the demo ran in a session of its own
    left = sorted(p.name for p in tmp.iterdir())
    if keep:
        assert len(left) == 1 and left[0].startswith("ragmon-demo-"), left
        assert f"kept {tmp / left[0]}" in demo.text()
    else:
        assert left == []
