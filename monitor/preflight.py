"""Start-up checks shared by `ragmon serve` and `ragmon worker`: say what is used, in one line,
and say at once (and again every few seconds) when Redis cannot be reached."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import redis.exceptions

from ragmon.settings import Settings
from ragmon.store import Store

log = logging.getLogger("ragmon")

REDIS_RETRY_S = 5.0  # one attempt, and one log line, per interval while Redis is unreachable
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
_USER_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/@?#]*):[^@/?#]*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` without a password (in the user part or a `password=` query parameter)."""
    url = _USER_PASSWORD.sub(r"\1:***@", url)
    return _QUERY_PASSWORD.sub(r"\1***", url)


def judge_url(settings: Settings) -> str:
    """The judge endpoint as users configure it (OPENAI_BASE_URL, else OpenAI's), redacted."""
    return redact_url(settings.openai_base_url or OPENAI_DEFAULT_URL)


def describe(settings: Settings) -> str:
    """What this process uses, in one line: Redis, judge, model, endpoint, sampling, budget."""
    redis_url = redact_url(settings.redis_url or "(REDIS_URL not set)")
    if settings.judge == "lexical":
        judge = "judge=lexical (offline stand-in, not an LLM)"
    else:
        host = urlsplit(settings.openai_base_url or OPENAI_DEFAULT_URL).hostname
        judge = (
            f"judge=openai model={settings.judge_model} endpoint={host} mode={settings.judge_mode}"
        )
    budget = f"{settings.daily_budget_usd:g} USD/day" if settings.daily_budget_usd > 0 else "none"
    if settings.sampling == "planned":
        sampling = (
            f"sampling=planned (weekly ±{settings.target_half_width:g} per series, at least "
            f"{settings.min_judged_per_day}/day)"
        )
    else:
        sampling = f"sampling=fixed {settings.sample_rate:g}"
    return f"redis={redis_url} queue={settings.queue_name} {judge} {sampling} budget={budget}"


def warn_memory(store: Store) -> str | None:
    """Log (and return) the start-up warning about Redis' memory: an eviction policy that
    could drop accepted events, or a maxmemory below the forecast steady state
    (`ragmon.store.ledger.Memory.warning`); nothing when Redis cannot be read yet."""
    try:
        warning = store.ledger.memory(time.time()).warning()
    except redis.exceptions.RedisError:
        return None
    if warning:
        log.warning("%s", warning)
    return warning


def redis_problem(store: Store) -> str | None:
    """None when Redis answers PING, else the reason in one line."""
    error = store.unreachable()
    if error is None:
        return None
    return _unreachable(store.settings.redis_url or "", error)


def redis_error(exc: Exception, url: str) -> str | None:
    """The one line for an error that says Redis cannot be reached, or None for any other."""
    if not isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return None
    return _unreachable(url, " ".join(str(exc).split()) or type(exc).__name__)


def _unreachable(url: str, reason: str) -> str:
    return f"cannot reach Redis at {redact_url(url)} ({reason}): check REDIS_URL"


def wait_for_redis(
    store: Store,
    interval: float = REDIS_RETRY_S,
    sleep: Callable[[float], None] = time.sleep,
    stop: threading.Event | None = None,
) -> bool:
    """Block until Redis answers, logging one line per attempt; False if `stop` was set."""
    attempt = 0
    while True:
        problem = redis_problem(store)
        if problem is None:
            if attempt:
                log.info("Redis reachable after %d attempts", attempt + 1)
            return True
        attempt += 1
        log.warning("%s; retrying every %g s (attempt %d)", problem, interval, attempt)
        if stop is not None:
            if stop.wait(interval):
                return False
        else:
            sleep(interval)


class RedisWatch:
    """A thread that checks Redis every `interval` and logs one line per failed check (and one
    when it answers again): the API keeps running and answers 503 meanwhile."""

    def __init__(self, store: Store, interval: float = REDIS_RETRY_S) -> None:
        self.store, self.interval = store, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragmon-redis-watch", daemon=True)

    def start(self) -> RedisWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval + 1)

    def _run(self) -> None:
        down = False
        while not self._stop.is_set():
            problem = redis_problem(self.store)
            if problem is not None:
                log.warning(
                    "%s; the API answers 503 until it can (checking every %g s)",
                    problem,
                    self.interval,
                )
            elif down:
                log.info("Redis reachable again")
            down = problem is not None
            self._stop.wait(self.interval)
