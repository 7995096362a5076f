"""`ragmon worker`: an RQ worker on ragmon's queue, with the ragmon context set."""

from __future__ import annotations

import logging

from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from rq import Worker

from monitor.settings import Settings
from monitor.store import Store
from workers.context import build_context, set_context

log = logging.getLogger("ragmon.worker")


def patient_retry() -> Retry:
    """Redis retries that ride out a Redis restart (about a minute or two): RQ's worker quits on
    a ConnectionError while it watches a work horse, and redis-py's default retries span ~2 s."""
    return Retry(ExponentialWithJitterBackoff(base=0.25, cap=5.0), retries=30)


class JudgeNotConfigured(SystemExit):
    """`ragmon worker` refuses to start without an LLM endpoint (unless RAGMON_JUDGE=lexical)."""


def check_judge(settings: Settings) -> None:
    if settings.judge == "openai" and not settings.judge_configured:
        raise JudgeNotConfigured(
            "ragmon worker: no LLM judge configured. Set OPENAI_API_KEY (and OPENAI_BASE_URL for "
            "Azure OpenAI, vLLM, Ollama or another OpenAI-compatible server) and "
            "RAGMON_JUDGE_MODEL, or set RAGMON_JUDGE=lexical for the offline, non-LLM judge."
        )


def make_worker(
    settings: Settings,
    store: Store | None = None,
    name: str | None = None,
    maintenance_interval: int = 60,
    job_monitoring_interval: int = 10,
) -> Worker:
    """An RQ worker whose work horses inherit the ragmon context (settings, store, judge)."""
    check_judge(settings)
    if store is None:
        store = Store.connect(settings)
        store.client.set_retry(patient_retry())
    ctx = build_context(settings, store)
    set_context(ctx)
    if settings.judge == "openai":
        # Import the judge (openai, httpx, pydantic models) once, before RQ forks a work horse
        # per job, instead of in every horse: +30% judged passages/s (tests/bench/bench_worker).
        import workers.judges.llm  # noqa: F401
    return Worker(
        [ctx.store.queue],
        connection=ctx.store.client,
        name=name,
        maintenance_interval=maintenance_interval,
        job_monitoring_interval=job_monitoring_interval,
        # RQ blocks an idle worker in BLPOP for worker_ttl - 15 s (default 405 s) and runs its
        # maintenance (retrying jobs abandoned by a dead worker) only between two waits: tie
        # the wait to the maintenance interval.
        worker_ttl=maintenance_interval + 15,
    )
