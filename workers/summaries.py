"""The corrected estimates' summaries (`ragmon.oversight`), kept by the workers: a job
summarizes the apps due (people graded them: the API asks; an event finished and the app's
summary is missing, or its new events' windows `FRESH_S` old: the drain asks for those), and
each maintenance tick asks for the apps whose summaries are older than `ESTIMATE_REFRESH_S` or
missing.

A summary is charged to its app's share of Redis: an app at its share keeps its last summary
(a warning names the app and the limit) until what it holds leaves with its windows."""

from __future__ import annotations

import logging
import math
import time

from ragmon.oversight import ESTIMATE_REFRESH_S, GAUGE_DAYS, Oversight, last_days, summarize
from ragmon.store import Store
from ragmon.store.finish import day_records_ttl_s
from ragmon.store.ledger import MIB, share_bytes
from ragmon.workers.context import current_context

log = logging.getLogger("ragmon.worker")


def summarize_due(store: Store, now: float | None = None) -> list[str]:
    """Summarize every app due; returns them."""
    now = time.time() if now is None else now
    settings = store.settings
    oversight = Oversight(store, settings.measure_params())
    kept_days = day_records_ttl_s(settings) // 86400
    due = store.estimates.due()
    reading = store.ledger.read(now) if settings.app_storage_mb else None
    for app, recent in due.items():
        windows = summarize(oversight, app, now, kept_days, recent)
        share = share_bytes(settings, app)
        room = share - reading.held_by(app) if reading is not None and share > 0 else math.inf
        if not store.estimates.save(app, windows, now, room, recent):
            log.warning("app %r's corrected estimates not summarized: it holds %.1f MB, its "
                        "limit RAGMON_APP_STORAGE_MB=%g MB; its last summary stays", app,
                        (share - room) / MIB, share / MIB)  # fmt: skip
    return list(due)


def summarize_job() -> list[str]:
    """RQ entry point (`ragmon.store.rq_jobs.SUMMARIZE_FUNC`)."""
    return summarize_due(current_context().store)


def keep_estimates(store: Store, now: float | None = None) -> None:
    """Ask for the summaries of the apps with judged events in the last 7 days or people's
    grades whose summary is missing or older than `ESTIMATE_REFRESH_S`."""
    now = time.time() if now is None else now
    try:
        at = store.estimates.summarized_at()
        active = store.apps_on(last_days(GAUGE_DAYS).days) | set(store.human.apps())
        store.estimates.forget(set(at) - active)
        stale = [a for a in sorted(active) if now - at.get(a, 0.0) >= ESTIMATE_REFRESH_S]
        store.estimates.want(stale)
    except Exception as exc:  # noqa: BLE001 - a Redis hiccup must not stop the worker
        log.warning("could not look at the estimates' summaries: %s", exc)
