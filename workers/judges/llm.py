"""The LLM judge: any OpenAI-compatible chat-completions endpoint (OpenAI, Azure, vLLM, Ollama).

One job builds one `OpenAIJudge` and closes it (`aclose`) when done: RQ forks a work horse per
job and `asyncio.run` gives each job its own event loop, so the HTTP client is created lazily
inside that loop and never shared across processes.

Per call: wait for the fleet-wide RPM/TPM limiter, send with a per-call timeout, retry passing
failures (429, 5xx, timeout, connection) with exponential backoff and jitter that honours
`Retry-After`, count the call (`judge_requests{model,outcome}`), its tokens, cost and latency
(`accounting`: written to Redis once per event, and before each budget check). The openai
client's own retries are off (`max_retries=0`) so that every attempt is counted and limited.
A malformed or empty answer gets one repair attempt; a refusal never does. The judge writes no
judgment cache: grades it got before failing travel on the `JudgeError` for the job to cache
(`ragmon.workers.judges.cache`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import openai
from openai.types.chat import ChatCompletion

from ragmon.core.identity import JudgeIdentity
from ragmon.retry import retry_after_s
from ragmon.workers.admission import RateLimiter
from ragmon.workers.judges import prompt, utility
from ragmon.workers.judges.accounting import Accounting
from ragmon.workers.judges.base import JudgeError, PartialGrades

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store import Store

log = logging.getLogger("ragmon.judge")
T = TypeVar("T")

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
MAX_INLINE_WAIT_S = 60.0  # a longer Retry-After puts the event back in pending (retried later)
LISTWISE_MAX = 20  # passages per listwise call; more are split into several calls
EST_OUTPUT_TOKENS = 8  # per grade, for the TPM reservation before usage is known
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")  # reject temperature != 1
# What `chat.completions.create` sends besides the body: the API key as a bearer token only.
_REQUEST_OPTIONS: openai.RequestOptions = {"security": {"bearer_auth": True}}


class _Transient(Exception):
    """A passing failure of one attempt; `retry_after` is the server's hint in seconds."""

    def __init__(self, outcome: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.retry_after = retry_after


def backoff_s(attempt: int, retry_after: float | None) -> float:
    """Wait before retry `attempt` (0-based): the server's hint, else capped exponential with
    full jitter; a hint gets 0-10% jitter so waiting workers do not return all at once."""
    if retry_after is not None:
        return retry_after * (1.0 + random.uniform(0.0, 0.1))
    return random.uniform(0.5, 1.0) * min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0**attempt)


class OpenAIJudge:
    """Grades passages with a chat model (pointwise, or listwise with RAGMON_JUDGE_MODE), 0-3,
    or 1-5 with RAGMON_JUDGE_SCALE=utility5 (`grading` maps those back to 0-3)."""

    per_call = False  # a grade is the model's view of (query, passage): cached and shared

    def __init__(self, settings: Settings, store: Store | None = None) -> None:
        self.settings = settings
        self.model = settings.judge_model
        self.mode = settings.judge_mode
        self.scale = prompt.SCALES[settings.judge_scale]
        self.identity = JudgeIdentity(self.model, self.scale.version, self.mode)
        state = store.judge_state() if store is not None else None
        self._limiter = (
            RateLimiter(state, self.model, settings.judge_rpm, settings.judge_tpm)
            if state is not None
            else None
        )
        #: Tokens, cost and outcome of every call (fleet counters with a store), and the budget.
        self.accounting = Accounting(
            self.model, settings.prices, settings.daily_budget_usd, state, settings.app_daily_budget
        )
        self._client: openai.AsyncOpenAI | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._probes: dict[tuple[str, str], asyncio.Future[utility.Reading | None]] = {}
        self.structured = True  # False once the server rejected response_format
        self.temperature: float | None = None if self.model.startswith(_REASONING_PREFIXES) else 0.0

    # ---- the Judge protocol -------------------------------------------------------------------

    async def grade(self, query: str, passages: Sequence[tuple[str, str]]) -> list[int]:
        """One grade per `(passage_id, text)`; raises `JudgeError` (see module docstring)."""
        if not passages:
            return []
        try:
            return await self._grade(query, passages)
        finally:  # the event's calls, counted in one round trip
            self.accounting.flush()

    async def _grade(self, query: str, passages: Sequence[tuple[str, str]]) -> list[int]:
        self.accounting.check_budget()
        texts = [text for _, text in passages]
        results: list[object]
        if self.mode == "listwise":
            chunks = [texts[i : i + LISTWISE_MAX] for i in range(0, len(texts), LISTWISE_MAX)]
            parts = await asyncio.gather(
                *(self._listwise(query, c) for c in chunks), return_exceptions=True
            )
            results = []
            for chunk, part in zip(chunks, parts, strict=True):
                results += part if isinstance(part, list) else [part] * len(chunk)
        else:
            results = list(
                await asyncio.gather(
                    *(self._pointwise(query, t) for t in texts), return_exceptions=True
                )
            )
        errors = [r for r in results if isinstance(r, BaseException)]
        if not errors:
            return [r for r in results if isinstance(r, int)]
        judge_errors = [e for e in errors if isinstance(e, JudgeError)]
        if len(judge_errors) < len(errors):
            raise next(e for e in errors if not isinstance(e, JudgeError))
        grades = [r if isinstance(r, int) else None for r in results]
        passing = [e for e in judge_errors if e.retryable]
        reasons = [r.reason if isinstance(r, JudgeError) else None for r in results]
        if passing:  # waiting may get every grade: the job is retried (the caller caches these)
            passing[0].grades, passing[0].reasons = grades, reasons
            raise passing[0]
        if len(errors) == len(results):
            raise judge_errors[0]
        # lasting failures on some passages only: they stay unjudged, the others count
        raise PartialGrades(grades, reasons)

    async def no_response_p(self, query: str, text: str) -> utility.Reading | None:
        """The utility probe: p(NO-RESPONSE) of one passage from one 1-token answer's top
        logprobs (workers/judges/utility.py); None when the endpoint returned no logprobs or
        refused the option (HTTP 400 naming it).

        Same limiter, retries, accounting and budget as grading; counted as outcome `ok` or
        `no_logprobs`. Events of one job that share a (query, passage) share one call: the
        others get its reading marked `cache`."""
        key = (query, text)
        running = self._probes.get(key)
        if running is not None:
            reading = await asyncio.shield(running)
            return None if reading is None else utility.Reading(reading.p, "cache")
        task = asyncio.ensure_future(self._probe(query, text))
        self._probes[key] = task
        try:
            return await task
        finally:
            self.accounting.flush()

    async def _probe(self, query: str, text: str) -> utility.Reading | None:
        self.accounting.check_budget()
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.settings.judge_concurrency)
        options = {"max_tokens": 1, "logprobs": True, "top_logprobs": utility.TOP_LOGPROBS}
        async with self._semaphore:
            try:
                reply, usage, latency = await self._call(
                    utility.messages(query, text), None, None, options
                )
            except JudgeError as exc:
                if exc.reason == "client_error" and "logprob" in str(exc).lower():
                    return None  # the server refuses the option: no logprobs here
                raise
        logprobs = getattr(reply, "logprobs", None)
        first = (getattr(logprobs, "content", None) or [None])[0]
        top = [(t.token, t.logprob) for t in getattr(first, "top_logprobs", None) or ()]
        reading = utility.read_p(top)
        self.accounting.record("ok" if reading is not None else "no_logprobs", latency, usage)
        return reading

    async def aclose(self) -> None:
        """Close the HTTP client (called by the job when it is done)."""
        self.accounting.flush()
        if self._client is not None:
            await self._client.close()
            self._client = None

    # ---- one prompt, with the repair attempt ----------------------------------------------------

    async def _pointwise(self, query: str, text: str) -> int:
        scale = self.scale
        return await self._ask(
            prompt.pointwise_messages(query, text, scale),
            prompt.pointwise_format(scale),
            lambda content: prompt.parse_pointwise(content, scale),
            n=None,
        )

    async def _listwise(self, query: str, texts: Sequence[str]) -> list[int]:
        n = len(texts)
        scale = self.scale
        return await self._ask(
            prompt.listwise_messages(query, texts, scale),
            prompt.listwise_format(n, scale),
            lambda content: prompt.parse_listwise(content, n, scale),
            n=n,
        )

    async def _ask(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any],
        parse: Callable[[str], T],
        n: int | None,
    ) -> T:
        """Ask, parse strictly; on a malformed or empty answer ask once more, then give up."""
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.settings.judge_concurrency)
        async with self._semaphore:
            outcome, error = "", ""
            for attempt in range(2):
                reply, usage, latency = await self._call(messages, response_format, n)
                message = reply.message
                refused = getattr(message, "refusal", None)
                if refused or reply.finish_reason == "content_filter":
                    self.accounting.record("refused", latency, usage)
                    raise JudgeError(
                        "refused", f"the judge model refused: {str(refused or '')[:200]}"
                    )
                content = message.content or ""
                if not content.strip():
                    outcome, error = "empty", "the answer is empty"
                else:
                    try:
                        value = parse(content)
                    except prompt.ParseError as exc:
                        outcome, error = "malformed", str(exc)
                    else:
                        self.accounting.record("ok", latency, usage)
                        return value
                self.accounting.record(outcome, latency, usage)
                if attempt == 0 and outcome == "malformed":
                    messages = [
                        *messages,
                        {"role": "assistant", "content": content},
                        prompt.repair_message(error, n, self.scale),
                    ]
            raise JudgeError(outcome, f"{outcome} answer after one repair attempt: {error}")

    # ---- one HTTP call, with retries ---------------------------------------------------------

    def _client_for_loop(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self.settings.openai_api_key or "not-needed",
                base_url=self.settings.openai_base_url,
                timeout=self.settings.judge_timeout_s,
                max_retries=0,
            )
        return self._client

    async def _call(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any] | None,
        n: int | None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, Any, float]:
        """One completion (a choice, its usage, its latency), retrying passing failures.

        Each attempt passes the limiter and is counted. Usage is returned, not recorded, so
        the caller records the call once with its final outcome.
        """
        est = sum(len(m["content"]) for m in messages) // 4 + EST_OUTPUT_TOKENS * (n or 1)
        attempt = 0
        while True:
            ticket = await self._limiter.acquire(est) if self._limiter is not None else None
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
            if self.structured and response_format is not None:
                kwargs["response_format"] = response_format
            if self.temperature is not None:
                kwargs["temperature"] = self.temperature
            kwargs.update(options or {})
            started = time.perf_counter()
            try:
                # the SDK's own request path (errors, timeouts, parsing) without the
                # per-call rewrite of the body through its typed params, a noticeable share
                # of the CPU a call; our body is already plain JSON (docs/performance.md)
                resp = await self._client_for_loop().post(
                    "/chat/completions",
                    body=kwargs,
                    cast_to=ChatCompletion,
                    options=_REQUEST_OPTIONS,
                )
            except openai.APIStatusError as exc:
                latency = time.perf_counter() - started
                self._settle(ticket, est)
                if exc.status_code in (400, 422) and self._drop_option(exc, kwargs):
                    self.accounting.record("client_error", latency)
                    continue  # same attempt again without the option the server rejected
                failure = self._classify(exc)
                self.accounting.record(failure.outcome, latency)
                if failure.outcome == "client_error":
                    raise JudgeError(
                        "client_error", f"HTTP {exc.status_code}: {exc.message}"[:300]
                    ) from None
                attempt = await self._wait_or_raise(failure, attempt)
                continue
            except openai.APIConnectionError as exc:
                latency = time.perf_counter() - started
                self._settle(ticket, est)
                outcome = (
                    "timeout" if isinstance(exc, openai.APITimeoutError) else "connection_error"
                )
                self.accounting.record(outcome, latency)
                attempt = await self._wait_or_raise(_Transient(outcome, str(exc)), attempt)
                continue
            except openai.APIError as exc:  # e.g. a 200 whose body is not a completion
                latency = time.perf_counter() - started
                self._settle(ticket, est)
                self.accounting.record("server_error", latency)
                failure = _Transient("server_error", f"bad response: {exc}"[:300])
                attempt = await self._wait_or_raise(failure, attempt)
                continue
            latency = time.perf_counter() - started
            usage = resp.usage
            self._settle(ticket, usage.total_tokens if usage is not None else est)
            if not resp.choices:
                self.accounting.record("empty", latency, usage)
                attempt = await self._wait_or_raise(_Transient("empty", "no choices"), attempt)
                continue
            return resp.choices[0], usage, latency

    def _drop_option(self, exc: openai.APIStatusError, kwargs: dict[str, Any]) -> bool:
        """On a 400/422: stop sending an option the server does not support, when the error
        names it (any other 400, e.g. a context-length error, is not about the option).
        Remembered for this judge (one job)."""
        text = str(exc.message).lower()
        if "temperature" in text and "temperature" in kwargs:
            self.temperature = None
            return True
        named = text + " " + str(getattr(exc, "param", None) or "").lower()
        if "response_format" in kwargs and ("response_format" in named or "json_schema" in named):
            log.warning("judge endpoint rejected response_format (%s): parsing plain JSON", text)
            self.structured = False
            return True
        return False

    @staticmethod
    def _classify(exc: openai.APIStatusError) -> _Transient:
        status = exc.status_code
        hint = retry_after_s(exc.response.headers if exc.response is not None else None)
        if status == 429 and getattr(exc, "code", None) == "insufficient_quota":
            return _Transient("client_error", f"HTTP 429 (out of quota): {exc.message}")
        if status == 429:
            return _Transient("rate_limited", f"HTTP 429: {exc.message}", hint)
        if status == 408:
            return _Transient("timeout", f"HTTP 408: {exc.message}", hint)
        if status >= 500 or status == 409:
            return _Transient("server_error", f"HTTP {status}: {exc.message}", hint)
        return _Transient("client_error", f"HTTP {status}: {exc.message}")

    async def _wait_or_raise(self, failure: _Transient, attempt: int) -> int:
        """Sleep before the next attempt, or raise a retryable JudgeError after the last one
        (the event goes back to pending for a later attempt)."""
        hint = failure.retry_after
        if attempt >= self.settings.judge_max_retries or (
            hint is not None and hint > MAX_INLINE_WAIT_S
        ):
            raise JudgeError(
                failure.outcome,
                f"{failure} (after {attempt + 1} attempts)",
                retryable=True,
            )
        await asyncio.sleep(backoff_s(attempt, hint))
        return attempt + 1

    def _settle(self, ticket: Any, tokens: int) -> None:
        if self._limiter is not None:
            self._limiter.settle(ticket, tokens)
