"""Lua scripts: each makes one multi-key change atomic, so a retried job never counts twice."""

# Shared by INGEST and INGEST_JOBS: `create(i)` writes event i and counts it.
# KEYS: event keys, then the counters hash (last). ARGV: ttl, deadline, then per event: payload,
# status, received_at.
# The deadline (unix seconds, 0: none) is when the API stops waiting and answers 503: a write
# that reaches Redis later (a stalled Redis catching up) is refused whole, so a client that
# retries after the 503 is never counted twice.
_CREATE = """
local n = #KEYS - 1
local counters = KEYS[#KEYS]
local ttl = tonumber(ARGV[1])
local deadline = tonumber(ARGV[2])
if deadline > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) + tonumber(t[2]) / 1e6 > deadline then
    return redis.error_reply('DEADLINE the API has already answered 503 for this write')
  end
end
local out = {}
local function create(i)
  local base = 3 + (i - 1) * 3
  local status = ARGV[base + 1]
  if status == 'sampled_out' then
    redis.call('HSET', KEYS[i], 's', status, 'rt', ARGV[base + 2])
    redis.call('HINCRBY', counters, 'events_sampled_out', 1)
  else
    redis.call('HSET', KEYS[i], 'p', ARGV[base], 's', status, 'rt', ARGV[base + 2])
  end
  redis.call('EXPIRE', KEYS[i], ttl)
  redis.call('HINCRBY', counters, 'events_received', 1)
end
"""

# Create events that do not exist yet. Returns 1 per created event, 0 where the id existed.
INGEST = (
    _CREATE
    + """
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    out[i] = 0
  else
    create(i)
    out[i] = 1
  end
end
return out
"""
)

# Mark one event done and record its observations, once.
# KEYS: event, hist, day hist, counters, day counters, series zset, day events, failed zset,
#       series-per-app hash
# ARGV: result JSON, ttl, series, budget JSON {total, per_app, now}, day-events JSON,
#       day-events keep, payload or '',
#       lag seconds, lag bucket index, k, event ref, series counters JSON [[name, n], ...]
#       (`name` or `name|reason`: adds n to `name|<series>[|reason]` in counters), n_obs,
#       then n_obs triples
#       (name, bucket, value): each adds to the bucket, the sum, the sum of squares (`sumsq`,
#       for the variance the alerts need) and the count,
#       then grades (one per graded passage).
# Keeps the series it was counted in (after folding) in the event's `sr` for EXPLORE_INDEX.
# Returns 1 when recorded, 0 when the event was already done (or is unknown).
FINISH = """
local st = redis.call('HGET', KEYS[1], 's')
if st ~= 'queued' and st ~= 'failed' then return 0 end
local series = ARGV[3]
local budget = cjson.decode(ARGV[4])
if redis.call('ZSCORE', KEYS[6], series) then
  redis.call('ZADD', KEYS[6], budget.now, series)
else
  -- a new series: admitted while both the fleet's and its app's budgets have room; else
  -- folded into `app|other|other|other` (an app that has series) or all-`other`
  local app = string.match(series, '^[^|]*')
  local held = tonumber(redis.call('HGET', KEYS[9], app) or '0')
  if held < budget.per_app and redis.call('ZCARD', KEYS[6]) < budget.total then
    redis.call('ZADD', KEYS[6], budget.now, series)
    redis.call('HINCRBY', KEYS[9], app, 1)
  else
    if held == 0 then app = 'other' end
    series = app .. '|other|other|other'
    redis.call('HINCRBY', KEYS[4], 'series_folded|' .. app, 1)
  end
end
redis.call('HSET', KEYS[1], 's', 'done', 'r', ARGV[1], 'sr', series)
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'p', ARGV[7]) end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
for _, c in ipairs(cjson.decode(ARGV[12])) do
  local name, reason = string.match(c[1], '^([^|]*)|?(.*)$')
  local field = name .. '|' .. series
  if reason ~= '' then field = field .. '|' .. reason end
  redis.call('HINCRBY', KEYS[4], field, c[2])
end
local n_obs = tonumber(ARGV[13])
local j = 14
for _ = 1, n_obs do
  local field = ARGV[j] .. '|' .. series
  for _, h in ipairs({KEYS[2], KEYS[3]}) do
    redis.call('HINCRBY', h, field .. '|b' .. ARGV[j + 1], 1)
    redis.call('HINCRBYFLOAT', h, field .. '|sum', ARGV[j + 2])
    redis.call('HINCRBYFLOAT', h, field .. '|sumsq', string.format('%.17g', ARGV[j + 2] ^ 2))
    redis.call('HINCRBY', h, field .. '|count', 1)
  end
  j = j + 3
end
redis.call('HINCRBY', KEYS[2], 'labeling_lag_seconds|b' .. ARGV[9], 1)
redis.call('HINCRBYFLOAT', KEYS[2], 'labeling_lag_seconds|sum', ARGV[8])
redis.call('HINCRBY', KEYS[2], 'labeling_lag_seconds|count', 1)
redis.call('HINCRBY', KEYS[4], 'events_labeled', 1)
redis.call('HINCRBY', KEYS[5], 'events|' .. series, 1)
redis.call('HINCRBY', KEYS[5], 'k_sum|' .. series, tonumber(ARGV[10]))
for g = j, #ARGV do
  redis.call('HINCRBY', KEYS[4], 'grades|' .. ARGV[g], 1)
  redis.call('HINCRBY', KEYS[5], 'grades|' .. series .. '|' .. ARGV[g], 1)
end
redis.call('RPUSH', KEYS[7], ARGV[5])
redis.call('LTRIM', KEYS[7], -tonumber(ARGV[6]), -1)
redis.call('ZREM', KEYS[8], ARGV[11])
return 1
"""

# Mark one queued event failed, once.
# KEYS: event, counters, failed zset. ARGV: result JSON, reason, now, event ref.
FAIL = """
local st = redis.call('HGET', KEYS[1], 's')
if st ~= 'queued' then return 0 end
redis.call('HSET', KEYS[1], 's', 'failed', 'r', ARGV[1])
redis.call('HINCRBY', KEYS[2], 'events_failed|' .. ARGV[2], 1)
redis.call('ZADD', KEYS[3], tonumber(ARGV[3]), ARGV[4])
return 1
"""

# Create events and enqueue their RQ jobs in one round trip, only for events that are new.
# KEYS: event keys, then the counters hash (last).
# ARGV: ttl, deadline, then per event (KEYS order): payload, status, received_at; then groups
#   covering the events in KEYS order, each: event count, command count, then per command its
#   argument count and arguments (the RQ job's writes, recorded by `rq_jobs.Jobs.commands`).
# A group with commands (a job) is all or nothing: all its events new -> create them and run
# its commands; none new -> nothing; some new -> nothing, those events answer -1 and the caller
# takes the exact path (`Store.ingest_exact`). A group without commands (sampled-out events)
# creates each new event. Returns per event: 1 created, -1 conflict, else the stored status.
INGEST_JOBS = (
    _CREATE
    + """
local function stored(i)
  local st = redis.call('HGET', KEYS[i], 's')
  if st then return st end
  return -1
end
local i = 1
local g = 3 + 3 * n
while i <= n do
  local n_ev = tonumber(ARGV[g])
  local n_cmds = tonumber(ARGV[g + 1])
  g = g + 2
  local first_cmd = g
  for _ = 1, n_cmds do g = g + 1 + tonumber(ARGV[g]) end
  local last = i + n_ev - 1
  local fresh = 0
  for j = i, last do
    if redis.call('EXISTS', KEYS[j]) == 0 then
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
"""
)

# Free admitted series: their budget slots and their lifetime histogram fields.
# KEYS: series zset, series-per-app hash, lifetime hist. ARGV: n, then n fields of a series
# without its labels (`retrieval_ndcg|b0`, `retrieval_ndcg|sum` ...), then the series.
# Returns how many were freed.
FREE_SERIES = """
local n = tonumber(ARGV[1])
local freed = 0
for s = n + 2, #ARGV do
  local series = ARGV[s]
  if redis.call('ZREM', KEYS[1], series) == 1 then
    freed = freed + 1
    local app = string.match(series, '^[^|]*')
    if redis.call('HINCRBY', KEYS[2], app, -1) <= 0 then redis.call('HDEL', KEYS[2], app) end
    for i = 2, n + 1 do
      local head, tail = string.match(ARGV[i], '^([^|]*)(|.*)$')
      redis.call('HDEL', KEYS[3], head .. '|' .. series .. tail)
    end
  end
end
return freed
"""

# Turn events waiting in the grouping window into one RQ job, once (`Store.grouping.group`).
# KEYS: the ungrouped zset. ARGV: n, the n event refs, then the job's commands (argument count,
# arguments; recorded from RQ like INGEST_JOBS's). When every ref is still waiting: remove them
# and run the commands, return 1. Otherwise do nothing and return the refs still waiting (a
# sweep or another API process grouped the others): the caller records a job for those.
GROUP = """
local n = tonumber(ARGV[1])
local present = {}
for i = 2, n + 1 do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then present[#present + 1] = ARGV[i] end
end
if #present < n then return present end
redis.call('ZREM', KEYS[1], unpack(ARGV, 2, n + 1))
local p = n + 2
while p <= #ARGV do
  local nargs = tonumber(ARGV[p])
  redis.call(unpack(ARGV, p + 1, p + nargs))
  p = p + 1 + nargs
end
return 1
"""

# A running job takes events waiting in the grouping window (`Store.grouping.claim`): they leave the
# ungrouped zset for the claimed one, scored by the lease's end. KEYS: ungrouped, claimed.
# ARGV: how many at most, lease end (epoch s). Returns the claimed refs, oldest first.
CLAIM = """
local refs = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
for _, ref in ipairs(refs) do
  redis.call('ZREM', KEYS[1], ref)
  redis.call('ZADD', KEYS[2], ARGV[2], ref)
end
return refs
"""

# Claims whose lease ended (their work horse died, or gave them back with score 0) go back
# to the ungrouped zset with score 0, so the next sweep groups them into an RQ job at once.
# KEYS: claimed, ungrouped. ARGV: now. Returns how many.
EXPIRED_CLAIMS = """
local refs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, ref in ipairs(refs) do
  redis.call('ZREM', KEYS[1], ref)
  redis.call('ZADD', KEYS[2], 0, ref)
end
return #refs
"""

# The event explorer's index (`monitor.store.explore`). Both scripts: KEYS[1] the indexed-series
# zset, KEYS[2] the trace hash; ARGV[1..4] key templates (by time, by measure, records, expiry)
# where `{S}` stands for the series and `{M}` for the measure, ARGV[5] now, ARGV[6] how many
# expired events to drop per series at most.
_EXPLORE = """
local function key(template, series, measure)
  local k = string.gsub(template, '{S}', function() return series end)
  if measure then k = string.gsub(k, '{M}', function() return measure end) end
  return k
end
local now = tonumber(ARGV[5])
local function trim(series)
  local expiry = key(ARGV[4], series)
  local records = key(ARGV[3], series)
  local old = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, tonumber(ARGV[6]))
  for _, ref in ipairs(old) do
    local raw = redis.call('HGET', records, ref)
    if raw then
      local r = cjson.decode(raw)
      redis.call('ZREM', key(ARGV[1], series), r.t .. '|' .. ref)
      for m, v in pairs(r.x) do
        redis.call('ZREM', key(ARGV[2], series, m), v .. '|' .. r.t .. '|' .. ref)
      end
      if r.tid then
        local field = r.app .. '|' .. r.tid
        local held = redis.call('HGET', KEYS[2], field)
        if held and cjson.decode(held)[2] == ref then redis.call('HDEL', KEYS[2], field) end
      end
      redis.call('HDEL', records, ref)
    end
    redis.call('ZREM', expiry, ref)
  end
  if redis.call('ZCARD', expiry) == 0 then redis.call('ZREM', KEYS[1], series) end
  return #old
end
"""

# Index one event the explorer lists, once: runs after FINISH in the same transaction and only
# for an event FINISH has just made done (`sr` set, `ix` not yet), then trims its series.
# KEYS[3]: the event. ARGV[7]: the record JSON (`explorer.record`), ARGV[8]: the event ref,
# ARGV[9]: the hour key template (`{S}` series, `{H}` unix hour of the event), ARGV[10]: its
# TTL, ARGV[11]: JSON {measure: value} added to that hour's count, sum and sum of squares.
# Members are `<time>|<ref>` and `<value>|<time>|<ref>`, all scored 0 (read by lex order).
# Returns 1 when indexed, 0 when not (already, or FINISH did not record it).
EXPLORE_INDEX = (
    _EXPLORE
    + """
local series = redis.call('HGET', KEYS[3], 'sr')
if not series or redis.call('HSETNX', KEYS[3], 'ix', 1) == 0 then return 0 end
local ref = ARGV[8]
local r = cjson.decode(ARGV[7])
redis.call('HSET', key(ARGV[3], series), ref, ARGV[7])
redis.call('ZADD', key(ARGV[1], series), 0, r.t .. '|' .. ref)
for m, v in pairs(r.x) do
  redis.call('ZADD', key(ARGV[2], series, m), 0, v .. '|' .. r.t .. '|' .. ref)
end
redis.call('ZADD', key(ARGV[4], series), r.e, ref)
redis.call('ZADD', KEYS[1], now, series)
if r.tid then redis.call('HSET', KEYS[2], r.app .. '|' .. r.tid, cjson.encode({series, ref})) end
local hour = string.format('%d', math.floor(tonumber(r.t) / 3600000))
local hkey = string.gsub(key(ARGV[9], series), '{H}', hour)
for m, v in pairs(cjson.decode(ARGV[11])) do
  redis.call('HINCRBY', hkey, m .. '|n', 1)
  redis.call('HINCRBYFLOAT', hkey, m .. '|s', string.format('%.17g', v))
  redis.call('HINCRBYFLOAT', hkey, m .. '|q', string.format('%.17g', v * v))
end
redis.call('EXPIRE', hkey, tonumber(ARGV[10]))
trim(series)
return 1
"""
)

# Drop up to ARGV[6] expired events of the series ARGV[7] (the hourly sweep calls it per series
# until none is left: series that stopped receiving events are trimmed here; one call keeps
# Redis busy a few milliseconds at most). Returns how many were dropped.
EXPLORE_TRIM = (
    _EXPLORE
    + """
return trim(ARGV[7])
"""
)
