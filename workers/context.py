"""What a job needs from its worker process: settings, the store and a judge factory.

`make_worker` sets it before the worker forks its work horses, which inherit it. A job run by a
plain `rq worker` (no ragmon context) builds one from the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.workers.judges import make_judge
from ragmon.workers.judges.base import Judge


@dataclass
class WorkerContext:
    settings: Settings
    store: Store
    make_judge: Callable[[], Judge]


_context: WorkerContext | None = None


def build_context(settings: Settings, store: Store | None = None) -> WorkerContext:
    store = store or Store.connect(settings)
    return WorkerContext(settings, store, lambda: make_judge(settings, store))


def set_context(ctx: WorkerContext | None) -> None:
    global _context
    _context = ctx


def current_context() -> WorkerContext:
    global _context
    if _context is None:
        _context = build_context(Settings.from_env())
    return _context
