"""The weekly drift report and the anchor set's daily re-judging (docs/agreement.md) on RQ 3.0's
built-in cron, run by `ragmon worker --with-scheduler`.

RQ's `CronScheduler.start()` owns the main thread (signal handlers, blocking loop) while the
worker needs it too, so `register_schedule` runs the same enqueue/heartbeat loop in a
daemon thread of the worker's main process (work horses are forked from the main thread and do
not inherit it). The job runs on ragmon's queue like any other, so any worker may execute it.

Run the scheduler on one worker only (the compose file and the Kubernetes manifests do): two
scheduler threads would each enqueue the job, and the second run only skips when the first
one's dated report is already there. Without a scheduling worker, the deploy manifests'
CronJob runs `ragmon report --out $RAGMON_REPORT_DIR` instead (docs/report.md).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rq import Worker
from rq.cron import CronScheduler

from ragmon.settings import Settings

log = logging.getLogger("ragmon.schedule")

REPORT_CRON = "0 6 * * 1"  # Mondays 06:00 in the worker's local time zone (UTC in the images)
JOB_NAME = "ragmon-weekly-report"
ANCHOR_CRON = "0 5 * * *"  # every day 05:00: the anchor set's re-judging, before the report


def anchor_cron(every_hours: int) -> str:
    """The anchor set's re-judging every `every_hours` (RAGMON_ANCHOR_EVERY_HOURS): daily at
    05:00, else at the top of every `every_hours`-th hour from midnight."""
    return ANCHOR_CRON if every_hours >= 24 else f"0 */{every_hours} * * *"


ANCHOR_JOB_NAME = "ragmon-anchor-rejudge"
ANCHOR_TIMEOUT_S = 3600
JOB_TIMEOUT_S = 1800


def weekly_report_job(out_dir: str | None = None, end: str | None = None) -> str:
    """RQ job: the report of the 7 days ending yesterday (UTC) into `settings.report_dir`."""
    from ragmon.core.window import windows
    from ragmon.report.publish import post_summary, write_report
    from ragmon.workers.context import current_context

    ctx = current_context()
    settings = ctx.settings
    last = end or (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
    current, baseline = windows(end=last, days=7)
    out = Path(out_dir or settings.report_dir)
    dated = out / f"report-{current.label.replace('..', '_')}.html"
    if dated.exists():
        log.info("weekly report %s already written: %s", current.label, dated)
        return str(dated)
    written = write_report(
        ctx.store, current, baseline, out, settings.report_keep, progress=log.info
    )
    if settings.report_webhook:
        post_summary(settings.report_webhook, written.report, str(written.dated_html.resolve()))
    return str(written.dated_html)


@dataclass
class ReportSchedule:
    """The running cron loop: `stop()` ends it (the worker's exit ends it too: daemon thread)."""

    scheduler: CronScheduler
    thread: threading.Thread
    stopping: threading.Event

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.thread.join(timeout)


def _loop(scheduler: CronScheduler, stopping: threading.Event) -> None:
    """What `CronScheduler.start()` does, minus the signal handlers (not the main thread)."""
    scheduler.register_birth()
    try:
        while not stopping.is_set():
            try:
                if scheduler.enqueue_jobs():
                    scheduler.save()
                scheduler.heartbeat()
            except Exception as exc:  # noqa: BLE001 - a Redis hiccup must not end the schedule
                log.warning("report schedule: enqueue failed (%s); retrying in a minute", exc)
                log.debug("report schedule: enqueue failed", exc_info=True)
            stopping.wait(max(1.0, scheduler.calculate_sleep_interval()))
    finally:
        scheduler.register_death()


def register_schedule(
    worker: Worker, settings: Settings, cron: str = REPORT_CRON, out_dir: str | None = None
) -> ReportSchedule:
    """Enqueue the weekly report on `cron`, and the anchor set's re-judging every
    RAGMON_ANCHOR_EVERY_HOURS (`anchor_cron`), from a thread of this worker process."""
    from ragmon.workers.rejudge import anchor_job

    scheduler = CronScheduler(connection=worker.connection, name=f"ragmon-report:{worker.name}")
    scheduler.register(
        anchor_job,
        queue_name=settings.queue_name,
        cron=anchor_cron(settings.anchor_every_hours),
        job_timeout=ANCHOR_TIMEOUT_S,
        result_ttl=7 * 86400,
        failure_ttl=30 * 86400,
        name=ANCHOR_JOB_NAME,
    )
    scheduler.register(
        weekly_report_job,
        queue_name=settings.queue_name,
        kwargs={"out_dir": out_dir or settings.report_dir},
        cron=cron,
        job_timeout=JOB_TIMEOUT_S,
        result_ttl=7 * 86400,
        failure_ttl=30 * 86400,
        name=JOB_NAME,
    )
    stopping = threading.Event()
    thread = threading.Thread(
        target=_loop, args=(scheduler, stopping), name="ragmon-report-cron", daemon=True
    )
    thread.start()
    schedule = ReportSchedule(scheduler, thread, stopping)
    pid = os.getpid()
    atexit.register(lambda: schedule.stop() if os.getpid() == pid else None)  # register death
    log.info("weekly drift report scheduled (%s) into %s", cron, out_dir or settings.report_dir)
    return schedule
