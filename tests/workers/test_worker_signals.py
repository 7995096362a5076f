"""The stop signals across a work horse's fork (`RagmonWorker.fork_work_horse`): blocked while
the child runs the after-fork hooks (where a Ctrl-C to the process group made threading's
hook log "Exception ignored" with a traceback), delivered once the horse has its own handlers,
and the worker's own mask unchanged after the fork."""

from __future__ import annotations

import json
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
