"""One request to the judge endpoint at start-up, so a wrong URL, key or model is named in one
line at once instead of after an hour of retries.

The probe is the call the workers make (chat completions with the configured model) with a
prompt whose answer is one token. It never stops a worker (the endpoint may come up later);
`ragmon calibrate` stops on a `fatal` answer, since every further call would fail the same way.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

import openai

from ragmon.preflight import judge_url
from ragmon.workers.admission import RateLimiter

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store import Store

PROBE_TIMEOUT_S = 10.0
PROBE_TOKENS = 20  # what the probe's prompt and answer cost, for the TPM limit


@dataclass(frozen=True)
class Probe:
    """What the endpoint answered: `message` is one line; `fatal` when no call can succeed
    until a setting changes (unreachable, 401/403, 404, no quota)."""

    ok: bool
    message: str
    fatal: bool = False


def probe_judge(
    settings: Settings, store: Store | None = None, timeout: float = PROBE_TIMEOUT_S
) -> Probe:
    """Send one tiny chat completion to the configured endpoint and classify the answer.

    With a `store`, the call waits for its turn under RAGMON_JUDGE_RPM / RAGMON_JUDGE_TPM like
    every judge call, so restarting workers never push the fleet over the provider's limits.
    """
    limiter = None
    if store is not None:
        limiter = RateLimiter(
            store.judge_state(), settings.judge_model, settings.judge_rpm, settings.judge_tpm
        )
    ticket = asyncio.run(limiter.acquire(PROBE_TOKENS)) if limiter is not None else None
    try:
        return _probe(settings, timeout)
    finally:
        if limiter is not None:
            limiter.settle(ticket, PROBE_TOKENS)


def _probe(settings: Settings, timeout: float) -> Probe:
    url = judge_url(settings)
    model = settings.judge_model
    wait_s = min(timeout, settings.judge_timeout_s)
    client = openai.OpenAI(
        api_key=settings.openai_api_key or "not-needed",
        base_url=settings.openai_base_url,
        timeout=wait_s,
        max_retries=0,
    )
    try:
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Reply with 0."}],
            max_completion_tokens=16,  # reasoning models need a few; "0" is one
        )
    except openai.APITimeoutError:
        return Probe(
            False,
            f"judge endpoint {url} did not answer within {wait_s:g} s: check "
            "OPENAI_BASE_URL and that the server is up",
            fatal=True,
        )
    except openai.APIConnectionError as exc:
        return Probe(
            False,
            f"judge endpoint {url} is unreachable ({_connection_reason(exc)}): check "
            "OPENAI_BASE_URL and that the server is up",
            fatal=True,
        )
    except openai.APIStatusError as exc:
        return _status_probe(exc, url, model)
    except openai.APIError as exc:  # answered, but not a completion: reachable all the same
        return Probe(True, f"judge endpoint {url} answered, oddly ({str(exc)[:120]})")
    finally:
        client.close()
    return Probe(True, f"judge endpoint {url} answers for model {model}")


def _status_probe(exc: openai.APIStatusError, url: str, model: str) -> Probe:
    status = exc.status_code
    detail = _detail(exc)
    if status in (401, 403):
        return Probe(
            False,
            f"judge endpoint {url} answered {status} ({detail}): check OPENAI_API_KEY",
            fatal=True,
        )
    if status == 404:
        if "model" in detail.lower():
            return Probe(
                False,
                f"judge endpoint {url} answered 404 for model {model!r} ({detail}): check "
                "RAGMON_JUDGE_MODEL",
                fatal=True,
            )
        return Probe(
            False,
            f"judge endpoint {url} answered 404 at {url.rstrip('/')}/chat/completions: check "
            "OPENAI_BASE_URL (OpenAI-compatible servers usually end in /v1)",
            fatal=True,
        )
    if status == 429 and getattr(exc, "code", None) == "insufficient_quota":
        return Probe(
            False,
            f"judge endpoint {url} answered 429 insufficient_quota: the account of "
            "OPENAI_API_KEY has no credit left",
            fatal=True,
        )
    if status in (400, 422, 429):  # the server knows the key and the model
        return Probe(True, f"judge endpoint {url} answers for model {model} ({status} to a probe)")
    return Probe(False, f"judge endpoint {url} answered {status} ({detail}): it is up but failing")


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    message = body.get("message") or exc.message or ""
    return " ".join(str(message).split())[:160]


def _connection_reason(exc: BaseException) -> str:
    """The root cause of a connection failure, in a few words."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "host not found"
        if seen.__cause__ is None and seen.__context__ is None:
            break
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(seen or exc).split())
    if "connection refused" in text.lower():
        return "connection refused"
    if "name or service not known" in text.lower() or "nodename nor servname" in text.lower():
        return "host not found"
    return text[:160] or type(exc).__name__
