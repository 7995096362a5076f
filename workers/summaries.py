"""The corrected estimates' summaries (`ragmon.oversight`), kept by the workers: a job
summarizes the apps due (people graded them: the API asks), and each maintenance tick asks for
the apps whose summaries are older than `ESTIMATE_REFRESH_S` or missing."""

from __future__ import annotations

import logging
import time

from ragmon.oversight import ESTIMATE_REFRESH_S, GAUGE_DAYS, Oversight, last_days, summarize
from ragmon.store import Store
from ragmon.store.finish import day_records_ttl_s
from ragmon.workers.context import current_context

log = logging.getLogger("ragmon.worker")


def summarize_due(store: Store, now: float | None = None) -> list[str]:
    """Summarize every app due; returns them."""
    now = time.time() if now is None else now
    settings = store.settings
    oversight = Oversight(store, settings.measure_params())
    ttl_s = day_records_ttl_s(settings)
    apps = store.estimates.due()
    for app in apps:
        store.estimates.save(app, summarize(oversight, app, now, ttl_s // 86400), now, ttl_s)
    return apps


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
