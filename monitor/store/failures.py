"""What a failed store call was, in words that say what to check and nothing internal: no
address, no exception text. `/readyz`, the pages and the `503`s show these; the API's log
gets the exception itself (`ragmon.api.service.IngestService.unavailable`)."""

from __future__ import annotations

import redis

from ragmon.store.sealing import SealingKeyMissing

_CODES = ("OOM", "LOADING", "READONLY", "MISCONF", "NOAUTH", "WRONGPASS", "NOPERM", "BUSY")


class NotReplicated(redis.RedisError):
    """A write the primary took but fewer than RAGMON_WAIT_REPLICAS replicas acknowledged in
    time: answered `503`, and a retry with the same event ids is a duplicate, never a second
    event."""

    def __init__(self, acked: int, wanted: int, timeout_ms: int) -> None:
        self.acked, self.wanted, self.timeout_ms = acked, wanted, timeout_ms
        super().__init__(
            f"the write reached {acked} of RAGMON_WAIT_REPLICAS={wanted} replicas within "
            f"RAGMON_WAIT_TIMEOUT_MS={timeout_ms} ms"
        )


def is_store_failure(exc: BaseException) -> bool:
    """Redis failed, was unreachable or too slow (not a bug of ours, nor the sealing keys)."""
    return isinstance(exc, redis.RedisError | TimeoutError | ConnectionError)


def what_failed(exc: BaseException, timeout_s: float) -> str:
    """One line naming the setting to check for a failed store call."""
    if isinstance(exc, SealingKeyMissing | NotReplicated):
        return str(exc)
    if isinstance(exc, redis.AuthenticationError):
        return "Redis refused the credentials in REDIS_URL"
    code = str(exc).split(" ", 1)[0] if isinstance(exc, redis.ResponseError) else ""
    if isinstance(exc, TimeoutError | redis.TimeoutError) or code == "DEADLINE":
        return f"Redis (REDIS_URL) did not answer within RAGMON_STORE_TIMEOUT_S={timeout_s:g} s"
    if isinstance(exc, redis.ConnectionError | ConnectionError):
        return "cannot connect to Redis (REDIS_URL)"
    if isinstance(exc, redis.ResponseError):
        return f"Redis answered {code}" if code in _CODES else "Redis answered an error"
    return "an internal error"
