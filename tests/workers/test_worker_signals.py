"""The stop signals across a work horse's fork (`RagmonWorker.fork_work_horse`): blocked while
the child runs the after-fork hooks (where a Ctrl-C to the process group made threading's
hook log "Exception ignored" with a traceback), delivered once the horse has its own handlers,
and the worker's own mask unchanged after the fork. And a stop signal during the maintenance
tick (`RagmonWorker._shutdown`), which RQ raised inside logging's emit."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import pytest

from ragmon.settings import Settings
from ragmon.workers.worker import STOP_SIGNALS, make_worker

pytestmark = pytest.mark.process  # forks a work horse

_hook_out: Path | None = None  # where the after-fork hook writes (only during the test)


def _blocked() -> list[int]:
    return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ()) & STOP_SIGNALS)


def _after_fork_in_child() -> None:
    if _hook_out is not None:
        _hook_out.write_text(json.dumps(_blocked()))


def record_mask(path: str) -> None:
    """The job: the stop signals the horse blocks while it runs."""
    Path(path).write_text(json.dumps(_blocked()))


def test_stop_signals_wait_across_the_fork_until_the_horse_has_its_handlers(
    settings: Settings, tmp_path: Path
) -> None:
    global _hook_out
    worker = make_worker(settings)
    job_out, hook_out = tmp_path / "job.json", tmp_path / "hook.json"
    worker.queues[0].enqueue(record_mask, str(job_out))
    _hook_out = hook_out
    os.register_at_fork(after_in_child=_after_fork_in_child)
    try:
        worker.work(burst=True, with_scheduler=False)
    finally:
        _hook_out = None
    stop = sorted(int(s) for s in STOP_SIGNALS)
    assert json.loads(hook_out.read_text()) == stop  # blocked in the after-fork hooks
    assert json.loads(job_out.read_text()) == []  # delivered to the horse's own handlers
    assert _blocked() == []  # the worker's mask as before


class _StopInsideEmit(logging.Handler):
    """Sends SIGTERM to this process from inside the emit of RQ's "cleaning registries" line,
    catching what the emit raises as logging's own handlers do (and printing it likewise)."""

    sent = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if not self.sent and "cleaning registries" in record.getMessage():
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next line
                self.format(record)
        except Exception:
            self.handleError(record)


def test_a_stop_signal_during_the_maintenance_tick_stops_the_worker_cleanly(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = make_worker(settings)
    handler = _StopInsideEmit()
    rq_log = logging.getLogger("rq.worker")
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    rq_log.addHandler(handler)
    try:  # the old code ate the stop and left after 2 idle seconds instead
        worker.work(burst=False, with_scheduler=False, max_idle_time=2)
    finally:
        rq_log.removeHandler(handler)
        for s, h in previous.items():
            signal.signal(s, h)
    assert handler.sent
    assert worker._stop_requested  # noted during the tick, acted on as it ended
    err = capsys.readouterr().err
    assert "Logging error" not in err and "StopRequested" not in err, err
