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
# alerts need) and the count; then the grades (one per graded passage). `day_events` is the
# app's list of per-day records (trimmed to its newest `day_keep`), `day_apps` the day's apps.
# Keeps the series it was counted in (after folding) in the event for EXPLORE_INDEX.
# Returns 1 when recorded, 0 when the event was already done (or is unknown).
FINISH = Script(
    "FINISH",
    ("event", "hist", "day_hist", "counters", "day_counters", "series", "day_events", "failed",
     "series_per_app", "day_apps", "app_failed"),
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
redis.call('SADD', K.day_apps, A.app)
redis.call('ZREM', K.failed, A.ref)
redis.call('ZREM', K.app_failed, A.ref)
return 1
""",
)  # fmt: skip

# Mark one queued event failed, once (listed in the fleet's and its app's failed sets).
FAIL = Script(
    "FAIL",
    ("event", "counters", "failed", "app_failed"),
    ("result", "reason", "now", "ref"),
    """
local st = redis.call('HGET', K.event, F.status)
if st ~= S.queued then return 0 end
redis.call('HSET', K.event, F.status, S.failed, F.result, A.result)
redis.call('HINCRBY', K.counters, N.events_failed .. SEP .. A.reason, 1)
redis.call('ZADD', K.failed, tonumber(A.now), A.ref)
redis.call('ZADD', K.app_failed, tonumber(A.now), A.ref)
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
_EXPLORE_ARGS = ("time_key", "measure_key", "records_key", "expiry_key", "app_key", "now",
                 "trim_max")  # fmt: skip
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
  if redis.call('ZCARD', expiry) == 0 then
    redis.call('ZREM', K.indexed, series)
    redis.call('ZREM', key(A.app_key, app_of(series)), series)
  end
  return #old
end
"""

# Index one event the explorer lists, once: runs after FINISH in the same transaction and only
# for an event FINISH has just made done (its series set, not yet indexed), then trims its
# series. `record`: the record JSON (`explorer.record`); `hour_key`: the hour key template
# (`SLOT.series`, and `SLOT.hour` the unix hour of the event) and `hour_ttl` its TTL;
# `hourly`: JSON {measure: value} added to that hour's count, sum and sum of squares, and to
# the series' overview summary (`summary_key`, see OVERVIEW) when that hour is already in it.
# An event of an app folded into the all-`other` series (`orphan`: past the fleet's series
# cap) is indexed under its app's own folded series (its app, then `fold_tail`), so the app
# stays in the explorer. The series is listed in `indexed` and in its app's `app_key` set.
# Members are `<time>|<ref>` and `<value>|<time>|<ref>`, all scored 0 (read by lex order).
# Returns 1 when indexed, 0 when not (already, or FINISH did not record it).
EXPLORE_INDEX = Script(
    "EXPLORE_INDEX",
    (*_EXPLORE_KEYS, "event"),
    (
        *_EXPLORE_ARGS,
        "record",
        "ref",
        "hour_key",
        "hour_ttl",
        "hourly",
        "summary_key",
        "orphan",
        "fold_tail",
    ),
    _EXPLORE
    + """
local series = redis.call('HGET', K.event, F.series)
if not series or redis.call('HSETNX', K.event, F.indexed, 1) == 0 then return 0 end
local ref = A.ref
local r = cjson.decode(A.record)
if series == A.orphan and r.app ~= app_of(A.orphan) then series = r.app .. SEP .. A.fold_tail end
redis.call('HSET', key(A.records_key, series), ref, A.record)
redis.call('ZADD', key(A.time_key, series), 0, r.t .. SEP .. ref)
for m, v in pairs(r.x) do
  redis.call('ZADD', key(A.measure_key, series, m), 0, v .. SEP .. r.t .. SEP .. ref)
end
redis.call('ZADD', key(A.expiry_key, series), r.e, ref)
redis.call('ZADD', K.indexed, now, series)
redis.call('ZADD', key(A.app_key, app_of(series)), now, series)
if r.tid then redis.call('HSET', K.traces, r.app .. SEP .. r.tid, cjson.encode({series, ref})) end
local hour = string.format('%d', math.floor(tonumber(r.t) / 3600000))
local hkey = string.gsub(key(A.hour_key, series), SLOT.hour, hour)
for m, v in pairs(cjson.decode(A.hourly)) do
  redis.call('HINCRBY', hkey, m .. SEP .. HOUR.count, 1)
  redis.call('HINCRBYFLOAT', hkey, m .. SEP .. HOUR.sum, string.format('%.17g', v))
  redis.call('HINCRBYFLOAT', hkey, m .. SEP .. HOUR.sumsq, string.format('%.17g', v * v))
end
redis.call('EXPIRE', hkey, tonumber(A.hour_ttl))
local skey = key(A.summary_key, series)
local at = tonumber(redis.call('HGET', skey, OV.hour)) or -1
local h = tonumber(hour)
if at >= 0 and h < at and h > at - 192 then  -- an hour the summary holds: add to it
  local part = OV.before
  if h > at - 24 then part = OV.recent end
  for m, v in pairs(cjson.decode(A.hourly)) do
    local f = part .. SEP .. m .. SEP
    redis.call('HINCRBYFLOAT', skey, f .. HOUR.count, 1)
    redis.call('HINCRBYFLOAT', skey, f .. HOUR.sum, string.format('%.17g', v))
    redis.call('HINCRBYFLOAT', skey, f .. HOUR.sumsq, string.format('%.17g', v * v))
  end
end
trim(series)
return 1
""",
)

# The explorer's overview of `n_series` series (ARGV tail): per series, how many events its
# index holds and the sums (count, sum, sum of squares per measure of `fields`, JSON list of
# `<measure>|<part>`) of its last 24 hours (this one included) and of the 7 days before.
# Read from a summary per series (`summary_key`, a hash: `h` the unix hour it was made for,
# `r|<field>` the 23 complete hours before it, `b|<field>` the 168 before those) plus this
# hour's live sums: two reads a series. A summary made for one or two hours before is moved
# forward an hour at a time (each step adds one hour and moves or drops two: three reads; the
# hourly sums keep 2 hours past the windows for this), an older one is made again from the
# hourly sums (191 reads, once an hour at most); EXPLORE_INDEX adds a
# finished event to the summary when its hour is already in it. Returns per series: the event
# count, then the recent and the before sums in `fields` order (as strings).
OVERVIEW = Script(
    "OVERVIEW",
    (),
    ("time_key", "hour_key", "summary_key", "hour", "fields", "ttl", "n_series"),
    """
local function key(template, series)
  return (string.gsub(template, SLOT.series, function() return series end))
end
local fields = cjson.decode(A.fields)
local H = tonumber(A.hour)
local ttl = tonumber(A.ttl)
local function hour_sums(series, h)
  local hk = string.gsub(key(A.hour_key, series), SLOT.hour, string.format('%d', h))
  local raw = redis.call('HMGET', hk, unpack(fields))
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
local out = {}
for j = ARGV_REST, ARGV_REST + tonumber(A.n_series) - 1 do
  local series = ARGV[j]
  local skey = key(A.summary_key, series)
  local stored = redis.call('HGETALL', skey)
  local have = {}
  for i = 1, #stored, 2 do have[stored[i]] = stored[i + 1] end
  local at = tonumber(have[OV.hour]) or -1
  local recent, before = zeros(), zeros()
  if at >= 0 and at <= H then
    for i, f in ipairs(fields) do
      recent[i] = tonumber(have[OV.recent .. SEP .. f]) or 0
      before[i] = tonumber(have[OV.before .. SEP .. f]) or 0
    end
  end
  if at < 0 or at > H or H - at > 2 then  -- none, or older than the hours still kept: make it
    recent, before = zeros(), zeros()
    for h = H - 191, H - 1 do
      if h > H - 24 then add(recent, hour_sums(series, h), 1)
      else add(before, hour_sums(series, h), 1) end
    end
  else  -- move it forward to this hour
    for g = at, H - 1 do
      local leaving = hour_sums(series, g - 23)
      add(recent, hour_sums(series, g), 1)
      add(recent, leaving, -1)
      add(before, leaving, 1)
      add(before, hour_sums(series, g - 191), -1)
    end
  end
  if at ~= H then
    for i = 1, #fields, 3 do  -- counts are whole: no rounding left where nothing is
      for _, w in ipairs({recent, before}) do
        if w[i] < 0.5 then w[i], w[i + 1], w[i + 2] = 0, 0, 0 end
      end
    end
    local set = {OV.hour, string.format('%d', H)}
    for i, f in ipairs(fields) do
      set[#set + 1] = OV.recent .. SEP .. f
      set[#set + 1] = string.format('%.17g', recent[i])
      set[#set + 1] = OV.before .. SEP .. f
      set[#set + 1] = string.format('%.17g', before[i])
    end
    redis.call('HSET', skey, unpack(set))
    redis.call('EXPIRE', skey, ttl)
  end
  add(recent, hour_sums(series, H), 1)
  out[#out + 1] = redis.call('ZCARD', key(A.time_key, series))
  for i = 1, #fields do out[#out + 1] = string.format('%.17g', recent[i]) end
  for i = 1, #fields do out[#out + 1] = string.format('%.17g', before[i]) end
end
return out
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
       EXPLORE_INDEX, EXPLORE_TRIM, OVERVIEW)  # fmt: skip

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
