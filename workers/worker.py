"""`ragmon worker`: an RQ worker on ragmon's queue, with the ragmon context set.

This module is the one adapter to RQ's worker: start-up checks, and the worker class, whose
only addition is the maintenance tick's look at the pending events (`wake_drain`).
"""

from __future__ import annotations

import gc
import logging
import signal
from datetime import UTC, datetime

from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from rq import Queue, Worker
from rq.exceptions import StopRequested
from rq.job import Job
from rq.worker import WorkerStatus

from ragmon.preflight import describe, wait_for_redis, warn_memory
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.workers.context import build_context, set_context
from ragmon.workers.summaries import keep_estimates

log = logging.getLogger("ragmon.worker")


def patient_retry() -> Retry:
    """Redis retries that ride out a Redis restart (about a minute or two): RQ's worker quits on
    a ConnectionError while it watches a work horse, and redis-py's default retries span ~2 s."""
    return Retry(ExponentialWithJitterBackoff(base=0.25, cap=5.0), retries=30)


class JudgeNotConfigured(SystemExit):
    """`ragmon worker` refuses to start without an LLM endpoint (unless RAGMON_JUDGE=lexical)."""


class NameInUse(SystemExit):
    """Another live worker is registered under the requested `--name`."""


def check_judge(settings: Settings) -> None:
    if settings.judge == "openai" and not settings.judge_configured:
        raise JudgeNotConfigured(
            "ragmon worker: no LLM judge configured. Set OPENAI_API_KEY (and OPENAI_BASE_URL for "
            "Azure OpenAI, vLLM, Ollama or another OpenAI-compatible server) and "
            "RAGMON_JUDGE_MODEL, or set RAGMON_JUDGE=lexical for the offline, non-LLM judge."
        )


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
PUBSUB_WAIT_S = 1.0  # the longest read of RQ's command channel (`RagmonWorker.subscribe`)


class RagmonWorker(Worker):
    """RQ's worker; at start and at each maintenance tick it makes sure a drain job will look
    at the events waiting (`wake_drain`). SIGINT and SIGTERM wait across the fork of a work
    horse until the horse has its own handlers: one that arrived in between (Ctrl-C reaches
    the whole process group, the horse included until it leaves it) ran the worker's handler
    inside threading's after-fork hook and logged "Exception ignored" with a traceback."""

    store: Store | None = None

    def fork_work_horse(self, job: Job, queue: Queue) -> None:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            super().fork_work_horse(job, queue)  # the horse never returns from here
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    def setup_work_horse_signals(self) -> None:
        super().setup_work_horse_signals()  # type: ignore[no-untyped-call]  # RQ is untyped there
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # pending ones act now

    def subscribe(self) -> None:
        """RQ's own, reading its command channel in steps of `PUBSUB_WAIT_S`: with RQ's 60 s
        step, closing the channel when a worker stopped waited for that read to end, and one
        burst run in five took a minute longer."""
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[assignment]  # RQ: None
            sleep_time=PUBSUB_WAIT_S, daemon=True, exception_handler=self._pubsub_exception_handler
        )

    in_maintenance = False

    def run_maintenance_tasks(self) -> None:
        """A stop signal during the tick is kept until the tick ends (see `_shutdown`)."""
        self.in_maintenance = True
        try:
            super().run_maintenance_tasks()  # type: ignore[no-untyped-call]  # RQ is untyped
            if self.store is not None:
                wake_drain(self.store)
                keep_summaries(self.store)
                keep_estimates(self.store)
        finally:
            self.in_maintenance = False
        if self._stop_requested:
            raise StopRequested  # from here it reaches RQ's loop, which stops

    def _shutdown(self) -> None:
        """RQ raises StopRequested from the signal handler when no job runs: during the
        maintenance tick that lands inside code that catches every Exception (logging's emit
        printed "--- Logging error ---" with a traceback and the stop was lost; so would
        `wake_drain`'s guard). There the request is only noted, and acted on as the tick ends."""
        if self.in_maintenance and self.get_state() != WorkerStatus.BUSY:
            self._stop_requested = True
            return
        super()._shutdown()  # type: ignore[no-untyped-call]  # RQ is untyped there


def wake_drain(store: Store) -> None:
    """Enqueue a drain job when events are due and RQ's queue holds none (an API died between
    its write and its wake-up call, retries came due, leases ended). It only decides when
    someone looks: it moves no event."""
    try:
        woke = store.delivery.wake_if_idle()
    except Exception as exc:  # noqa: BLE001 - a Redis hiccup must not stop the worker
        log.warning("could not look at the pending events: %s", exc)
        return
    if woke:
        log.info("events were waiting with no drain job in the queue: enqueued one")


def keep_summaries(store: Store) -> None:
    """Bring every series' overview summary to this hour, once an hour for the fleet (the
    explorer's pages only read them: `ragmon.store.event_index`)."""
    try:
        changed = store.explore.keep_summaries()
    except Exception as exc:  # noqa: BLE001 - a Redis hiccup must not stop the worker
        log.warning("could not bring the overview summaries to this hour: %s", exc)
        return
    if changed:
        log.debug("brought %d series' overview summaries to this hour", changed)


def make_worker(
    settings: Settings,
    store: Store | None = None,
    name: str | None = None,
    maintenance_interval: int = 60,
    job_monitoring_interval: int = 10,
) -> RagmonWorker:
    """An RQ worker whose work horses inherit the ragmon context (settings, store, judge)."""
    check_judge(settings)
    if store is None:
        store = Store.connect(settings)
        store.set_retry(patient_retry())
    ctx = build_context(settings, store)
    set_context(ctx)
    worker = RagmonWorker(
        [ctx.store.delivery.jobs.queue],  # RQ takes the queue's connection: the store's
        name=name,
        maintenance_interval=maintenance_interval,
        job_monitoring_interval=job_monitoring_interval,
        # RQ blocks an idle worker in BLPOP for worker_ttl - 15 s (default 405 s) and runs its
        # maintenance (retrying jobs abandoned by a dead worker) only between two waits: tie
        # the wait to the maintenance interval.
        worker_ttl=maintenance_interval + 15,
    )
    worker.store = ctx.store
    return worker


def start_worker(
    settings: Settings,
    name: str | None = None,
    maintenance_interval: int = 60,
    job_monitoring_interval: int = 10,
) -> RagmonWorker:
    """What `ragmon worker` does before it works: say what it uses, wait for Redis (one line
    per attempt), probe the judge (a problem is logged, never fatal: the endpoint may come up
    later), refuse a `--name` a live worker holds."""
    check_judge(settings)
    log.info("ragmon worker starting: %s", describe(settings))
    store = Store.connect(settings)
    wait_for_redis(store)
    warn_memory(store)
    if settings.judge == "openai":
        from ragmon.workers.judges.probe import probe_judge

        probe = probe_judge(settings, store)  # after Redis: it waits for the fleet's RPM/TPM
        if probe.ok:
            log.info("%s", probe.message)
        else:
            log.warning("%s (starting anyway: events wait in the queue meanwhile)", probe.message)
    store.set_retry(patient_retry())
    if name is not None:
        holder = name_holder(store, name)
        if holder:
            raise NameInUse(f"ragmon worker: --name {name!r} is taken by {holder}")
    worker = make_worker(settings, store, name, maintenance_interval, job_monitoring_interval)
    # What was built so far (imports, the judge's first client) lives as long as the worker:
    # frozen out of the collector's sight, a work horse's collections do not walk it, so they
    # do not copy the parent's memory pages (a share of the CPU per judged passage).
    gc.collect()
    gc.freeze()
    return worker


def name_holder(store: Store, name: str) -> str | None:
    """Who holds worker `name` (RQ refuses a second live worker of the same name), or None."""
    other, ttl = store.delivery.jobs.live_worker(name)
    if other is None:
        return None
    seen = ""
    if other.last_heartbeat is not None:
        ago = (datetime.now(UTC) - other.last_heartbeat.replace(tzinfo=UTC)).total_seconds()
        seen = f", last heartbeat {max(0, round(ago))} s ago"
    expiry = f"; if it is gone, the name frees itself within {ttl} s" if ttl and ttl > 0 else ""
    return (
        f"a running worker (pid {other.pid} on {other.hostname}{seen}): stop it or choose "
        f"another --name (without --name each worker gets a unique one){expiry}"
    )
