"""OTLP retriever spans held for their parent span, per app in Redis (`ragmon.api.holds` says
why and decides what becomes of them).

Per app (`Keys.hold`): a hash of the held spans (`b:<span>`: what to store once decided,
`w:<span>`: the span it waits for, `n`: the bytes held), `|due` (span → when its hold ends, or
its lease while it is being stored), `|w` (members `<awaited><span>`, both 48 hex characters,
so a prefix range finds a span's waiters) and `|seen` (retriever spans, and spans inside one,
seen within the hold: a child that arrives after its parent is decided at once). `Keys.holds`
names the apps by their first due time, for the sweep. Every change is one script call, so a
held span is decided once: a decided span leaves `|w` before anything is returned for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from ragmon.store.fields import Kind
from ragmon.store.ledger import LUA as LEDGER
from ragmon.store.ledger import Ledger
from ragmon.store.protocol import Script

if TYPE_CHECKING:
    import redis

    from ragmon.settings import Settings
    from ragmon.store.keys import Keys

HOLD_KINDS = (Kind.HOLD,)
NESTED, ROOT = "n", "r"  # an arrival's code; else the 48 hex characters of what it waits for
MAX_SPANS = 5_000  # held per app; past it (or `MAX_BYTES`) a span is stored at once: `full`
MAX_BYTES = 32 * 1024 * 1024
ENTRY_BYTES = 200  # what a held span takes besides its blob: fields, members, overhead
LEASE_S = 60  # a decided span's lease: not stored by then, the sweep claims it again
KEY_TTL_S = 86_400  # renewed by every write; the sweep decides every span long before
CLAIM = 1_000  # expired spans one call claims

_HELPERS = """
local now, out = tonumber(A.now), {}
local function put(...) for _, v in ipairs({...}) do table.insert(out, v) end end
local function entry(child, n) return n + 2 * #child + tonumber(A.entry) end
local function credit(n)
  redis.call('HINCRBY', K.held, 'n', -n)
  charge(LG.hold, K.lg_hold, K.lg_hold_rate, A.lg_hold_ttl, A.lg_hold_rate_ttl, K.lg_since,
         A.app, -n, now)
end
local function first_due()
  local first = redis.call('ZRANGE', K.due, 0, 0, 'WITHSCORES')
  if first[2] then redis.call('ZADD', K.apps, first[2], A.app)
  else redis.call('ZREM', K.apps, A.app) end
end
"""

# One export's part for one app, then the app's due spans: the export's spans arrive (`arrivals`
# pairs of span and code: NESTED, a retriever or inside one; ROOT, no retriever above it; else the
# span its ancestry waits for), deciding the held spans that wait for them; then its retriever
# spans whose parent is elsewhere are held (`n_holds` triples of span, awaited, blob), or decided
# at once (`again`: held already; `nested`/`own`: its parent was seen; `full`); then up to `claim`
# spans past their hold are claimed (`expired`). A decided span to store is leased (`LEASE_S`) and
# returned with its blob; `Holds.done` removes it once stored. Returns triples (span, outcome,
# blob or '').
ADMIT = Script(
    "HOLD_ADMIT",
    ("held", "due", "waits", "seen", "apps", *Ledger.script_keys(HOLD_KINDS)),
    ("app", "now", "hold_s", "lease_s", "max_spans", "max_bytes", "entry", "ttl", "skip",
     "n_arrivals", "claim", *Ledger.script_args(HOLD_KINDS)),
    LEDGER + _HELPERS + """
local skip, lease = A.skip == '1', tonumber(A.lease_s)
local function decide(child, outcome)
  redis.call('HDEL', K.held, 'w:' .. child)
  if outcome == 'nested' then
    credit(entry(child, redis.call('HSTRLEN', K.held, 'b:' .. child)))
    redis.call('HDEL', K.held, 'b:' .. child)
    redis.call('ZREM', K.due, child)
    put(child, outcome, '')
  else
    redis.call('ZADD', K.due, now + lease, child)
    put(child, outcome, redis.call('HGET', K.held, 'b:' .. child))
  end
end
local under = skip and 'nested' or 'own'
local waiting = redis.call('EXISTS', K.waits) == 1
local n_arrivals = tonumber(A.n_arrivals)
for i = ARGV_REST, ARGV_REST + 2 * n_arrivals - 1, 2 do
  local span, code = ARGV[i], ARGV[i + 1]
  if code == 'n' then redis.call('ZADD', K.seen, now, span) end
  if waiting then
    for _, m in ipairs(redis.call('ZRANGEBYLEX', K.waits, '[' .. span, '(' .. span .. 'g')) do
      local child = string.sub(m, #span + 1)
      redis.call('ZREM', K.waits, m)
      if code == 'n' then decide(child, under)
      elseif code == 'r' then decide(child, 'released')
      else
        redis.call('ZADD', K.waits, 0, code .. child)
        redis.call('HSET', K.held, 'w:' .. child, code)
      end
    end
  end
end
redis.call('ZREMRANGEBYSCORE', K.seen, '-inf', now - tonumber(A.hold_s))
local extra = redis.call('ZCARD', K.seen) - tonumber(A.max_spans)
if extra > 0 then redis.call('ZREMRANGEBYRANK', K.seen, 0, extra - 1) end
local count = redis.call('ZCARD', K.due)
local bytes = tonumber(redis.call('HGET', K.held, 'n') or '0')
for i = ARGV_REST + 2 * n_arrivals, #ARGV, 3 do
  local child, awaits, blob = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local n = entry(child, #blob)
  if redis.call('HEXISTS', K.held, 'b:' .. child) == 1 then put(child, 'again', '')
  elseif redis.call('ZSCORE', K.seen, awaits) then put(child, under, '')
  elseif count >= tonumber(A.max_spans) or bytes + n > tonumber(A.max_bytes) then
    put(child, 'full', '')
  else
    redis.call('HSET', K.held, 'b:' .. child, blob, 'w:' .. child, awaits)
    redis.call('ZADD', K.due, now + tonumber(A.hold_s), child)
    redis.call('ZADD', K.waits, 0, awaits .. child)
    credit(-n)
    count, bytes = count + 1, bytes + n
    put(child, 'held', '')
  end
end
for _, child in ipairs(redis.call('ZRANGEBYSCORE', K.due, '-inf', now, 'LIMIT', 0, A.claim)) do
  local w = redis.call('HGET', K.held, 'w:' .. child)
  if w then redis.call('ZREM', K.waits, w .. child) end
  decide(child, 'expired')
end
first_due()
for _, key in ipairs({K.held, K.due, K.waits, K.seen}) do redis.call('EXPIRE', key, A.ttl) end
return out
""",
)  # fmt: skip

# Held spans stored (the tail: their ids): removed, their bytes credited.
DONE = Script(
    "HOLD_DONE",
    ("held", "due", "waits", "apps", *Ledger.script_keys(HOLD_KINDS)),
    ("app", "now", "entry", *Ledger.script_args(HOLD_KINDS)),
    LEDGER
    + _HELPERS
    + """
for i = ARGV_REST, #ARGV do
  local child = ARGV[i]
  local n = redis.call('HSTRLEN', K.held, 'b:' .. child)
  if n > 0 then
    local w = redis.call('HGET', K.held, 'w:' .. child)
    if w then redis.call('ZREM', K.waits, w .. child) end
    redis.call('HDEL', K.held, 'b:' .. child, 'w:' .. child)
    redis.call('ZREM', K.due, child)
    credit(entry(child, n))
  end
end
first_due()
return 0
""",
)


class Holds:
    """The held spans of every app."""

    def __init__(self, client: redis.Redis, keys: Keys, ledger: Ledger, settings: Settings):
        self.client = client
        self.keys = keys
        self.ledger = ledger
        self.settings = settings
        self._admit = client.register_script(ADMIT.source)
        self._done = client.register_script(DONE.source)

    def _keys(self, app: str, now: float) -> tuple[dict[str, str], dict[str, object]]:
        k, a = self.ledger.slots(HOLD_KINDS, now)
        hold = self.keys.hold
        keys = {"held": hold(app), "due": hold(app, "due"), "waits": hold(app, "w"),
                "seen": hold(app, "seen"), "apps": self.keys.holds, **k}  # fmt: skip
        args = {"app": app, "now": now, "entry": ENTRY_BYTES, **a}
        return keys, args

    def admit(
        self,
        app: str,
        arrivals: Sequence[tuple[str, str]] = (),
        spans: Sequence[tuple[str, str, str]] = (),
        now: float | None = None,
    ) -> list[tuple[str, str, str]]:
        """An export's arrivals and spans to hold for `app`, then its due spans claimed:
        `(span, outcome, blob)` per span decided or held (`ADMIT`)."""
        now = time.time() if now is None else now
        keys, args = self._keys(app, now)
        args |= {"hold_s": self.settings.otlp_hold_s, "lease_s": LEASE_S,
                 "max_spans": MAX_SPANS, "max_bytes": MAX_BYTES, "ttl": KEY_TTL_S,
                 "skip": int(self.settings.otlp_nested == "skip"),
                 "n_arrivals": len(arrivals), "claim": CLAIM}  # fmt: skip
        tail = [x for pair in arrivals for x in pair] + [x for t in spans for x in t]
        call = ADMIT.call(keys, args, more_args=tail)
        raw = cast(list[bytes], self._admit(keys=call.keys, args=call.args))
        text = [x.decode() for x in raw]
        return list(zip(text[::3], text[1::3], text[2::3], strict=True))

    def done(self, app: str, spans: Sequence[str], now: float | None = None) -> None:
        """Held spans stored: they leave the hold."""
        if not spans:
            return
        keys, args = self._keys(app, time.time() if now is None else now)
        keys.pop("seen")
        call = DONE.call(keys, args, more_args=spans)
        self._done(keys=call.keys, args=call.args)

    def due_apps(self, now: float | None = None) -> list[str]:
        """The apps with a span past its hold (or its lease)."""
        now = time.time() if now is None else now
        raw = cast(list[bytes], self.client.zrangebyscore(self.keys.holds, "-inf", now))
        return [x.decode() for x in raw]
