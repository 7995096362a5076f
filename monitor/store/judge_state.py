"""Redis state of the LLM judge: the shared rate limiter, the daily spend and per-call accounting.

Every worker on every host talks to the same Redis, so limits hold for the whole fleet:

- Requests and tokens per minute: a sliding-window log per model (two sorted sets scored by
  Redis' own clock, `TIME`, so hosts' clocks do not matter). A Lua script admits a call only when
  the last window holds fewer than RPM calls and fewer than TPM tokens, and records it in the
  same step; otherwise it answers how long to wait. When the call ends it is re-stamped with
  its end time (and its real token count), which is no earlier than when the provider saw it.
  The window is 60 s plus `MARGIN_S` for calls still in flight, which reach the provider a
  little after their admission. So the provider sees at most RPM calls in any 60 s, as long
  as no call stays in flight longer than the window (RAGMON_JUDGE_TIMEOUT < 60 s).
- Spend: USD per UTC day in one float (`INCRBYFLOAT`) that expires after `SPEND_TTL_S`, and
  per app in a hash beside it (the app whose event the call graded), for the apps' own budgets.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import redis

from ragmon.core.catalog import JUDGE_LATENCY_BUCKETS
from ragmon.core.wire import SEP, field_name
from ragmon.store.keys import DAY_TTL_S, Keys, utc_today
from ragmon.store.protocol import Script
from ragmon.store.records import bucket_index

_N = TypeVar("_N", int, float)

WINDOW_S = 60.0
MARGIN_S = 1.0
SPEND_TTL_S = 8 * 86400  # the gauge only needs today; a week back helps debugging

# The requests zset's members are call ids; the tokens zset's are `id:tokens`. Returns
# {0, now_ms} when admitted (recorded), {wait_ms, now_ms} when not.
ACQUIRE = Script(
    "ACQUIRE",
    ("requests", "tokens"),
    ("window_ms", "rpm", "tpm", "tokens", "member"),
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(A.window_ms)
local rpm = tonumber(A.rpm)
local tpm = tonumber(A.tpm)
local tokens = tonumber(A.tokens)
local cutoff = now - window
redis.call('ZREMRANGEBYSCORE', K.requests, '-inf', cutoff)
redis.call('ZREMRANGEBYSCORE', K.tokens, '-inf', cutoff)
local wait = 0
if rpm > 0 then
  local n = redis.call('ZCARD', K.requests)
  if n >= rpm then
    local e = redis.call('ZRANGE', K.requests, n - rpm, n - rpm, 'WITHSCORES')
    wait = tonumber(e[2]) + window - now
  end
end
if tpm > 0 then
  local entries = redis.call('ZRANGE', K.tokens, 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #entries, 2 do
    used = used + tonumber(string.match(entries[i], ':(%d+)$'))
  end
  if used > 0 and used + tokens > tpm then
    local left = used
    for i = 1, #entries, 2 do
      left = left - tonumber(string.match(entries[i], ':(%d+)$'))
      if left + tokens <= tpm or left == 0 then
        local w = tonumber(entries[i + 1]) + window - now
        if w > wait then wait = w end
        break
      end
    end
  end
end
if wait > 0 then return {wait, now} end
redis.call('ZADD', K.requests, now, A.member)
redis.call('ZADD', K.tokens, now, A.member .. ':' .. tokens)
redis.call('PEXPIRE', K.requests, window + 1000)
redis.call('PEXPIRE', K.tokens, window + 1000)
return {0, now}
""",
)

# Moves the call `member` to the window's present (its end) with the tokens it really used.
SETTLE = Script(
    "SETTLE",
    ("requests", "tokens"),
    ("member", "old_tokens", "new_tokens"),
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', K.requests, 'XX', now, A.member)
if redis.call('ZREM', K.tokens, A.old_tokens) == 1 then
  redis.call('ZADD', K.tokens, now, A.new_tokens)
end
return 1
""",
)


@dataclass(frozen=True)
class Ticket:
    """An admitted call: settle it with the tokens it really used."""

    model: str
    call_id: str
    tokens: int
    admitted_ms: int


class JudgeState:
    """The judge's Redis state (limiter, spend, counters) for one deployment's key prefix."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.client = client
        self.keys = keys or Keys()
        self._acquire = client.register_script(ACQUIRE.source)
        self._settle = client.register_script(SETTLE.source)

    # ---- rate limits ------------------------------------------------------------------------

    def try_acquire(
        self,
        model: str,
        rpm: int,
        tpm: int,
        tokens: int,
        window_s: float = WINDOW_S + MARGIN_S,
    ) -> tuple[float, Ticket | None]:
        """Admit one call of about `tokens` tokens now, or say how many seconds to wait.

        Returns `(0.0, ticket)` when admitted, `(wait_s, None)` when not. A limit of 0 is
        unlimited. A call bigger than the whole TPM is admitted alone in an empty window.
        """
        call_id = uuid.uuid4().hex
        tokens = max(0, int(tokens))
        call = ACQUIRE.call(
            keys=self._window(model),
            args={"window_ms": int(window_s * 1000), "rpm": int(rpm), "tpm": int(tpm),
                  "tokens": tokens, "member": call_id},
        )  # fmt: skip
        wait_ms, now_ms = self._acquire(keys=call.keys, args=call.args)
        if int(wait_ms) > 0:
            return int(wait_ms) / 1000.0, None
        return 0.0, Ticket(model, call_id, tokens, int(now_ms))

    def settle(self, ticket: Ticket, tokens: int) -> None:
        """A call ended: stamp it with the end time and the tokens it really used.

        The window then holds each call at a time no earlier than when the provider saw it,
        whatever the delay between admission and sending (a first call's imports and TLS
        handshake can take longer than `MARGIN_S`).
        """
        call = SETTLE.call(
            keys=self._window(ticket.model),
            args={
                "member": ticket.call_id,
                "old_tokens": f"{ticket.call_id}:{ticket.tokens}",
                "new_tokens": f"{ticket.call_id}:{max(0, int(tokens))}",
            },
        )
        self._settle(keys=call.keys, args=call.args)

    def _window(self, model: str) -> dict[str, str]:
        """The sliding-window logs of one model: ACQUIRE's and SETTLE's KEYS."""
        return {"requests": self.keys.rate(model, "req"), "tokens": self.keys.rate(model, "tok")}

    def window_usage(self, model: str, window_s: float = WINDOW_S + MARGIN_S) -> tuple[int, int]:
        """(requests, tokens) currently in the window (for tests and diagnostics)."""
        now_s, now_us = self.client.time()
        cutoff = (now_s * 1000 + now_us // 1000) - window_s * 1000
        reqs = self.client.zcount(self.keys.rate(model, "req"), f"({cutoff}", "+inf")
        toks: list[bytes] = self.client.zrangebyscore(  # type: ignore[assignment]
            self.keys.rate(model, "tok"), f"({cutoff}", "+inf"
        )
        return int(reqs), sum(int(m.decode().rsplit(":", 1)[1]) for m in toks)

    # ---- spend and accounting -----------------------------------------------------------------

    def spent(self, day: str) -> float:
        """USD spent on the judge on a UTC day (all workers)."""
        raw = self.client.get(self.keys.spend(day))
        return float(raw) if raw is not None else 0.0

    def spent_by(self, app: str, day: str) -> float:
        """USD one app's events spent on the judge on a UTC day (all workers)."""
        raw = self.client.hget(self.keys.app_spend(day), app)
        return float(raw) if raw is not None else 0.0

    def spent_by_app(self, day: str) -> dict[str, float]:
        """USD each app's events spent on the judge on a UTC day (the apps that spent)."""
        raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.app_spend(day)))
        return {k.decode(): float(v) for k, v in raw.items()}

    def record_call(
        self,
        model: str,
        outcome: str,
        latency_s: float | None,
        day: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
    ) -> None:
        """Count one judge call: outcome, latency, tokens, cost and the day's spend, at once."""
        self.record_calls(
            [JudgeCall(model, outcome, latency_s, day, input_tokens, output_tokens, cost_usd)]
        )

    def record_calls(self, calls: Sequence[JudgeCall]) -> None:
        """Count judge calls in one round trip; the increments of a field are added up first
        (an event's 20 calls are a few dozen HINCRBYs, not 160 commands)."""
        if not calls:
            return
        counters = self.keys.counters
        ints: dict[tuple[str, str], int] = {}
        floats: dict[tuple[str, str], float] = {}
        spend: dict[str, float] = {}
        app_spend: dict[tuple[str, str], float] = {}
        day_keys: set[str] = set()

        def add(into: dict[tuple[str, str], _N], key: str, field: str, n: _N) -> None:
            into[key, field] = into.get((key, field), 0) + n

        for c in calls:
            add(ints, counters, field_name("judge_requests", c.model, c.outcome), 1)
            if c.latency_s is not None:
                field = field_name("judge_latency_seconds", c.model)
                bucket = bucket_index(JUDGE_LATENCY_BUCKETS, c.latency_s)
                add(ints, self.keys.hist, f"{field}{SEP}b{bucket}", 1)
                add(floats, self.keys.hist, f"{field}{SEP}sum", c.latency_s)
                add(ints, self.keys.hist, f"{field}{SEP}count", 1)
            day_counters = self.keys.day_counters(c.day)
            for kind, n in (("input", c.input_tokens), ("output", c.output_tokens)):
                if n:
                    field = field_name("judge_tokens", c.model, kind)
                    add(ints, counters, field, n)
                    add(ints, day_counters, field, n)
            if c.cost_usd > 0:
                field = field_name("judge_cost_usd", c.model)
                add(floats, counters, field, c.cost_usd)
                add(floats, day_counters, field, c.cost_usd)
                spend[c.day] = spend.get(c.day, 0.0) + c.cost_usd
                if c.app is not None:
                    app_spend[c.day, c.app] = app_spend.get((c.day, c.app), 0.0) + c.cost_usd
            if c.input_tokens or c.output_tokens or c.cost_usd > 0:
                day_keys.add(day_counters)
        with self.client.pipeline(transaction=False) as pipe:
            for (key, field), n in ints.items():
                pipe.hincrby(key, field, n)
            for (key, field), x in floats.items():
                pipe.hincrbyfloat(key, field, x)
            for day, usd in spend.items():
                pipe.incrbyfloat(self.keys.spend(day), usd)
                pipe.expire(self.keys.spend(day), SPEND_TTL_S)
            for (day, app), usd in app_spend.items():
                pipe.hincrbyfloat(self.keys.app_spend(day), app, usd)
                pipe.expire(self.keys.app_spend(day), SPEND_TTL_S)
            for key in day_keys:
                pipe.expire(key, DAY_TTL_S)
            pipe.execute()


@dataclass(frozen=True)
class JudgeCall:
    """One judge call to count (`JudgeState.record_calls`): its outcome, latency (None when it
    got no answer), UTC day, tokens and cost, and the app whose event it graded (None: no
    event's, e.g. the anchor set's re-judging)."""

    model: str
    outcome: str
    latency_s: float | None
    day: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    app: str | None = None


class Budget:
    """The daily judge budget (`RAGMON_DAILY_BUDGET_USD`, 0 = none), shared by all workers and
    read by the API's `ragmon_judge_budget_exhausted` gauge; and each app's own
    (`RAGMON_APP_DAILY_BUDGET_USD`, `app_usd(app)`, 0 = none), which only that app's events
    spend, so one app's spend never stops another's events short of the fleet's budget."""

    def __init__(
        self, state: JudgeState, daily_usd: float, app_usd: Callable[[str], float] | None = None
    ) -> None:
        self.state = state
        self.daily_usd = daily_usd
        self.app_usd = app_usd or (lambda app: 0.0)

    def exhausted(self, day: str | None = None) -> bool:
        if self.daily_usd <= 0:
            return False
        return self.state.spent(day or utc_today()) >= self.daily_usd

    def app_exhausted(self, app: str, day: str | None = None) -> float | None:
        """`app`'s own budget when its events spent it today, else None."""
        limit = self.app_usd(app)
        if limit <= 0 or self.state.spent_by(app, day or utc_today()) < limit:
            return None
        return limit
