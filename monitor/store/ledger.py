"""One accounting of the bytes each app holds in Redis, by class, that every writer charges in
the same pipeline or script as its write (docs/reliability.md "What is stored where").

Each class (`Kind`) is kept for a retention window (`windows`): a charge of n bytes at time t
is held until t + window. Charges go into time buckets a twelfth of the window wide
(`Keys.ledger`, a hash app → bytes; a window of minutes gets buckets of seconds, one of days
buckets of hours, so neither is over-counted by more than a bucket), and, for windows longer
than `RATE_SPAN_S`, also into buckets a twelfth of that span (the current rate). So:

- `held`: what an app holds now, the buckets of the last window (the oldest bucket counted
  for the part of it not yet expired, as if its charges were spread evenly);
- `forecast`: what it will hold once every window is full at today's rates: per class, the
  bytes charged over the last `min(window, RATE_SPAN_S)` (or since the class' first charge,
  `Keys.ledger_since`) per second, times the window. A class without a window (kept until
  deleted) forecasts what it holds.

Writers: `charge` adds to a pipeline (sync or asyncio; a MULTI makes it one step with the
write); a Lua script declares `script_keys(kinds)` / `script_args(kinds)` in its KEYS and ARGV,
fills them with `slots(kinds, now)`, and runs `LUA`'s `charge`. Readers:
`reads(now)` lists the keys to HGETALL and `reading(rows, now)` reads them (`Ledger.read`
does both on a sync client).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ragmon.core.wire import SEP
from ragmon.store.fields import Kind
from ragmon.store.records import text_of

if TYPE_CHECKING:
    import redis

    from ragmon.settings import Settings
    from ragmon.store.keys import Keys

BUCKETS = 12  # buckets per window (held) and per rate span (rate)
RATE_SPAN_S = 86_400.0  # the rate a forecast extrapolates: the last day's (a daily cycle)
DAY_S = 86_400.0
# People's grades outlive their events (the anchor set, a year of weekly estimates): kept this
# long after their last change (`ragmon.store.human`).
GRADES_KEPT_S = 400 * DAY_S
PACE_TTL_S = 180  # the pacing's counts of an interval: read in it and in the next one
MIB = 1024 * 1024  # the unit of RAGMON_APP_STORAGE_MB and of the messages


def share_bytes(settings: Settings, app: str) -> float:
    """`app`'s share of Redis in bytes (RAGMON_APP_STORAGE_MB; 0: none)."""
    limits = settings.app_storage_mb
    return limits.get(app, limits.get("*", 0.0)) * MIB


def windows(settings: Settings) -> dict[Kind, float | None]:
    """Each class' retention window in seconds (None: kept until deleted)."""
    result = settings.result_ttl_days * DAY_S
    return {
        Kind.IDEM: float(settings.idempotency_s),
        Kind.TEXTS: min(settings.text_ttl_days, settings.result_ttl_days) * DAY_S,
        Kind.RECORD: result,
        Kind.GRADES: GRADES_KEPT_S,
        Kind.ANCHORS: None,
        Kind.SAMPLING: 50 * 3600.0,  # the planner's hourly traffic (`sampling_state`)
        Kind.PACE: float(PACE_TTL_S),  # a pacing field lives at most this long (`pace`)
        Kind.ESTIMATES: None,  # credited when replaced or forgotten (`estimate_summaries`)
        Kind.HOLD: None,  # charged when a span is held, credited when it is decided
    }


@dataclass(frozen=True)
class Slot:
    """Where one class' charges at one time go: its held and rate bucket keys with their TTLs
    (the same key twice when the window is no longer than `RATE_SPAN_S`)."""

    held: str
    held_ttl: int
    rate: str
    rate_ttl: int


@dataclass
class Reading:
    """The ledger at one time: per app and class the bytes held and the forecast steady state."""

    held: dict[str, dict[Kind, float]] = field(default_factory=dict)
    forecast: dict[str, dict[Kind, float]] = field(default_factory=dict)

    def held_by(self, app: str) -> float:
        return sum(self.held.get(app, {}).values())

    def forecast_by(self, app: str) -> float:
        return sum(self.forecast.get(app, {}).values())

    @property
    def held_total(self) -> float:
        return sum(self.held_by(a) for a in self.held)

    @property
    def forecast_total(self) -> float:
        return sum(self.forecast_by(a) for a in self.forecast)


KEY_OVERHEAD = 160  # bytes of a key besides its name and value: entries, object, expiry
FIELD_OVERHEAD = 64  # bytes a hash field costs besides its name and value


def allocated(n: int) -> int:
    """The bytes the allocator gives a block of `n` (jemalloc's classes: four per doubling)."""
    if n <= 16:
        return 16
    step = 1 << max(3, (n - 1).bit_length() - 3)
    return -(-n // step) * step


def entry_bytes(key: str, *values: str | bytes) -> int:
    """What a key holding `values` (a string, or a small hash's fields and values) takes."""
    return KEY_OVERHEAD + allocated(len(key) + sum(len(v) + 2 for v in values))


@dataclass
class Memory:
    """Redis' memory beside the ledger: `used`, `maxmemory` (0: none), its eviction policy,
    and the steady state forecast: what Redis holds now, plus per class what each app will
    hold once its windows are full at today's rates, less what it holds now."""

    used: int
    maxmemory: int
    policy: str
    reading: Reading

    @property
    def forecast(self) -> float:
        return max(0.0, self.used + self.reading.forecast_total - self.reading.held_total)

    @property
    def evicting(self) -> bool:
        """Whether Redis may drop ragmon's keys at maxmemory (accepted events lost)."""
        return self.policy != "noeviction"

    def warning(self) -> str | None:
        """The start-up warning of the API and the workers, or None."""
        if self.evicting:
            return (
                f"Redis' maxmemory-policy is {self.policy}: at maxmemory it would drop ragmon's "
                "keys, losing accepted events; set maxmemory-policy noeviction (ragmon then "
                "answers 507 near the limit, RAGMON_MEMORY_HIGH)"
            )
        if self.maxmemory and self.forecast > self.maxmemory:
            return (
                f"Redis' maxmemory {self.maxmemory / MIB:.0f} MB is below the forecast steady "
                f"state {self.forecast / MIB:.0f} MB at today's rates and retention windows: "
                "raise maxmemory or shorten RAGMON_TEXT_TTL_DAYS / RAGMON_RESULT_TTL_DAYS "
                "(docs/reliability.md); near it new events get 507"
            )
        return None


def _width(span: float) -> float:
    return max(1.0, span / BUCKETS)


class Ledger:
    """The per-app byte accounting of one deployment (`keys`' prefix)."""

    def __init__(self, client: redis.Redis | None, keys: Keys, settings: Settings) -> None:
        self.client = client
        self.keys = keys
        self.windows = windows(settings)

    # ---- writing ------------------------------------------------------------------------

    def slot(self, kind: Kind, now: float) -> Slot:
        window = self.windows[kind]
        if window is None:
            key = self.keys.ledger(kind, 0, 0)
            return Slot(key, 0, key, 0)
        w = _width(window)
        held = self.keys.ledger(kind, int(w), int(now // w))
        held_ttl = math.ceil(window + 2 * w)
        span = min(window, RATE_SPAN_S)
        if span == window:
            return Slot(held, held_ttl, held, held_ttl)
        r = _width(span)
        return Slot(held, held_ttl, self.keys.ledger(kind, int(r), int(now // r)),
                    math.ceil(span + 2 * r))  # fmt: skip

    def charge(self, pipe: Any, app: str, kind: Kind, nbytes: int, now: float) -> None:
        """Add `nbytes` held by `app` in class `kind` to a pipeline (a MULTI with the write)."""
        if nbytes == 0:
            return
        s = self.slot(kind, now)
        for key, ttl in {s.held: s.held_ttl, s.rate: s.rate_ttl}.items():
            pipe.hincrby(key, app, nbytes)
            if ttl:
                pipe.expire(key, ttl)
        pipe.hsetnx(self.keys.ledger_since, f"{kind}{SEP}{app}", int(now))

    @staticmethod
    def script_keys(kinds: Iterable[Kind]) -> tuple[str, ...]:
        """The KEYS names a script that charges `kinds` declares (with `script_args`)."""
        return ("lg_since", *(f"lg_{k}{part}" for k in kinds for part in ("", "_rate")))

    @staticmethod
    def script_args(kinds: Iterable[Kind]) -> tuple[str, ...]:
        return tuple(f"lg_{k}{part}_ttl" for k in kinds for part in ("", "_rate"))

    def slots(self, kinds: Iterable[Kind], now: float) -> tuple[dict[str, str], dict[str, int]]:
        """The KEYS and ARGV of `script_keys(kinds)` and `script_args(kinds)` at `now`."""
        keys = {"lg_since": self.keys.ledger_since}
        args = {}
        for k in kinds:
            s = self.slot(k, now)
            keys[f"lg_{k}"], keys[f"lg_{k}_rate"] = s.held, s.rate
            args[f"lg_{k}_ttl"], args[f"lg_{k}_rate_ttl"] = s.held_ttl, s.rate_ttl
        return keys, args

    # ---- reading ------------------------------------------------------------------------

    def reads(self, now: float) -> list[str]:
        """The keys `reading` needs, in order: per class its held buckets, then its rate
        buckets (when apart), then `Keys.ledger_since`."""
        out = []
        for kind, window in self.windows.items():
            if window is None:
                out.append(self.keys.ledger(kind, 0, 0))
                continue
            for span in self._spans(window):
                w = _width(span)
                c = int(now // w)
                out += [self.keys.ledger(kind, int(w), i) for i in range(c - BUCKETS, c + 1)]
        out.append(self.keys.ledger_since)
        return out

    def _spans(self, window: float) -> list[float]:
        span = min(window, RATE_SPAN_S)
        return [window] if span == window else [window, span]

    def reading(self, rows: Sequence[Mapping[Any, Any]], now: float) -> Reading:
        """The ledger from the HGETALL replies of `reads(now)`."""
        since = {text_of(k): float(v) for k, v in rows[-1].items()}
        out = Reading()
        at = 0
        for kind, window in self.windows.items():
            if window is None:
                for app, n in _apps(rows[at]).items():
                    out.held.setdefault(app, {})[kind] = n
                    out.forecast.setdefault(app, {})[kind] = n
                at += 1
                continue
            spans = self._spans(window)
            per_span = []
            for span in spans:
                w = _width(span)
                part = rows[at : at + BUCKETS + 1]
                at += BUCKETS + 1
                gone = (now % w) / w  # of the oldest bucket, the share already expired
                held: dict[str, float] = {}
                for i, row in enumerate(part):
                    for app, n in _apps(row).items():
                        held[app] = held.get(app, 0.0) + (n * (1 - gone) if i == 0 else n)
                charged = {a: sum(_apps(r).get(a, 0.0) for r in part) for a in held}
                start = (int(now // w) - BUCKETS) * w
                per_span.append((span, held, charged, start))
            for app, n in per_span[0][1].items():
                out.held.setdefault(app, {})[kind] = n
            span, _, charged, start = per_span[-1]
            for app, n in charged.items():
                first = since.get(f"{kind}{SEP}{app}", start)
                covered = max(1.0, now - max(start, first), _width(span) / 4)
                out.forecast.setdefault(app, {})[kind] = n / covered * window
        return out

    def memory(self, now: float) -> Memory:
        """Redis' memory and the ledger's forecast (one pipeline and two INFO/CONFIG reads)."""
        assert self.client is not None
        info = self.client.info("memory")
        return Memory(int(info.get("used_memory", 0)), int(info.get("maxmemory", 0)),
                      str(info.get("maxmemory_policy", "noeviction")), self.read(now))  # fmt: skip

    def read(self, now: float) -> Reading:
        """The ledger now, from Redis (one pipeline)."""
        assert self.client is not None
        with self.client.pipeline(transaction=False) as pipe:
            for key in self.reads(now):
                pipe.hgetall(key)
            rows = cast(list[dict[bytes, bytes]], pipe.execute())
        return self.reading(rows, now)


def _apps(row: Mapping[Any, Any]) -> dict[str, float]:
    return {text_of(k): float(v) for k, v in row.items()}


# The Lua side of `Ledger.charge`, for a script that declares `Ledger.script_keys(kinds)` and
# `Ledger.script_args(kinds)`: `charge(LG.<kind>, K.lg_<kind>, K.lg_<kind>_rate,
# A.lg_<kind>_ttl, A.lg_<kind>_rate_ttl, K.lg_since, app, n, now)`.
LUA = """
local function charge(kind, held, rate, held_ttl, rate_ttl, since, app, n, now)
  if n == 0 then return end
  redis.call('HINCRBY', held, app, n)
  if tonumber(held_ttl) > 0 then redis.call('EXPIRE', held, tonumber(held_ttl)) end
  if rate ~= held then
    redis.call('HINCRBY', rate, app, n)
    redis.call('EXPIRE', rate, tonumber(rate_ttl))
  end
  redis.call('HSETNX', since, kind .. SEP .. app, math.floor(now))
end
"""
