"""Lua scripts: each makes one multi-key change atomic, so an event judged twice counts once.

Each names its KEYS and ARGV positions here, once, and reads them as `K.<name>` and `A.<name>`;
stored names come from its header too (`ragmon.store.protocol`).
"""

from __future__ import annotations

from ragmon.store.fields import Kind
from ragmon.store.ledger import LUA as LEDGER
from ragmon.store.ledger import Ledger
from ragmon.store.protocol import Script

INGEST_KINDS = (Kind.IDEM, Kind.TEXTS)  # what INGEST charges to the ledger
FINISH_KINDS = (Kind.RECORD,)  # FINISH's

# Helpers of the delivery path's scripts (`ragmon.store.delivery`): Redis' clock, the app of an
# event ref, a key template filled in (`Slot`), and `join`, which gives an app that starts
# having pending events its place in the turn order: the current virtual time (`Keys.virtual_time`),
# so it neither waits behind a backlog nor gets credit for its quiet hours.
_DELIVERY = """
local function now_s()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
local function app_of(ref) return string.sub(ref, 1, string.find(ref, SEP, 1, true) - 1) end
local function filled(template, slot, value)
  return (string.gsub(template, slot, function() return value end))
end
local function join(apps, vt, app)
  if not redis.call('ZSCORE', apps, app) then
    redis.call('ZADD', apps, redis.call('GET', vt) or '0', app)
  end
end
-- an app's failed set (`Keys.app_failed`) beside the fleet's `failed`
local function app_failed(failed, ref) return failed .. ':' .. app_of(ref) end
local function mark_failed(key, ref, result, reason, counters, failed, now)
  redis.call('HSET', key, F.status, S.failed, F.result, result)
  redis.call('HINCRBY', counters, N.events_failed .. SEP .. reason, 1)
  redis.call('ZADD', failed, now, ref)
  redis.call('ZADD', app_failed(failed, ref), now, ref)
end
"""

# The series budget (`ragmon.store.series`), shared by INGEST and FINISH (both name the keys
# `series`, `series_per_app` and `counters`): the series an event of `app` is counted in. An
# admitted series is seen `budget.now`; a new one is admitted while both the fleet's
# (`budget.total`) and its app's (`budget.per_app`) budgets have room, else folded: into
# `folded` when its app holds series, `orphan` when it holds none. `counts` (nil: none) names
# the two fold counters, each adding `n` when its fold is taken.
_ADMIT = """
local function admit(series, app, folded, orphan, budget, counts, n)
  if redis.call('ZSCORE', K.series, series) then
    redis.call('ZADD', K.series, budget.now, series)
    return series
  end
  local held = tonumber(redis.call('HGET', K.series_per_app, app) or '0')
  if held < budget.per_app and redis.call('ZCARD', K.series) < budget.total then
    redis.call('ZADD', K.series, budget.now, series)
    redis.call('HINCRBY', K.series_per_app, app, 1)
    return series
  end
  local into, counter = orphan, counts and counts[2]
  if held > 0 then into, counter = folded, counts and counts[1] end
  if counter then redis.call('HINCRBY', K.counters, counter, n) end
  return into
end
"""

# Merging the sums of groups counted in the same series and day (`_SUMS`, `_SUMS_WRITE`).
_MERGE = """
local function merge(merged, series, day, a)  -- into `merged`: {order = {at...}, [at] = ...}
  local at = series .. SEP .. day
  local into = merged[at]
  if not into then
    merged[at] = {series = series, day = day, a = a}
    merged.order[#merged.order + 1] = at
    return
  end
  into = into.a
  into.short, into.rep = into.short + a.short, into.rep + a.rep
  for _, q in ipairs(a.queries) do into.queries[#into.queries + 1] = q end
  for _, q in ipairs(a.empties) do into.empties[#into.empties + 1] = q end
  for si, buckets in pairs(a.b) do
    local to = into.b[si] or {}
    into.b[si] = to
    for b, c in pairs(buckets) do to[b] = (to[b] or 0) + c end
    into.s[si] = (into.s[si] or 0) + a.s[si]
    into.q[si] = (into.q[si] or 0) + a.q[si]
    into.c[si] = (into.c[si] or 0) + a.c[si]
  end
end
"""

# The retrieval signals of new events (`records.signal_record`), summed by INGEST and STAGE and
# written by INGEST and COMMIT, as named by the same arguments in every call of a deployment
# (`ingest.signal_setup`). A group's sums: its events' short results and repeated passages, their
# query hashes (`queries`; `empties` those whose signal `results`, by index, is 0) and per signal
# index its buckets' counts (`b`), sum (`s`), sum of squares (`q`) and count (`c`). `admitted`
# passes each group's series (group g: the series and UTC day at ARGV[at + 2g - 2], ARGV[at + 2g -
# 1]) through the series budget (`admit`: `max_series`, `max_series_per_app`; folded names from
# `fold_tail` and `orphan`; the fold counters are FINISH's, for judged events) and merges the groups
# counted in the same series and day, so a flood of new series writes its fold once. `flat` and
# `unflat` carry merged sums through Python as scalars (STAGE's reply, COMMIT's arguments).
_SUMS = """
local function new_sums()
  return {short = 0, rep = 0, queries = {}, empties = {}, b = {}, s = {}, q = {}, c = {}}
end
local function observe(sums, g, sig)
  local a = sums[g] or new_sums()
  sums[g] = a
  local short, rep, qh, rest = string.match(sig, '^(%d+) (%d+) (%S+)(.*)$')
  a.short = a.short + tonumber(short)
  a.rep = a.rep + tonumber(rep)
  a.queries[#a.queries + 1] = qh
  local i = 0
  for slot in string.gmatch(rest, '%S+') do  -- one per signal: `bucket:value`, or `-`
    i = i + 1
    local b, v = string.match(slot, '^(%d+):(%S+)$')
    if b then
      local x = tonumber(v)
      if i == tonumber(A.results) and x == 0 then a.empties[#a.empties + 1] = qh end
      local buckets = a.b[i] or {}
      a.b[i] = buckets
      buckets[b] = (buckets[b] or 0) + 1
      a.s[i] = (a.s[i] or 0) + x
      a.q[i] = (a.q[i] or 0) + x * x
      a.c[i] = (a.c[i] or 0) + 1
    end
  end
end
local function admitted(sums, n_groups, at, now)
  local merged = {order = {}}
  local budget = {total = tonumber(A.max_series), per_app = tonumber(A.max_series_per_app),
                  now = now}
  for g = 1, n_groups do
    if sums[g] then
      local sent, day = ARGV[at + 2 * (g - 1)], ARGV[at + 2 * g - 1]
      local app = app_of(sent)
      local series = admit(sent, app, app .. SEP .. A.fold_tail, A.orphan, budget, nil, 0)
      merge(merged, series, day, sums[g])
    end
  end
  return merged
end
local function flat(merged, out)  -- appended to `out`; read back by `unflat`
  local function put(...) for _, x in ipairs({...}) do out[#out + 1] = x end end
  for _, at in ipairs(merged.order) do
    local m, a = merged[at], merged[at].a
    put(m.series, m.day, a.short, a.rep, #a.queries, unpack(a.queries))
    put(#a.empties, unpack(a.empties))
    local signals = {}
    for si in pairs(a.b) do signals[#signals + 1] = si end
    put(#signals)
    for _, si in ipairs(signals) do
      local buckets = {}
      for b, c in pairs(a.b[si]) do buckets[#buckets + 1] = b; buckets[#buckets + 1] = c end
      put(si, string.format('%.17g', a.s[si]), string.format('%.17g', a.q[si]), a.c[si],
          #buckets / 2, unpack(buckets))
    end
  end
  return out
end
"""

# Writing merged sums (`_SUMS`) into the series: each signal's histogram (`hists`, by index;
# `squares` 1 to keep its sum of squares) into the lifetime and the day's histograms (`day_hist`,
# `SLOT.day` the day; kept `day_ttl` s), short results into the lifetime and the day's counters
# (`day_counters`, as `day_hist`), repeated passages into the counters, the queries' hashes into the
# day's HyperLogLog (`queries`, also with `SLOT.series`; kept `queries_ttl` s), and the empty
# results' into the day's `empty_queries` HyperLogLog (kept as `queries`):
# `signal_empty_queries` grows by its count's rise.
_SUMS_WRITE = """
local function unflat(r, merged)  -- ARGV[r..] as `flat` wrote them, into `merged` (`merge`)
  local function take() r = r + 1; return ARGV[r - 1] end
  while r <= #ARGV do
    local series, day = take(), take()
    local a = {short = tonumber(take()), rep = tonumber(take()), queries = {}, empties = {},
               b = {}, s = {}, q = {}, c = {}}
    for j = 1, tonumber(take()) do a.queries[j] = take() end
    for j = 1, tonumber(take()) do a.empties[j] = take() end
    for _ = 1, tonumber(take()) do
      local si = tonumber(take())
      a.s[si], a.q[si], a.c[si] = tonumber(take()), tonumber(take()), tonumber(take())
      a.b[si] = {}
      for _ = 1, tonumber(take()) do
        local b = take()
        a.b[si][b] = tonumber(take())
      end
    end
    merge(merged, series, day, a)
  end
end
local function write_sums(merged)
  for _, at in ipairs(merged.order) do
    local series, day, a = merged[at].series, merged[at].day, merged[at].a
    local day_hist = filled(A.day_hist, SLOT.day, day)
    for _, h in ipairs({K.hist, day_hist}) do
      for si, buckets in pairs(a.b) do
        local f = L.hists[si] .. SEP .. series .. SEP
        for b, c in pairs(buckets) do redis.call('HINCRBY', h, f .. H.bucket .. b, c) end
        redis.call('HINCRBYFLOAT', h, f .. H.sum, string.format('%.17g', a.s[si]))
        if tonumber(L.squares[si]) == 1 then
          redis.call('HINCRBYFLOAT', h, f .. H.sumsq, string.format('%.17g', a.q[si]))
        end
        redis.call('HINCRBY', h, f .. H.count, a.c[si])
      end
    end
    redis.call('EXPIRE', day_hist, A.day_ttl)
    if a.short > 0 then
      redis.call('HINCRBY', K.counters, N.signal_short .. SEP .. series, a.short)
      local day_counters = filled(A.day_counters, SLOT.day, day)
      redis.call('HINCRBY', day_counters, N.signal_short .. SEP .. series, a.short)
      redis.call('EXPIRE', day_counters, A.day_ttl)
    end
    if a.rep > 0 then
      redis.call('HINCRBY', K.counters, N.passages_duplicate .. SEP .. series, a.rep)
    end
    if #a.empties > 0 then
      local eq = filled(filled(A.empty_queries, SLOT.day, day), SLOT.series, series)
      local before = redis.call('PFCOUNT', eq)
      redis.call('PFADD', eq, unpack(a.empties))
      local new_empty = redis.call('PFCOUNT', eq) - before
      if new_empty > 0 then
        redis.call('HINCRBY', K.counters, N.signal_empty_queries .. SEP .. series, new_empty)
      end
      redis.call('EXPIRE', eq, A.queries_ttl)
    end
    if #a.queries > 0 then
      local queries = filled(filled(A.queries, SLOT.day, day), SLOT.series, series)
      redis.call('PFADD', queries, unpack(a.queries))
      redis.call('EXPIRE', queries, A.queries_ttl)
    end
  end
end
"""

# An event's hash as INGEST and STAGE write it, kept `ttl` s (`idem_ttl` when sampled out: no
# payload kept, its result instead: its inclusion probability, all GET shows of it); returns the
# ledger kind its bytes are charged to.
_PUT = """
local function put_event(key, body, status, received, ttl, idem_ttl)
  if status == S.sampled_out then
    redis.call('HSET', key, F.status, status, F.received, received, F.result, body)
    redis.call('EXPIRE', key, tonumber(idem_ttl))
    return LG.idem
  end
  redis.call('HSET', key, F.payload, body, F.status, status, F.received, received)
  redis.call('EXPIRE', key, tonumber(ttl))
  return LG.texts
end
"""

# What INGEST and COMMIT do for the events they create: `totals()` keeps them; `created` counts
# one, its bytes (`LG.idem` for a sampled-out one, else `LG.texts`) and, when its slot `s` > 0, its
# place in that app's pending set; `over` names an app of `adding` already holding `limit` pending
# events (its request is refused whole); `enter` adds the events to judge, one ZADD per app;
# `settle` writes the counts and the ledger and returns 1 when the caller must enqueue a drain job
# (none waits: `Keys.drain_wanted` was absent), else 0. `late`: the deadline (unix seconds, 0:
# none) is when the API stops waiting and answers 503: a write that reaches Redis later (a stalled
# Redis catching up) is refused whole, so a client that retries after the 503 is never counted
# twice.
_CREATE = """
local function totals()
  return {received = 0, sampled = 0, added = false, adding = {},
          charges = {[LG.idem] = {}, [LG.texts] = {}}}
end
local function created(t, ref, kind, s, nbytes, now)
  local app = app_of(ref)
  t.charges[kind][app] = (t.charges[kind][app] or 0) + nbytes
  t.received = t.received + 1
  if kind == LG.idem then t.sampled = t.sampled + 1 end
  if s > 0 then
    local members = t.adding[s]
    members[#members + 1] = now
    members[#members + 1] = ref
  end
end
local function over(adding, pending, app_at)
  for s in pairs(adding) do
    if redis.call('ZCARD', pending(s)) >= tonumber(A.limit) then return app_at(s) end
  end
  return nil
end
local function enter(t, pending, app_at)
  for s, members in pairs(t.adding) do
    if #members > 0 then
      redis.call('ZADD', pending(s), unpack(members))
      join(K.apps, K.vt, app_at(s))
      t.added = true
    end
  end
  t.adding = {}
end
local function settle(t, now)
  if t.received > 0 then redis.call('HINCRBY', K.counters, N.events_received, t.received) end
  if t.sampled > 0 then redis.call('HINCRBY', K.counters, N.events_sampled_out, t.sampled) end
  for app, bytes in pairs(t.charges[LG.idem]) do
    charge(LG.idem, K.lg_idem, K.lg_idem_rate, A.lg_idem_ttl, A.lg_idem_rate_ttl, K.lg_since,
           app, bytes, now)
  end
  for app, bytes in pairs(t.charges[LG.texts]) do
    charge(LG.texts, K.lg_texts, K.lg_texts_rate, A.lg_texts_ttl, A.lg_texts_rate_ttl,
           K.lg_since, app, bytes, now)
  end
  if t.added and redis.call('SET', K.wake, 1, 'NX', 'EX', tonumber(A.wake_ttl)) then return 1 end
  return 0
end
local function late(now)
  if tonumber(A.deadline) > 0 and now > tonumber(A.deadline) then
    return redis.error_reply('DEADLINE the API has already answered 503 for this write')
  end
end
"""

# INGEST, STAGE and COMMIT's named positions: creating events, summing signals, writing them.
CREATE_KEYS = ("counters", "apps", "vt", "wake", *Ledger.script_keys(INGEST_KINDS))
CREATE_ARGS = ("ttl", "idem_ttl", "deadline", "limit", "wake_ttl",
               *Ledger.script_args(INGEST_KINDS))  # fmt: skip
SUM_KEYS = ("series", "series_per_app", "counters")
SUM_ARGS = ("results", "max_series", "max_series_per_app", "fold_tail", "orphan")
WRITE_KEYS = ("hist", "counters")
WRITE_ARGS = ("day_hist", "day_counters", "queries", "day_ttl", "queries_ttl", "empty_queries")


def _names(*parts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for part in parts for x in part))


# Store the new events of a micro-batch of requests, put the ones to judge into their apps' pending
# sets, and add every new event's retrieval signals to its series, in the write that answers 202
# (`ragmon.store.ingest`). KEYS tail: the `n_events` event keys, then the pending keys of the apps
# they name. ARGV tail: per event its ref, payload (`put_event`), status, received_at, slot (which
# of those pending keys, from 1; 0: sampled out, never judged), group (which of the groups below,
# from 1; 0: none), signals (`records.signal_record`) and the bytes its key takes; then the app of
# each pending key; then the `n_groups` groups, each a series and a UTC day; then per request its
# event count (requests are consecutive runs of events). A request is refused whole when one of
# the apps it adds events to already holds `limit` pending events. Returns per event 1 (created),
# its stored status (the id existed) or {-2, app} (its request was refused: that app is at its
# limit); then `settle`'s 1 or 0.
INGEST = Script(
    "INGEST",
    _names(CREATE_KEYS, SUM_KEYS, WRITE_KEYS),
    _names(CREATE_ARGS, SUM_ARGS, WRITE_ARGS, ("n_events", "n_groups")),
    _DELIVERY + _ADMIT + LEDGER + _MERGE + _SUMS + _SUMS_WRITE + _PUT + _CREATE
    + """
local now = now_s()
local refused = late(now)
if refused then return refused end
local n = tonumber(A.n_events)
local function event(i) return KEYS[KEYS_REST + i - 1] end
local function arg(i, field) return ARGV[ARGV_REST + 8 * (i - 1) + field] end
local function pending(s) return KEYS[KEYS_REST + n + s - 1] end
local apps_at = ARGV_REST + 8 * n
local function app_at(s) return ARGV[apps_at + s - 1] end
local groups_at = apps_at + #KEYS - KEYS_REST + 1 - n
local sums, t, out, i = {}, totals(), {}, 1
for r = groups_at + 2 * tonumber(A.n_groups), #ARGV do
  local last = i + tonumber(ARGV[r]) - 1
  for j = i, last do
    local stored = redis.call('HGET', event(j), F.status)
    if stored then
      out[j] = stored
    else
      out[j] = 1
      local s = tonumber(arg(j, 4))
      if s > 0 then t.adding[s] = {} end
    end
  end
  local app = over(t.adding, pending, app_at)
  for j = i, last do
    if app then
      out[j] = {-2, app}
    elseif out[j] == 1 then
      local kind = put_event(event(j), arg(j, 1), arg(j, 2), arg(j, 3), A.ttl, A.idem_ttl)
      created(t, arg(j, 0), kind, tonumber(arg(j, 4)), tonumber(arg(j, 7)), now)
      local g = tonumber(arg(j, 5))
      if g > 0 then observe(sums, g, arg(j, 6)) end
    end
  end
  if app then t.adding = {} else enter(t, pending, app_at) end
  i = last + 1
end
write_sums(admitted(sums, tonumber(A.n_groups), groups_at, now))
out[n + 1] = settle(t, now)
return out
""",
    lists=("hists", "squares"),
)  # fmt: skip

# A large request is written in short calls (`ragmon.store.staged`), so that no other request waits
# for one long script: STAGE puts a chunk of its new events into keys of its own, kept `stage_ttl`
# s, and sums their signals; COMMIT then makes them all events at once, or none. STAGE's KEYS
# tail: per event its key and its staged key; ARGV tail: per event its payload, status,
# received_at, group and signals (as INGEST's), then the `n_groups` groups. It admits the groups'
# series (the budget holds them as if seen) and returns per event 1 (staged) or its stored status
# (the id exists), then its sums (`flat`).
STAGE = Script(
    "STAGE",
    SUM_KEYS,
    _names(SUM_ARGS, ("stage_ttl", "n_events", "n_groups")),
    _DELIVERY + _ADMIT + _MERGE + _SUMS + _PUT
    + """
local now = now_s()
local n = tonumber(A.n_events)
local function arg(i, field) return ARGV[ARGV_REST + 5 * (i - 1) + field] end
local sums, out = {}, {}
for j = 1, n do
  local stored = redis.call('HGET', KEYS[KEYS_REST + 2 * j - 2], F.status)
  if stored then
    out[j] = stored
  else
    out[j] = 1
    put_event(KEYS[KEYS_REST + 2 * j - 1], arg(j, 0), arg(j, 1), arg(j, 2), A.stage_ttl,
              A.stage_ttl)
    local g = tonumber(arg(j, 3))
    if g > 0 then observe(sums, g, arg(j, 4)) end
  end
end
return flat(admitted(sums, tonumber(A.n_groups), ARGV_REST + 5 * n, now), out)
""",
)  # fmt: skip

# COMMIT: the staged events of one request become events (renamed to their keys, kept `ttl` s,
# `idem_ttl` when sampled out), in their apps' pending sets and counts, their sums in their series,
# in one short call. KEYS tail: per event its key and its staged key, then the pending keys of the
# apps they name; ARGV tail: per event its ref, slot and bytes (as INGEST's), then the app of each
# pending key, then STAGE's sums. Refused whole, writing nothing: past the deadline (`late`), with
# {-2, app} when an app is at its limit, and with a STAGED error when an event was stored meanwhile
# or a staged one is gone. Returns {1, `settle`'s 1 or 0}.
COMMIT = Script(
    "COMMIT",
    _names(CREATE_KEYS, WRITE_KEYS),
    _names(CREATE_ARGS, WRITE_ARGS, ("n_events",)),
    _DELIVERY + LEDGER + _MERGE + _SUMS_WRITE + _CREATE
    + """
local now = now_s()
local refused = late(now)
if refused then return refused end
local n = tonumber(A.n_events)
local events, staged = {}, {}
for j = 1, n do events[j], staged[j] = KEYS[KEYS_REST + 2 * j - 2], KEYS[KEYS_REST + 2 * j - 1] end
if redis.call('EXISTS', unpack(events)) > 0 then
  return redis.error_reply('STAGED an event of this write was stored by another meanwhile')
end
if redis.call('EXISTS', unpack(staged)) < n then
  return redis.error_reply('STAGED a staged event of this write is gone (expired or evicted)')
end
local function arg(i, field) return ARGV[ARGV_REST + 3 * (i - 1) + field] end
local function pending(s) return KEYS[KEYS_REST + 2 * n + s - 1] end
local apps_at = ARGV_REST + 3 * n
local function app_at(s) return ARGV[apps_at + s - 1] end
local t = totals()
for j = 1, n do
  local s = tonumber(arg(j, 1))
  if s > 0 then t.adding[s] = {} end
end
local app = over(t.adding, pending, app_at)
if app then return {-2, app} end
for j = 1, n do
  local s, kind, ttl = tonumber(arg(j, 1)), LG.texts, A.ttl
  if s == 0 then kind, ttl = LG.idem, A.idem_ttl end
  redis.call('RENAME', staged[j], events[j])
  redis.call('EXPIRE', events[j], tonumber(ttl))
  created(t, arg(j, 0), kind, s, tonumber(arg(j, 2)), now)
end
enter(t, pending, app_at)
local merged = {order = {}}
unflat(apps_at + #KEYS - KEYS_REST + 1 - 2 * n, merged)
write_sums(merged)
return {1, settle(t, now)}
""",
    lists=("hists", "squares"),
)  # fmt: skip

# A drain job takes up to `limit` events (`Delivery.claim`). First, every lease that ended
# (its work horse died) puts its event back into its app's pending set, or, after
# `max_attempts` claims, marks it failed (reason `died`, result `died_result`). Then, one event
# at a time, the app with the lowest pass among those with an event due gives its oldest due
# event, and its pass grows by 1 / its share (`shares`: pairs app, share; 1 when absent):
# stride scheduling. Each
# event taken is leased until now + `lease_s` and its attempts counted; an event no longer
# queued (expired, done) is dropped from pending. Returns {left, lease_end, refs...}: left is
# 1 when due events remain after this claim.
CLAIM = Script(
    "CLAIM",
    ("leased", "apps", "vt", "counters", "failed"),
    (
        "limit",
        "lease_s",
        "max_attempts",
        "event_key",
        "pending_key",
        "died",
        "died_result",
    ),
    _DELIVERY
    + """
local now = now_s()
local shares = {}
for i = 1, #L.shares, 2 do shares[L.shares[i]] = L.shares[i + 1] end
local max_attempts = tonumber(A.max_attempts)
local function ev(ref) return filled(A.event_key, SLOT.ref, ref) end
local function pending(app) return filled(A.pending_key, SLOT.app, app) end
local ended = redis.call('ZRANGEBYSCORE', K.leased, '-inf', now, 'LIMIT', 0, 1000)
for _, ref in ipairs(ended) do
  redis.call('ZREM', K.leased, ref)
  local key = ev(ref)
  if redis.call('HGET', key, F.status) == S.queued then
    local attempts = tonumber(redis.call('HGET', key, F.attempts) or '0')
    if attempts >= max_attempts then
      mark_failed(key, ref, A.died_result, A.died, K.counters, K.failed, now)
    else
      redis.call('ZADD', pending(app_of(ref)), now, ref)
      join(K.apps, K.vt, app_of(ref))
    end
  end
end
local vt = tonumber(redis.call('GET', K.vt) or '0')
local listed = redis.call('ZRANGE', K.apps, 0, -1, 'WITHSCORES')
local apps = {}
for a = 1, #listed, 2 do
  apps[#apps + 1] = {name = listed[a], pass = tonumber(listed[a + 1]), key = pending(listed[a])}
end
local function head(app)
  local first = redis.call('ZRANGE', app.key, 0, 0, 'WITHSCORES')
  if #first == 0 then
    app.empty = true
    app.due = false
  else
    app.ref = first[1]
    app.due = tonumber(first[2]) <= now
  end
end
for _, app in ipairs(apps) do head(app) end
local lease_end = string.format('%.17g', now + tonumber(A.lease_s))
local out = {0, lease_end}
local limit = tonumber(A.limit)
while #out - 2 < limit do
  local best = nil
  for _, app in ipairs(apps) do
    if app.due and (best == nil or math.max(app.pass, vt) < math.max(best.pass, vt)) then
      best = app
    end
  end
  if best == nil then break end
  local ref = best.ref
  redis.call('ZREM', best.key, ref)
  local key = ev(ref)
  if redis.call('HGET', key, F.status) == S.queued then
    best.pass = math.max(best.pass, vt)
    vt = best.pass
    best.pass = best.pass + 1 / tonumber(shares[best.name] or 1)
    best.moved = true
    redis.call('HINCRBY', key, F.attempts, 1)
    redis.call('ZADD', K.leased, lease_end, ref)
    out[#out + 1] = ref
  end
  head(best)
end
for _, app in ipairs(apps) do
  if app.empty then
    redis.call('ZREM', K.apps, app.name)
  elseif app.moved then
    redis.call('ZADD', K.apps, string.format('%.17g', app.pass), app.name)
  end
  if app.due then out[1] = 1 end
end
redis.call('SET', K.vt, string.format('%.17g', vt))
return out
""",
    lists=("shares",),
)

# A passing judge failure (timeout, 429, 5xx, connection) of a leased event (`Delivery.retry`):
# only while the caller's lease (`lease_end`) still holds it, the event goes back to its app's
# pending set, due after `delays[attempts]` seconds (a list), with the error kept for GET;
# past the last delay it is marked failed with `result` and `reason`.
# Returns 1 (back in pending), 2 (failed), 0 (not this caller's any more).
RETRY = Script(
    "RETRY",
    ("event", "leased", "pending", "apps", "vt", "counters", "failed"),
    ("ref", "app", "lease_end", "error", "result", "reason"),
    _DELIVERY
    + """
local held = redis.call('ZSCORE', K.leased, A.ref)
if not held or tonumber(held) ~= tonumber(A.lease_end) then return 0 end
redis.call('ZREM', K.leased, A.ref)
if redis.call('HGET', K.event, F.status) ~= S.queued then return 0 end
local now = now_s()
local attempts = tonumber(redis.call('HGET', K.event, F.attempts) or '0')
redis.call('HSET', K.event, F.error, A.error)
if attempts > #L.delays then
  mark_failed(K.event, A.ref, A.result, A.reason, K.counters, K.failed, now)
  return 2
end
redis.call('ZADD', K.pending, now + tonumber(L.delays[attempts]), A.ref)
join(K.apps, K.vt, A.app)
return 1
""",
    lists=("delays",),
)

# Put the failed events of ARGV's tail back into their apps' pending sets, due now
# (`Delivery.requeue`): a `failed` event becomes queued again (its attempts start over); a
# queued one is added unless a drain job leases it; a gone one (expired) leaves the failed set.
# Returns how many were added.
PENDING = Script(
    "PENDING",
    ("apps", "vt", "leased", "failed"),
    ("event_key", "pending_key"),
    _DELIVERY
    + """
local now = now_s()
local refs = {}
for i = ARGV_REST, #ARGV do refs[#refs + 1] = ARGV[i] end
local added = 0
for _, ref in ipairs(refs) do
  local key = filled(A.event_key, SLOT.ref, ref)
  local st = redis.call('HGET', key, F.status)
  if not st then
    redis.call('ZREM', K.failed, ref)
    redis.call('ZREM', app_failed(K.failed, ref), ref)
  elseif st == S.failed then
    redis.call('HSET', key, F.status, S.queued)
    redis.call('HDEL', key, F.attempts)
    redis.call('ZREM', K.failed, ref)
    redis.call('ZREM', app_failed(K.failed, ref), ref)
    st = S.queued
  end
  if st == S.queued and not redis.call('ZSCORE', K.leased, ref) then
    local app = app_of(ref)
    added = added + redis.call('ZADD', filled(A.pending_key, SLOT.app, app), 'NX', now, ref)
    join(K.apps, K.vt, app)
  end
end
return added
""",
)

# Mark one event done and record its observations, once (`ragmon.store.finish`).
# `series` is the event's series; past the series budget (`admit`) it is counted in `folded`
# (its app holds series) or `orphan` (it holds none), adding 1 to `folded_count` or
# `orphan_count` (`keys.fold`); the budget is `max_series` and `max_series_per_app`, seen
# `now`. `series_counts`: a list of triples name, reason, n; each adds n to
# `name|<series>[|reason]` in counters. ARGV tail: `n_obs`
# triples (name, bucket, value), each adding to the bucket, the sum, the sum of squares (for the
# variance the alerts need) and the count; then the grades (one per graded passage).
# `day_events` is the app's list of per-day records (trimmed to its newest `day_keep`),
# `day_apps` the day's apps.
# `weight`: what one observation counts for in the quality histograms, 1 / the event's
# inclusion probability with RAGMON_SAMPLING=planned (docs/sampling.md), else 1; its square is
# added to the series' `retrieval_weight_squares` counter (the alerts' effective events).
# Keeps the series it was counted in (after folding) in the event for EXPLORE_INDEX.
# With `text_ttl` > 0 the stored payload moves to `texts`, kept `text_ttl` s, and `payload`
# (the compact one, `records.without_texts`) takes its place in the record; `record_bytes`, what
# the record, its per-day record and its explorer entries take, is charged to the ledger.
# Returns 1 when recorded, 0 when the event was already done (or is unknown).
# Exactly once: Redis does not undo a script's writes when it fails half-way, so every check
# that can fail comes before the first write (a key of another type: an error, the event left
# to its lease), and the weighted fields only take HINCRBYFLOAT (HINCRBY fails on a field a
# weight made fractional: the event was then done with its histograms missing).
FINISH = Script(
    "FINISH",
    ("event", "hist", "day_hist", "counters", "day_counters", "series", "day_events", "failed",
     "leased", "pending", "day_apps", "app_failed", "series_per_app", "texts",
     *Ledger.script_keys(FINISH_KINDS)),
    ("result", "ttl", "app", "series", "folded", "folded_count", "orphan", "orphan_count",
     "max_series", "max_series_per_app", "now", "day_record", "day_keep", "payload", "lag",
     "lag_bucket", "k", "ref", "n_obs", "weight", "text_ttl", "record_bytes",
     *Ledger.script_args(FINISH_KINDS)),
    _ADMIT
    + LEDGER
    + """
local TYPES = {event = 'hash', hist = 'hash', day_hist = 'hash', counters = 'hash',
  day_counters = 'hash', series = 'zset', day_events = 'list', failed = 'zset', leased = 'zset',
  pending = 'zset', day_apps = 'set', app_failed = 'zset', series_per_app = 'hash',
  texts = 'string', lg_record = 'hash', lg_record_rate = 'hash', lg_since = 'hash'}
for name, want in pairs(TYPES) do
  local got = redis.call('TYPE', K[name]).ok
  if got ~= 'none' and got ~= want then
    return redis.error_reply('WRONGTYPE FINISH ' .. K[name] .. ' ' .. got)
  end
end
redis.call('ZREM', K.leased, A.ref)
redis.call('ZREM', K.pending, A.ref)
local st = redis.call('HGET', K.event, F.status)
if st ~= S.queued and st ~= S.failed then return 0 end
local budget = {total = tonumber(A.max_series), per_app = tonumber(A.max_series_per_app),
                now = A.now}
local series = admit(A.series, A.app, A.folded, A.orphan, budget,
                     {A.folded_count, A.orphan_count}, 1)
redis.call('HSET', K.event, F.status, S.done, F.result, A.result, F.series, series)
if tonumber(A.text_ttl) > 0 then  -- the texts leave the record: kept `text_ttl` s apart
  local full = redis.call('HGET', K.event, F.payload)
  if full then redis.call('SET', K.texts, full, 'EX', tonumber(A.text_ttl)) end
end
if A.payload ~= '' then redis.call('HSET', K.event, F.payload, A.payload) end
redis.call('EXPIRE', K.event, tonumber(A.ttl))
charge(LG.record, K.lg_record, K.lg_record_rate, A.lg_record_ttl, A.lg_record_rate_ttl,
       K.lg_since, A.app, tonumber(A.record_bytes), tonumber(redis.call('TIME')[1]))
for c = 1, #L.series_counts, 3 do
  local field = L.series_counts[c] .. SEP .. series
  if L.series_counts[c + 1] ~= '' then field = field .. SEP .. L.series_counts[c + 1] end
  redis.call('HINCRBY', K.counters, field, L.series_counts[c + 2])
end
local j = ARGV_REST
local w = tonumber(A.weight)
for _ = 1, tonumber(A.n_obs) do
  local field = ARGV[j] .. SEP .. series .. SEP
  local y = tonumber(ARGV[j + 2])
  for _, h in ipairs({K.hist, K.day_hist}) do
    redis.call('HINCRBYFLOAT', h, field .. H.bucket .. ARGV[j + 1], A.weight)
    redis.call('HINCRBYFLOAT', h, field .. H.sum, string.format('%.17g', w * y))
    redis.call('HINCRBYFLOAT', h, field .. H.sumsq, string.format('%.17g', w * y * y))
    redis.call('HINCRBYFLOAT', h, field .. H.count, A.weight)
  end
  j = j + 3
end
local lag = N.labeling_lag .. SEP
redis.call('HINCRBY', K.hist, lag .. H.bucket .. A.lag_bucket, 1)
redis.call('HINCRBYFLOAT', K.hist, lag .. H.sum, A.lag)
redis.call('HINCRBY', K.hist, lag .. H.count, 1)
redis.call('HINCRBY', K.counters, N.events_labeled, 1)
redis.call('HINCRBYFLOAT', K.counters, N.retrieval_weight_squares .. SEP .. series,
           string.format('%.17g', w * w))
redis.call('HINCRBY', K.day_counters, N.events .. SEP .. series, 1)
redis.call('HINCRBY', K.day_counters, N.k_sum .. SEP .. series, tonumber(A.k))
for g = j, #ARGV do
  redis.call('HINCRBY', K.counters, N.grades .. SEP .. ARGV[g], 1)
  redis.call('HINCRBY', K.day_counters, N.grades .. SEP .. series .. SEP .. ARGV[g], 1)
end
redis.call('RPUSH', K.day_events, A.day_record)
redis.call('LTRIM', K.day_events, -tonumber(A.day_keep), -1)
redis.call('SADD', K.day_apps, A.app)
redis.call('ZREM', K.failed, A.ref)
redis.call('ZREM', K.app_failed, A.ref)
return 1
""",
    lists=("series_counts",),
)  # fmt: skip

# Mark one queued event failed, once (a lasting judge failure); it leaves leased and pending.
FAIL = Script(
    "FAIL",
    ("event", "counters", "failed", "leased", "pending"),
    ("result", "reason", "now", "ref"),
    _DELIVERY
    + """
redis.call('ZREM', K.leased, A.ref)
redis.call('ZREM', K.pending, A.ref)
if redis.call('HGET', K.event, F.status) ~= S.queued then return 0 end
mark_failed(K.event, A.ref, A.result, A.reason, K.counters, K.failed, tonumber(A.now))
return 1
""",
)

# Free admitted series: their budget slots and their lifetime histogram fields.
# ARGV tail: `n_fields` pairs (name, part) of a series' fields (`retrieval_ndcg`, `b0` ...),
# then per series: the series and its app. Returns how many were freed.
FREE_SERIES = Script(
    "FREE_SERIES",
    ("series", "series_per_app", "hist"),
    ("n_fields",),
    """
local last_field = ARGV_REST + 2 * tonumber(A.n_fields) - 1
local freed = 0
for s = last_field + 1, #ARGV, 2 do
  local series, app = ARGV[s], ARGV[s + 1]
  if redis.call('ZREM', K.series, series) == 1 then
    freed = freed + 1
    if redis.call('HINCRBY', K.series_per_app, app, -1) <= 0 then
      redis.call('HDEL', K.series_per_app, app)
    end
    for i = ARGV_REST, last_field, 2 do
      redis.call('HDEL', K.hist, ARGV[i] .. SEP .. series .. SEP .. ARGV[i + 1])
    end
  end
end
return freed
""",
)

# The event explorer's index (`ragmon.store.event_index`). Both scripts: `indexed` the indexed
# series zset, `traces` the trace hash; key templates by time, by measure, of records and by
# expiry, where `SLOT.series` stands for the series and `SLOT.measure` for the measure; `now`.
_EXPLORE_KEYS = ("indexed", "traces")
_EXPLORE_ARGS = ("time_key", "measure_key", "records_key", "expiry_key", "app_key", "now")
_EXPLORE = """
local function key(template, series, measure)
  local k = string.gsub(template, SLOT.series, function() return series end)
  if measure then k = string.gsub(k, SLOT.measure, function() return measure end) end
  return k
end
local function app_of(series)
  return string.sub(series, 1, string.find(series, SEP, 1, true) - 1)
end
local now = tonumber(A.now)
"""

# The overview's summary of one series (`summary_key`, a hash: `h` the unix hour H it was made
# for, `r|<field>` the sums of the 23 complete hours before H, `b|<field>` of the 168 before
# those), shared by EXPLORE_INDEX and SUMMARIZE, which write it, and OVERVIEW, which only reads
# it. `fields`: a list of `<measure>|<part>` (`parts` per measure, the count first);
# `hour_key` the hourly sums' key template (`SLOT.series`, `SLOT.hour`). `current` gives a
# series' sums for hour H: from its summary moved an hour at a time when made for at most two
# hours before or after H (three reads an hour; the hourly sums keep 2 hours past the windows
# for this), else, with `make`, from the 191 hourly sums (else nil: not made).
_SUMMARY_ARGS = ("hour_key", "summary_key", "parts")
_SUMMARY = """
local fields = L.fields
local function series_key(template, series)
  return (string.gsub(template, SLOT.series, function() return series end))
end
local function hour_raw(series, h)  -- as stored, in `fields` order (false where absent)
  local hk = string.gsub(series_key(A.hour_key, series), SLOT.hour, string.format('%d', h))
  return redis.call('HMGET', hk, unpack(fields))
end
local function hour_sums(series, h)
  local raw = hour_raw(series, h)
  local out = {}
  for i = 1, #fields do out[i] = tonumber(raw[i]) or 0 end
  return out
end
local function add(into, from, sign)
  for i = 1, #fields do into[i] = into[i] + sign * from[i] end
end
local function zeros()
  local z = {}
  for i = 1, #fields do z[i] = 0 end
  return z
end
local summed = {OV.hour}  -- the summary's fields: its hour, the recent sums, the before sums
for _, f in ipairs(fields) do summed[#summed + 1] = OV.recent .. SEP .. f end
for _, f in ipairs(fields) do summed[#summed + 1] = OV.before .. SEP .. f end
local function stored_raw(series)  -- as stored, in `summed` order (false where absent)
  return redis.call('HMGET', series_key(A.summary_key, series), unpack(summed))
end
local function stored(series, raw)  -- the hour it was made for (-1: none), recent, before
  raw = raw or stored_raw(series)
  local n = #fields
  local recent, before = {}, {}
  for i = 1, n do
    recent[i] = tonumber(raw[1 + i]) or 0
    before[i] = tonumber(raw[1 + n + i]) or 0
  end
  return tonumber(raw[1]) or -1, recent, before
end
local function current(series, H, make, raw)  -- `raw`: `stored_raw` if already read
  local at, recent, before = stored(series, raw)
  if at >= 0 and math.abs(H - at) <= 2 then
    for g = at, H - 1 do  -- forward: hour g joins the recent window, g - 23 moves, g - 191 leaves
      local moving = hour_sums(series, g - 23)
      add(recent, hour_sums(series, g), 1)
      add(recent, moving, -1)
      add(before, moving, 1)
      add(before, hour_sums(series, g - 191), -1)
    end
    for g = at - 1, H, -1 do  -- backward (a clock behind the writer's): the same undone
      local moving = hour_sums(series, g - 23)
      add(recent, hour_sums(series, g), -1)
      add(recent, moving, 1)
      add(before, moving, -1)
      add(before, hour_sums(series, g - 191), 1)
    end
    return at, recent, before
  end
  if not make then return at, nil, nil end
  recent, before = zeros(), zeros()
  for h = H - 191, H - 1 do
    if h > H - 24 then add(recent, hour_sums(series, h), 1)
    else add(before, hour_sums(series, h), 1) end
  end
  return at, recent, before
end
local function bring(series, H, ttl)  -- the summary made for hour H; 1 when it changed
  local at, recent, before = current(series, H, true)
  if at == H then return 0 end
  local parts = tonumber(A.parts)  -- sums per measure, the count first
  for i = 1, #fields, parts do  -- counts are whole: no rounding left where nothing is
    for _, w in ipairs({recent, before}) do
      if w[i] < 0.5 then
        for j = i, i + parts - 1 do w[j] = 0 end
      end
    end
  end
  local set = {OV.hour, string.format('%d', H)}
  for i, f in ipairs(fields) do
    set[#set + 1] = OV.recent .. SEP .. f
    set[#set + 1] = string.format('%.17g', recent[i])
    set[#set + 1] = OV.before .. SEP .. f
    set[#set + 1] = string.format('%.17g', before[i])
  end
  local skey = series_key(A.summary_key, series)
  redis.call('HSET', skey, unpack(set))
  redis.call('EXPIRE', skey, ttl)
  return 1
end
"""

# Index one event the explorer lists, once: runs after FINISH in the same transaction and only
# for an event FINISH has just made done (its series set, not yet indexed). `record`: its
# record (`index_members.record`), `time_member` and `sortable` (pairs measure, member) its
# index members (`index_members.index_members`), `expires` its expiry, all stored as given;
# `trace_field` its trace hash field ('' for none) and `trace` the pointer stored there,
# `SLOT.series` standing for the series. `hour` the unix hour of the event, `hour_key`'s
# `SLOT.hour`, and `hour_ttl` its TTL; `hourly`: pairs (measure, value) added to that hour's
# count, sum and sum of squares, and to the series' overview summary, first brought to the hour
# of `now` (`bring`), when the event's hour is one of its complete hours; each value weighs
# `weight` (1 / the event's inclusion probability with planned sampling, else 1): count + 1,
# sum + w y, squares + w y^2, and when w is not 1 the weights' excess w - 1 and w^2 - 1
# (`HourPart`: an hour written before weights reads as all weights 1).
# An event of an app folded into the all-`other` series (`orphan`: past the fleet's series
# cap) is indexed under its app's own folded series (its app, then `fold_tail`), so the app
# stays in the explorer. The series is listed in `indexed` and in its app's `app_key` set.
# Members are `<time>|<ref>` and `<value>|<time>|<ref>`, all scored 0 (read by lex order).
# Returns {1, series, 1 when the series holds expired events (the caller trims them), else 0},
# or {0} when not indexed (already, or FINISH did not record it).
EXPLORE_INDEX = Script(
    "EXPLORE_INDEX",
    (*_EXPLORE_KEYS, "event"),
    (
        *_EXPLORE_ARGS,
        *_SUMMARY_ARGS,
        "record",
        "time_member",
        "hour",
        "expires",
        "trace_field",
        "trace",
        "ref",
        "hour_ttl",
        "orphan",
        "fold_tail",
        "weight",
    ),
    _EXPLORE
    + _SUMMARY
    + """
local series = redis.call('HGET', K.event, F.series)
if not series or redis.call('HSETNX', K.event, F.indexed, 1) == 0 then return {0} end
local ref = A.ref
local app = app_of(ref)
if series == A.orphan and app ~= app_of(A.orphan) then series = app .. SEP .. A.fold_tail end
redis.call('HSET', key(A.records_key, series), ref, A.record)
redis.call('ZADD', key(A.time_key, series), 0, A.time_member)
for i = 1, #L.sortable, 2 do
  redis.call('ZADD', key(A.measure_key, series, L.sortable[i]), 0, L.sortable[i + 1])
end
redis.call('ZADD', key(A.expiry_key, series), A.expires, ref)
redis.call('ZADD', K.indexed, now, series)
redis.call('ZADD', key(A.app_key, app_of(series)), now, series)
if A.trace_field ~= '' then
  local pointer = string.gsub(A.trace, SLOT.series, function() return series end, 1)
  redis.call('HSET', K.traces, A.trace_field, pointer)
end
local H = math.floor(now / 3600)
local skey = series_key(A.summary_key, series)
if tonumber(redis.call('HGET', skey, OV.hour)) ~= H then
  bring(series, H, tonumber(A.hour_ttl))  -- before this event is in its hour's sums
end
local hour = A.hour
local hkey = string.gsub(key(A.hour_key, series), SLOT.hour, hour)
local w = tonumber(A.weight)  -- 1 / inclusion probability: Hajek's means of the hour
local function weigh(hash, f, count)
  return function(v)
    count(hash, f .. HOUR.count)
    redis.call('HINCRBYFLOAT', hash, f .. HOUR.sum, string.format('%.17g', w * v))
    redis.call('HINCRBYFLOAT', hash, f .. HOUR.sumsq, string.format('%.17g', w * v * v))
    if w ~= 1 then
      redis.call('HINCRBYFLOAT', hash, f .. HOUR.weight_excess, string.format('%.17g', w - 1))
      redis.call('HINCRBYFLOAT', hash, f .. HOUR.weight2_excess, string.format('%.17g', w * w - 1))
    end
  end
end
local function one(hash, f) redis.call('HINCRBY', hash, f, 1) end
local function one_float(hash, f) redis.call('HINCRBYFLOAT', hash, f, 1) end
local hourly = L.hourly
for i = 1, #hourly, 2 do weigh(hkey, hourly[i] .. SEP, one)(tonumber(hourly[i + 1])) end
redis.call('EXPIRE', hkey, tonumber(A.hour_ttl))
local h = tonumber(hour)
if h < H and h > H - 192 then  -- an hour the summary holds: add to it
  local part = OV.before
  if h > H - 24 then part = OV.recent end
  for i = 1, #hourly, 2 do
    weigh(skey, part .. SEP .. hourly[i] .. SEP, one_float)(tonumber(hourly[i + 1]))
  end
end
local expired = 0
if #redis.call('ZRANGEBYSCORE', key(A.expiry_key, series), '-inf', now, 'LIMIT', 0, 1) > 0 then
  expired = 1
end
return {1, series, expired}
""",
    lists=("fields", "sortable", "hourly"),
)

# Bring the overview summaries of `n_series` series (ARGV tail) to `hour` (`bring`): the
# workers' maintenance runs it over every indexed series once an hour, so that pages only read
# them. Returns how many summaries changed.
SUMMARIZE = Script(
    "SUMMARIZE",
    (),
    (*_SUMMARY_ARGS, "hour", "hour_ttl"),
    _SUMMARY
    + """
local H, ttl, changed = tonumber(A.hour), tonumber(A.hour_ttl), 0
for j = ARGV_REST, #ARGV do changed = changed + bring(ARGV[j], H, ttl) end
return changed
""",
    lists=("fields",),
)

# The explorer's overview of the series in the ARGV tail, reading only: per series one string,
# `<events> <made> <recent sums...> <before sums...> <this hour's sums...>` (each in `fields`
# order): how many events its index holds, then its summary's sums of the 23 complete hours
# before `hour` and of the 168 before those, and the live sums of `hour`. A summary made for
# `hour` is passed on as stored (no number is parsed or formatted: the common case); one made
# for up to two hours before or after it is moved in memory (`current`); `made` 0 (and no
# sums) when the summary is missing or further from `hour` (SUMMARIZE makes it, never a page).
OVERVIEW = Script(
    "OVERVIEW",
    (),
    (*_SUMMARY_ARGS, "time_key", "hour"),
    _SUMMARY
    + """
local H, n = tonumber(A.hour), #fields
local out = {}
for j = ARGV_REST, #ARGV do
  local series = ARGV[j]
  local line = {redis.call('ZCARD', series_key(A.time_key, series)), 1}
  local raw = stored_raw(series)
  if tonumber(raw[1]) == H then
    for i = 2, 2 * n + 1 do line[#line + 1] = raw[i] or '0' end
  else
    local _, recent, before = current(series, H, false, raw)
    if recent then
      for i = 1, n do line[#line + 1] = string.format('%.17g', recent[i]) end
      for i = 1, n do line[#line + 1] = string.format('%.17g', before[i]) end
    else
      line[2] = 0
    end
  end
  if line[2] == 1 then
    local live = hour_raw(series, H)
    for i = 1, n do line[#line + 1] = live[i] or '0' end
  end
  out[#out + 1] = table.concat(line, ' ')
end
return out
""",
    lists=("fields",),
)

# Drop expired events of `series` from its index, as read and decoded by the caller
# (`ExploreIndex.trim_series`): `refs` leave the records and the expiry set, `time_members`
# the time index, `measure_members` (pairs measure, member) the measures' indexes, and each of
# `traces` (pairs field, pointer) leaves the trace hash while it still holds that pointer. A
# series left with no event leaves `indexed` and its app's set. Returns how many refs.
EXPLORE_TRIM = Script(
    "EXPLORE_TRIM",
    _EXPLORE_KEYS,
    (*_EXPLORE_ARGS, "series"),
    _EXPLORE
    + """
local series = A.series
local expiry = key(A.expiry_key, series)
for _, ref in ipairs(L.refs) do
  redis.call('HDEL', key(A.records_key, series), ref)
  redis.call('ZREM', expiry, ref)
end
for _, member in ipairs(L.time_members) do
  redis.call('ZREM', key(A.time_key, series), member)
end
local mm = L.measure_members
for i = 1, #mm, 2 do redis.call('ZREM', key(A.measure_key, series, mm[i]), mm[i + 1]) end
for i = 1, #L.traces, 2 do
  if redis.call('HGET', K.traces, L.traces[i]) == L.traces[i + 1] then
    redis.call('HDEL', K.traces, L.traces[i])
  end
end
if redis.call('ZCARD', expiry) == 0 then
  redis.call('ZREM', K.indexed, series)
  redis.call('ZREM', key(A.app_key, app_of(series)), series)
end
return #L.refs
""",
    lists=("refs", "time_members", "measure_members", "traces"),
)

ALL = (INGEST, STAGE, COMMIT, CLAIM, RETRY, PENDING, FINISH, FAIL, FREE_SERIES, EXPLORE_INDEX,
       EXPLORE_TRIM, SUMMARIZE, OVERVIEW)  # fmt: skip

# Store people's grades (`POST /v1/grades`), each once per (event, passage, reviewer), within
# the bytes each app's grades may add now (its room): a request that would pass it is refused.
# KEYS tail: per grade, its event's grades hash, its app's set of graded events and its event's
# texts hash. ARGV tail: per grade, its field in the grades hash, the record (stored as given),
# the record the caller read in that field ('' for none), 1 when that one has the same grade and
# note (`human.same`) else 0, the event ref, the app, the app's room, then the query's and the
# passage's text fields and texts ('' for a text another grade of the request carries). A grade
# whose stored twin has the same grade and note changes nothing (0); a new one is stored (1), a
# changed one replaces it (2). Refused whole with {-2} when a field no longer holds what the
# caller read (another write came between: the caller reads again). What it adds (fields,
# records, texts not held yet, `overhead` bytes each) is charged to the ledger's `grades` class. Any
# change bumps `generation`, which the derived statistics (agreement, estimates) are cached by.
# Refused whole: {-1, app, bytes it would add} past an app's room; an error past `deadline` (unix
# seconds, 0: none), when the API has already answered 503.
HUMAN_GRADES_KINDS = (Kind.GRADES,)
HUMAN_GRADES = Script(
    "HUMAN_GRADES",
    ("generation", "apps", *Ledger.script_keys(HUMAN_GRADES_KINDS)),
    ("ttl", "now", "overhead", "deadline", *Ledger.script_args(HUMAN_GRADES_KINDS)),
    LEDGER
    + """
local ttl, over, now = tonumber(A.ttl), tonumber(A.overhead), tonumber(A.now)
local deadline = tonumber(A.deadline)
if deadline > 0 and tonumber(redis.call('TIME')[1]) > deadline then
  return redis.error_reply('DEADLINE the API has already answered 503 for this write')
end
local W = 11
local n = (#KEYS - KEYS_REST + 1) / 3
local function key(i, j) return KEYS[KEYS_REST + 3 * (i - 1) + j] end
local function arg(i, j) return ARGV[ARGV_REST + W * (i - 1) + j] end
local out, adds, rooms = {}, {}, {}
for i = 1, n do
  local field, app = arg(i, 0), arg(i, 5)
  local state, add = 1, #field + #arg(i, 1) + over
  local old = redis.call('HGET', key(i, 0), field)
  if (old or '') ~= arg(i, 2) then return {-2} end
  if old then
    if tonumber(arg(i, 3)) == 1 then state, add = 0, 0
    else state, add = 2, math.max(0, #arg(i, 1) - #old) end
  end
  for t = 7, 9, 2 do
    if arg(i, t + 1) ~= '' and redis.call('HEXISTS', key(i, 2), arg(i, t)) == 0 then
      add = add + #arg(i, t) + #arg(i, t + 1) + over
    end
  end
  out[i] = state
  adds[app] = (adds[app] or 0) + add
  rooms[app] = tonumber(arg(i, 6))
end
for app, add in pairs(adds) do
  if add > rooms[app] then return {-1, app, add} end
end
local changed = false
for i = 1, n do
  if out[i] > 0 then
    redis.call('HSET', key(i, 0), arg(i, 0), arg(i, 1))
    redis.call('ZADD', key(i, 1), now, arg(i, 4))
    redis.call('SADD', K.apps, arg(i, 5))
    redis.call('EXPIRE', key(i, 0), ttl)
    redis.call('EXPIRE', key(i, 1), ttl)
    changed = true
  end
  for t = 7, 9, 2 do
    if arg(i, t + 1) ~= '' then redis.call('HSETNX', key(i, 2), arg(i, t), arg(i, t + 1)) end
  end
  if out[i] > 0 or arg(i, 8) ~= '' or arg(i, 10) ~= '' then
    redis.call('EXPIRE', key(i, 2), ttl)
  end
end
for app, add in pairs(adds) do
  charge(LG.grades, K.lg_grades, K.lg_grades_rate, A.lg_grades_ttl, A.lg_grades_rate_ttl,
         K.lg_since, app, add, now)
end
if changed then redis.call('INCR', K.generation) end
return out
""",
)

# The pooled ideal of one query (`ragmon.store.pool`): merge this event's grades into the best
# grade seen per passage, drop entries not seen for the TTL, bound the pool, and answer it.
# Fields: passage text hashes; values `<grade> <unix seconds last seen>`. ARGV tail: pairs
# (text hash, grade). Returns the pool as it is after the merge, before the bound:
# {hash, grade, hash, grade ...}.
POOL = Script(
    "POOL",
    ("pool",),
    ("ttl", "now", "cap"),
    """
local ttl, now, cap = tonumber(A.ttl), tonumber(A.now), tonumber(A.cap)
local best, seen = {}, {}
local cur = redis.call('HGETALL', K.pool)
for i = 1, #cur, 2 do
  local g, t = string.match(cur[i + 1], '^(%d+) (%d+)$')
  if g and now - tonumber(t) < ttl then
    best[cur[i]], seen[cur[i]] = tonumber(g), tonumber(t)
  else
    redis.call('HDEL', K.pool, cur[i])
  end
end
for i = ARGV_REST, #ARGV, 2 do
  local h, g = ARGV[i], tonumber(ARGV[i + 1])
  if best[h] == nil or g > best[h] then best[h] = g end
  seen[h] = now
  redis.call('HSET', K.pool, h, best[h] .. ' ' .. now)
end
local out, rows = {}, {}
for h, g in pairs(best) do
  out[#out + 1] = h
  out[#out + 1] = g
  rows[#rows + 1] = {h, g, seen[h]}
end
if #rows > cap then  -- the lowest grades go first, the longest unseen among them
  table.sort(rows, function(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[3] < b[3]
  end)
  for i = 1, #rows - cap do redis.call('HDEL', K.pool, rows[i][1]) end
end
if #rows > 0 then redis.call('EXPIRE', K.pool, ttl) end
return out
""",
)
