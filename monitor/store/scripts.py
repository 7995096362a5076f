"""Lua scripts: each makes one multi-key change atomic, so a retried job never counts twice.

Each names its KEYS and ARGV positions here, once, and reads them as `K.<name>` and `A.<name>`;
stored names come from its header too (`ragmon.store.protocol`).
"""

from __future__ import annotations

from ragmon.store.protocol import Script

# Shared by INGEST and INGEST_JOBS: `create(i)` writes event i and counts it.
# KEYS tail: the event keys. ARGV tail: per event, payload, status, received_at.
# The deadline (unix seconds, 0: none) is when the API stops waiting and answers 503: a write
# that reaches Redis later (a stalled Redis catching up) is refused whole, so a client that
# retries after the 503 is never counted twice.
_CREATE_KEYS = ("counters",)
_CREATE_ARGS = ("ttl", "deadline")
_CREATE = """
local n = #KEYS - KEYS_REST + 1
local ttl = tonumber(A.ttl)
local deadline = tonumber(A.deadline)
if deadline > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) + tonumber(t[2]) / 1e6 > deadline then
    return redis.error_reply('DEADLINE the API has already answered 503 for this write')
  end
end
local out = {}
local function event(i) return KEYS[KEYS_REST + i - 1] end
local function create(i)
  local key = event(i)
  local base = ARGV_REST + (i - 1) * 3
  local status = ARGV[base + 1]
  if status == S.sampled_out then
    redis.call('HSET', key, F.status, status, F.received, ARGV[base + 2])
    redis.call('HINCRBY', K.counters, N.events_sampled_out, 1)
  else
    redis.call('HSET', key, F.payload, ARGV[base], F.status, status, F.received, ARGV[base + 2])
  end
  redis.call('EXPIRE', key, ttl)
  redis.call('HINCRBY', K.counters, N.events_received, 1)
end
"""

# Create events that do not exist yet. Returns 1 per created event, 0 where the id existed.
INGEST = Script(
    "INGEST",
    _CREATE_KEYS,
    _CREATE_ARGS,
    _CREATE
    + """
for i = 1, n do
  if redis.call('EXISTS', event(i)) == 1 then
    out[i] = 0
  else
    create(i)
    out[i] = 1
  end
end
return out
""",
)

# Create events and enqueue their RQ jobs in one round trip, only for events that are new.
# KEYS and ARGV as INGEST's; ARGV's tail then holds groups covering the events in KEYS order,
# each: event count, command count, then per command its argument count and arguments (the RQ
# job's writes, recorded by `rq_jobs.Jobs.commands`).
# A group with commands (a job) is all or nothing: all its events new -> create them and run
# its commands; none new -> nothing; some new -> nothing, those events answer -1 and the caller
# takes the exact path (`Store.ingest_exact`). A group without commands (sampled-out events)
# creates each new event. Returns per event: 1 created, -1 conflict, else the stored status.
INGEST_JOBS = Script(
    "INGEST_JOBS",
    _CREATE_KEYS,
    _CREATE_ARGS,
    _CREATE
    + """
local function stored(i)
  local st = redis.call('HGET', event(i), F.status)
  if st then return st end
  return -1
end
local i = 1
local g = ARGV_REST + 3 * n
while i <= n do
  local n_ev = tonumber(ARGV[g])
  local n_cmds = tonumber(ARGV[g + 1])
  g = g + 2
  local first_cmd = g
  for _ = 1, n_cmds do g = g + 1 + tonumber(ARGV[g]) end
  local last = i + n_ev - 1
  local fresh = 0
  for j = i, last do
    if redis.call('EXISTS', event(j)) == 0 then
      fresh = fresh + 1
      out[j] = 1
    else
      out[j] = 0
    end
  end
  if n_cmds == 0 or fresh == n_ev then
    for j = i, last do
      if out[j] == 1 then create(j) else out[j] = stored(j) end
    end
    if n_cmds > 0 then
      local p = first_cmd
      for _ = 1, n_cmds do
        local nargs = tonumber(ARGV[p])
        redis.call(unpack(ARGV, p + 1, p + nargs))
        p = p + 1 + nargs
      end
    end
  elseif fresh == 0 then
    for j = i, last do out[j] = stored(j) end
  else
    for j = i, last do out[j] = -1 end
  end
  i = last + 1
end
return out
""",
)

# Mark one event done and record its observations, once (`ragmon.store.finish`).
# `series` is the event's series; past the series budget it is counted in `folded` (its app
# holds series) or `orphan` (it holds none), adding 1 to `folded_count` or `orphan_count`
# (`keys.fold`). `budget`: JSON {total, per_app, now}. `series_counts`: JSON [[name, reason,
# n], ...] adds n to `name|<series>[|reason]` in counters. ARGV tail: `n_obs` triples (name,
# bucket, value), each adding to the bucket, the sum, the sum of squares (for the variance the
# alerts need) and the count; then the grades (one per graded passage).
# Keeps the series it was counted in (after folding) in the event for EXPLORE_INDEX.
# Returns 1 when recorded, 0 when the event was already done (or is unknown).
FINISH = Script(
    "FINISH",
    ("event", "hist", "day_hist", "counters", "day_counters", "series", "day_events", "failed",
     "series_per_app"),
    ("result", "ttl", "app", "series", "folded", "folded_count", "orphan", "orphan_count",
     "budget", "day_record", "day_keep", "payload", "lag", "lag_bucket", "k", "ref",
     "series_counts", "n_obs"),
    """
local st = redis.call('HGET', K.event, F.status)
if st ~= S.queued and st ~= S.failed then return 0 end
local series = A.series
local budget = cjson.decode(A.budget)
if redis.call('ZSCORE', K.series, series) then
  redis.call('ZADD', K.series, budget.now, series)
else
  -- a new series: admitted while both the fleet's and its app's budgets have room
  local held = tonumber(redis.call('HGET', K.series_per_app, A.app) or '0')
  if held < budget.per_app and redis.call('ZCARD', K.series) < budget.total then
    redis.call('ZADD', K.series, budget.now, series)
    redis.call('HINCRBY', K.series_per_app, A.app, 1)
  elseif held > 0 then
    series = A.folded
    redis.call('HINCRBY', K.counters, A.folded_count, 1)
  else
    series = A.orphan
    redis.call('HINCRBY', K.counters, A.orphan_count, 1)
  end
end
redis.call('HSET', K.event, F.status, S.done, F.result, A.result, F.series, series)
if A.payload ~= '' then redis.call('HSET', K.event, F.payload, A.payload) end
redis.call('EXPIRE', K.event, tonumber(A.ttl))
for _, c in ipairs(cjson.decode(A.series_counts)) do
  local field = c[1] .. SEP .. series
  if c[2] ~= '' then field = field .. SEP .. c[2] end
  redis.call('HINCRBY', K.counters, field, c[3])
end
local j = ARGV_REST
for _ = 1, tonumber(A.n_obs) do
  local field = ARGV[j] .. SEP .. series .. SEP
  for _, h in ipairs({K.hist, K.day_hist}) do
    redis.call('HINCRBY', h, field .. H.bucket .. ARGV[j + 1], 1)
    redis.call('HINCRBYFLOAT', h, field .. H.sum, ARGV[j + 2])
    redis.call('HINCRBYFLOAT', h, field .. H.sumsq, string.format('%.17g', ARGV[j + 2] ^ 2))
    redis.call('HINCRBY', h, field .. H.count, 1)
  end
  j = j + 3
end
local lag = N.labeling_lag .. SEP
redis.call('HINCRBY', K.hist, lag .. H.bucket .. A.lag_bucket, 1)
redis.call('HINCRBYFLOAT', K.hist, lag .. H.sum, A.lag)
redis.call('HINCRBY', K.hist, lag .. H.count, 1)
redis.call('HINCRBY', K.counters, N.events_labeled, 1)
redis.call('HINCRBY', K.day_counters, N.events .. SEP .. series, 1)
redis.call('HINCRBY', K.day_counters, N.k_sum .. SEP .. series, tonumber(A.k))
for g = j, #ARGV do
  redis.call('HINCRBY', K.counters, N.grades .. SEP .. ARGV[g], 1)
  redis.call('HINCRBY', K.day_counters, N.grades .. SEP .. series .. SEP .. ARGV[g], 1)
end
redis.call('RPUSH', K.day_events, A.day_record)
redis.call('LTRIM', K.day_events, -tonumber(A.day_keep), -1)
redis.call('ZREM', K.failed, A.ref)
return 1
""",
)  # fmt: skip

# Mark one queued event failed, once.
FAIL = Script(
    "FAIL",
    ("event", "counters", "failed"),
    ("result", "reason", "now", "ref"),
    """
local st = redis.call('HGET', K.event, F.status)
if st ~= S.queued then return 0 end
redis.call('HSET', K.event, F.status, S.failed, F.result, A.result)
redis.call('HINCRBY', K.counters, N.events_failed .. SEP .. A.reason, 1)
redis.call('ZADD', K.failed, tonumber(A.now), A.ref)
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

# Turn events waiting in the grouping window into one RQ job, once (`Store.grouping.group`).
# ARGV tail: the `n_refs` event refs, then the job's commands (argument count, arguments;
# recorded from RQ like INGEST_JOBS's). When every ref is still waiting: remove them and run
# the commands, return 1. Otherwise do nothing and return the refs still waiting (a sweep or
# another API process grouped the others): the caller records a job for those.
GROUP = Script(
    "GROUP",
    ("ungrouped",),
    ("n_refs",),
    """
local n = tonumber(A.n_refs)
local last = ARGV_REST + n - 1
local present = {}
for i = ARGV_REST, last do
  if redis.call('ZSCORE', K.ungrouped, ARGV[i]) then present[#present + 1] = ARGV[i] end
end
if #present < n then return present end
redis.call('ZREM', K.ungrouped, unpack(ARGV, ARGV_REST, last))
local p = last + 1
while p <= #ARGV do
  local nargs = tonumber(ARGV[p])
  redis.call(unpack(ARGV, p + 1, p + nargs))
  p = p + 1 + nargs
end
return 1
""",
)

# A running job takes up to `limit` events waiting in the grouping window
# (`Store.grouping.claim`): they leave the ungrouped zset for the claimed one, scored by the
# lease's end (epoch s). Returns the claimed refs, oldest first.
CLAIM = Script(
    "CLAIM",
    ("ungrouped", "claimed"),
    ("limit", "lease_end"),
    """
local refs = redis.call('ZRANGE', K.ungrouped, 0, tonumber(A.limit) - 1)
for _, ref in ipairs(refs) do
  redis.call('ZREM', K.ungrouped, ref)
  redis.call('ZADD', K.claimed, A.lease_end, ref)
end
return refs
""",
)

# Claims whose lease ended by `now` (their work horse died, or gave them back with score 0) go
# back to the ungrouped zset with score 0, so the next sweep groups them into an RQ job at once.
# Returns how many.
EXPIRED_CLAIMS = Script(
    "EXPIRED_CLAIMS",
    ("claimed", "ungrouped"),
    ("now",),
    """
local refs = redis.call('ZRANGEBYSCORE', K.claimed, '-inf', A.now)
for _, ref in ipairs(refs) do
  redis.call('ZREM', K.claimed, ref)
  redis.call('ZADD', K.ungrouped, 0, ref)
end
return #refs
""",
)

# The event explorer's index (`ragmon.store.event_index`). Both scripts: `indexed` the indexed
# series zset, `traces` the trace hash; key templates by time, by measure, of records and by
# expiry, where `SLOT.series` stands for the series and `SLOT.measure` for the measure; `now`;
# `trim_max` how many expired events to drop per series at most.
_EXPLORE_KEYS = ("indexed", "traces")
_EXPLORE_ARGS = ("time_key", "measure_key", "records_key", "expiry_key", "now", "trim_max")
_EXPLORE = """
local function key(template, series, measure)
  local k = string.gsub(template, SLOT.series, function() return series end)
  if measure then k = string.gsub(k, SLOT.measure, function() return measure end) end
  return k
end
local now = tonumber(A.now)
local function trim(series)
  local expiry = key(A.expiry_key, series)
  local records = key(A.records_key, series)
  local old = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, tonumber(A.trim_max))
  for _, ref in ipairs(old) do
    local raw = redis.call('HGET', records, ref)
    if raw then
      local r = cjson.decode(raw)
      redis.call('ZREM', key(A.time_key, series), r.t .. SEP .. ref)
      for m, v in pairs(r.x) do
        redis.call('ZREM', key(A.measure_key, series, m), v .. SEP .. r.t .. SEP .. ref)
      end
      if r.tid then
        local field = r.app .. SEP .. r.tid
        local held = redis.call('HGET', K.traces, field)
        if held and cjson.decode(held)[2] == ref then redis.call('HDEL', K.traces, field) end
      end
      redis.call('HDEL', records, ref)
    end
    redis.call('ZREM', expiry, ref)
  end
  if redis.call('ZCARD', expiry) == 0 then redis.call('ZREM', K.indexed, series) end
  return #old
end
"""

# Index one event the explorer lists, once: runs after FINISH in the same transaction and only
# for an event FINISH has just made done (its series set, not yet indexed), then trims its
# series. `record`: the record JSON (`explorer.record`); `hour_key`: the hour key template
# (`SLOT.series`, and `SLOT.hour` the unix hour of the event) and `hour_ttl` its TTL;
# `hourly`: JSON {measure: value} added to that hour's count, sum and sum of squares.
# Members are `<time>|<ref>` and `<value>|<time>|<ref>`, all scored 0 (read by lex order).
# Returns 1 when indexed, 0 when not (already, or FINISH did not record it).
EXPLORE_INDEX = Script(
    "EXPLORE_INDEX",
    (*_EXPLORE_KEYS, "event"),
    (*_EXPLORE_ARGS, "record", "ref", "hour_key", "hour_ttl", "hourly"),
    _EXPLORE
    + """
local series = redis.call('HGET', K.event, F.series)
if not series or redis.call('HSETNX', K.event, F.indexed, 1) == 0 then return 0 end
local ref = A.ref
local r = cjson.decode(A.record)
redis.call('HSET', key(A.records_key, series), ref, A.record)
redis.call('ZADD', key(A.time_key, series), 0, r.t .. SEP .. ref)
for m, v in pairs(r.x) do
  redis.call('ZADD', key(A.measure_key, series, m), 0, v .. SEP .. r.t .. SEP .. ref)
end
redis.call('ZADD', key(A.expiry_key, series), r.e, ref)
redis.call('ZADD', K.indexed, now, series)
if r.tid then redis.call('HSET', K.traces, r.app .. SEP .. r.tid, cjson.encode({series, ref})) end
local hour = string.format('%d', math.floor(tonumber(r.t) / 3600000))
local hkey = string.gsub(key(A.hour_key, series), SLOT.hour, hour)
for m, v in pairs(cjson.decode(A.hourly)) do
  redis.call('HINCRBY', hkey, m .. SEP .. HOUR.count, 1)
  redis.call('HINCRBYFLOAT', hkey, m .. SEP .. HOUR.sum, string.format('%.17g', v))
  redis.call('HINCRBYFLOAT', hkey, m .. SEP .. HOUR.sumsq, string.format('%.17g', v * v))
end
redis.call('EXPIRE', hkey, tonumber(A.hour_ttl))
trim(series)
return 1
""",
)

# Drop up to `trim_max` expired events of `series` (the hourly sweep calls it per series until
# none is left: series that stopped receiving events are trimmed here; one call keeps Redis
# busy a few milliseconds at most). Returns how many were dropped.
EXPLORE_TRIM = Script(
    "EXPLORE_TRIM",
    _EXPLORE_KEYS,
    (*_EXPLORE_ARGS, "series"),
    _EXPLORE
    + """
return trim(A.series)
""",
)

ALL = (INGEST, INGEST_JOBS, FINISH, FAIL, FREE_SERIES, GROUP, CLAIM, EXPIRED_CLAIMS,
       EXPLORE_INDEX, EXPLORE_TRIM)  # fmt: skip

# Store people's grades (`POST /v1/grades`), each once per (event, passage, reviewer).
# KEYS tail: per grade, its event's grades hash and its app's set of graded events. ARGV tail:
# per grade, its field in the hash, the record (JSON), the grade, the note ('' for none), the
# event ref and the app. A grade whose stored twin has the same grade and note changes nothing
# (0); a new one is stored (1), a changed one replaces it (2). Any change bumps `generation`,
# which the derived statistics (agreement, estimates) are cached by.
HUMAN_GRADES = Script(
    "HUMAN_GRADES",
    ("generation", "apps"),
    ("ttl", "now"),
    """
local ttl = tonumber(A.ttl)
local out = {}
local changed = false
for i = 1, (#KEYS - KEYS_REST + 1) / 2 do
  local key, refs = KEYS[KEYS_REST + 2 * (i - 1)], KEYS[KEYS_REST + 2 * (i - 1) + 1]
  local b = ARGV_REST + 6 * (i - 1)
  local field, grade, note = ARGV[b], ARGV[b + 2], ARGV[b + 3]
  local state = 1
  local old = redis.call('HGET', key, field)
  if old then
    local o = cjson.decode(old)
    local was = o.note
    if type(was) ~= 'string' then was = '' end
    if tostring(o.grade) == grade and was == note then state = 0 else state = 2 end
  end
  if state > 0 then
    redis.call('HSET', key, field, ARGV[b + 1])
    redis.call('ZADD', refs, tonumber(A.now), ARGV[b + 4])
    redis.call('SADD', K.apps, ARGV[b + 5])
    redis.call('EXPIRE', key, ttl)
    redis.call('EXPIRE', refs, ttl)
    changed = true
  end
  out[i] = state
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
