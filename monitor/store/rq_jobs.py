"""The one module that knows how ragmon's jobs sit in RQ (pinned in pyproject.toml).

The store enqueues a job per batch of events through RQ's public `Queue.enqueue_many`; the
ingest fast path (`ragmon.store.ingest`) instead replays, inside its Lua script, the Redis
commands that call issues, recorded here from a pipeline that is never executed. That replay
depends on RQ's internals, so it lives here alone, and `tests/monitor/test_rq_contract.py`
checks that both ways leave the same keys, types, fields and TTLs: an RQ upgrade that changes
them fails that test instead of writing jobs RQ cannot read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from rq import Callback, Queue, Retry, Worker, get_current_job
from rq.exceptions import AbandonedJobError
from rq.worker import BaseWorker

# The worker functions RQ imports by name (the store never imports worker code).
JOB_FUNC = "ragmon.workers.jobs.process_events"
ON_FAILURE = "ragmon.workers.jobs.on_job_failure"
JOB_TIMEOUT_S = 3600  # a job may wait out an LLM outage (the judge backs off inside)
JOB_RETRY = Retry(max=5, interval=[10, 30, 120, 600, 1800])


def last_attempt() -> bool:
    """True inside the run of a ragmon job that has no retry left (its events' last try)."""
    job = get_current_job()
    return job is not None and not job.retries_left


def abandoned(exc_type: type[BaseException] | None) -> bool:
    """True when RQ gave up on a job because its work horse died (no heartbeat)."""
    return exc_type is not None and issubclass(exc_type, AbandonedJobError)


class Jobs:
    """ragmon's RQ queue: enqueue a job per batch of events, or record the commands doing it."""

    def __init__(self, client: redis.Redis, queue_name: str, batch_size: int) -> None:
        self.queue = Queue(queue_name, connection=client)
        self.client = client
        self.batch_size = batch_size

    def _data(self, refs: Sequence[str]) -> Any:
        return Queue.prepare_data(
            JOB_FUNC,
            args=(list(refs),),
            timeout=JOB_TIMEOUT_S,
            result_ttl=60,
            failure_ttl=30 * 86400,
            retry=JOB_RETRY,
            on_failure=Callback(ON_FAILURE),
            description=f"ragmon: judge {len(refs)} events",
        )

    def enqueue(self, refs: Sequence[str], pipe: redis.client.Pipeline) -> None:
        """Queue jobs of at most `batch_size` events on `pipe` (RQ's public API)."""
        size = self.batch_size
        datas = [self._data(refs[i : i + size]) for i in range(0, len(refs), size)]
        self.queue.enqueue_many(datas, pipeline=pipe)

    def commands(self, refs: Sequence[str]) -> list[tuple]:
        """The Redis commands `enqueue_many` issues for one job judging the events `refs`
        (recorded on a pipeline that is never executed; the ingest script runs them)."""
        pipe = self.client.pipeline(transaction=False)
        self.queue.enqueue_many([self._data(refs)], pipeline=pipe)
        return [args for args, _ in pipe.command_stack]

    def waiting_retry(self) -> int:
        """Jobs in RQ's scheduled registry: waiting out a retry interval."""
        return int(self.queue.scheduled_job_registry.get_job_count(cleanup=False))

    def live_worker(self, name: str) -> tuple[BaseWorker | None, int]:
        """The RQ worker registered under `name` unless it died (else None), and the seconds
        left before its registration expires (-2 when there is none)."""
        key = f"{Worker.redis_worker_namespace_prefix}{name}"
        worker = Worker.find_by_key(key, connection=self.client)
        if worker is not None and worker.death_date is not None:
            worker = None
        return worker, int(self.client.ttl(key))
