"""The one module that speaks to RQ: drain jobs (and the estimates' summarizing jobs) enqueued
through its public API.

Events never become RQ jobs. A drain job (`ragmon.workers.jobs.drain`, no arguments) takes
events from the pending sets while it runs (`ragmon.store.delivery`); RQ runs it in a work
horse, times it out and reports a crashed one. No Lua script writes an RQ key.
"""

from __future__ import annotations

import redis
from rq import Queue, Worker
from rq.worker import BaseWorker

# The worker function RQ imports by name (the store never imports worker code).
DRAIN_FUNC = "ragmon.workers.jobs.drain"
SUMMARIZE_FUNC = "ragmon.workers.summaries.summarize_job"
SUMMARIZE_TIMEOUT_S = 600
# A drain job claims for a minute, then finishes what it holds (the judge's own retries
# included); past this RQ kills its work horse, and the leases bring the events back.
DRAIN_TIMEOUT_S = 600


class DrainJobs:
    """ragmon's RQ queue: drain jobs in, how many wait, who works."""

    def __init__(self, client: redis.Redis, queue_name: str) -> None:
        self.queue = Queue(queue_name, connection=client)
        self.client = client

    def enqueue(self) -> None:
        """One more drain job on the queue."""
        self._enqueue(DRAIN_FUNC, DRAIN_TIMEOUT_S, "ragmon: judge pending events")

    def enqueue_summaries(self) -> None:
        """One job that summarizes the corrected estimates of the apps due
        (`ragmon.store.estimate_summaries`)."""
        self._enqueue(SUMMARIZE_FUNC, SUMMARIZE_TIMEOUT_S, "ragmon: summarize corrected estimates")

    def _enqueue(self, func: str, timeout_s: int, description: str) -> None:
        """A job by its function's name; its result kept a minute, a failure a week."""
        self.queue.enqueue_call(
            func, timeout=timeout_s, result_ttl=60, failure_ttl=7 * 86400, description=description
        )

    def waiting(self) -> int:
        """Jobs waiting in the queue (drain jobs, and the report's or the anchor set's)."""
        return int(self.queue.count)

    def live_worker(self, name: str) -> tuple[BaseWorker | None, int]:
        """The RQ worker registered under `name` unless it died (else None), and the seconds
        left before its registration expires (-2 when there is none)."""
        key = f"{Worker.redis_worker_namespace_prefix}{name}"
        worker = Worker.find_by_key(key, connection=self.client)
        if worker is not None and worker.death_date is not None:
            worker = None
        return worker, int(self.client.ttl(key))
