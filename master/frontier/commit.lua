-- Applies one processed batch of nrq messages atomically; returns the messages acked.
-- a_doc is the batch as JSON (Batch.document):
--   done:  [[queue, next ms]]   outcome of its in-flight task: ready again at that time
--   free:  [queue]              the same, keeping the time its politeness set before
--   retry: [[queue, task, next ms, slot ms, held]]   put the task back at the head; the
--     host's slot is free at slot ms (limit above 1); held 1: the queue backs off (its
--     host failed), noted in k_backoff_queues until next ms
--   backoff: [[queue, task, when (ms), next ms]]   a URL that failed alone: the task waits
--     in k_backoff until when, its queue is ready again at next ms
--   now:   [[queue, task]]                           new tasks of the current level
--   hosts: [[host, n]], stats: [[counter, n]], acks: messages to drop from k_in_hand
--   held: [Links message]   links not admitted (a guard holds admission), kept in k_held
--   errors: [[host, JSON or "" to forget the host's error]]
--   lag: [[queue, 1 lagging (robots.txt deferral), 2 lagging (host slow) or 0 not]]
--   improved: [[fp as a string, depth, task fetched again, queue, [encodings of the deeper
--     task], task fetched first]]   a URL found nearer: its deeper task still queued is
--     replaced by the first-fetch task, one in flight is left, else it is fetched again
--   limits: [[host, most requests in flight]]      (applied first)
--   due: [[fp as a string, task, when (ms)]]        stored pages to fetch again then
--   sitemaps: [[origin, fp as a string, task, when (ms)]]   a host's first sitemap task:
--     scheduled like due unless the origin has one already
--   sooner: [[fp as a string, lastmod (ms)]]        a sitemap's <lastmod> of a page: one on
--     the schedule whose last fetch is older is due now (applied after due), unless that
--     fetch found its sitemap wrong or it changed less than `value` ms after that fetch
--   value: what a fetch is worth in ms of one page's freshness
-- The ARGV from ARGV_REST on are the new tasks of the next level. The depth record's
-- entries (a_new_depths, a_improved_depths) are recorded when a_recording is '1' or the
-- partition records since a queue of it lagged (set here, by the same commit that marks
-- the queue). k_state counts the commits (see barrier.py).
local now = tonumber(a_now)
local prefix = a_prefix
local doc = cjson.decode(a_doc)
for _, l in ipairs(doc.limits) do redis.call('HSET', k_host_limit, l[1], l[2]) end
local woken = {}
-- makes the k longest parked queues of host h due at t (or their own next time):
-- as many as it has slots free, the longest first since they hold the level longest
local function wake(h, k, t)
  k = k - (woken[h] or 0)
  if k <= 0 then return end
  local parked = a_parked_prefix .. h
  local qs = redis.call('SMEMBERS', parked)
  if #qs > k then
    local len = {}
    for _, p in ipairs(qs) do len[p] = redis.call('LLEN', prefix .. p) end
    table.sort(qs, function(a, b)
      if len[a] ~= len[b] then return len[a] > len[b] end
      return a < b
    end)
  end
  for i = 1, math.min(k, #qs) do
    local s = tonumber(redis.call('HGET', k_qnext, qs[i]) or '0')
    if s < t then s = t end
    redis.call('ZADD', k_ready, 'XX', s, qs[i])
    redis.call('SREM', parked, qs[i])
  end
  woken[h] = (woken[h] or 0) + math.min(k, #qs)
end
-- a request of host h (from queue q) is back, its slot free at t: a host held to 1
-- waits until t for its next request; a host allowed more keeps the slot cooling
-- until t (so N slots each wait their politeness, however many queues the host has)
local function free_host(h, q, t)
  local out = redis.call('HINCRBY', k_host_inflight, h, -1)
  if out <= 0 then
    redis.call('HDEL', k_host_inflight, h)
    out = 0
  end
  if t < now then t = now end
  local limit = tonumber(redis.call('HGET', k_host_limit, h) or '1')
  if limit == 1 then
    if t > tonumber(redis.call('HGET', k_host_next, h) or '0') then
      redis.call('HSET', k_host_next, h, t)
    end
    return wake(h, 1 - out, now)
  end
  local cooling = a_cooling_prefix .. h
  redis.call('ZREMRANGEBYSCORE', cooling, '-inf', now)
  if t > now then redis.call('ZADD', cooling, t, q) end
  -- slots free now (a limit just raised frees several), then this one at t; the other
  -- cooling slots woke their own queues when they were freed
  local free = tasks_out(limit) - out - redis.call('ZCARD', cooling)
  wake(h, free, now)
  if t > now then wake(h, free + 1, t) end
end
local function release(q, t, slot)
  local was = redis.call('HDEL', k_inflight, q)
  redis.call('ZREM', k_flying, q)
  redis.call('HSET', k_qnext, q, t)
  if redis.call('LLEN', prefix .. q) > 0 then redis.call('ZADD', k_ready, t, q) end
  if was == 1 then
    local h = host_of(q)
    if h then free_host(h, q, slot or t) end
  end
end
for _, d in ipairs(doc.done) do release(d[1], d[2]) end
for _, q in ipairs(doc.free) do
  local t = tonumber(redis.call('HGET', k_qnext, q) or '0')
  if t < now then t = now end
  release(q, t)
end
for _, r in ipairs(doc.retry) do
  redis.call('LPUSH', prefix .. r[1], r[2])
  release(r[1], r[3], r[4])
  if r[5] == 1 then redis.call('ZADD', k_backoff_queues, r[3], r[1]) end
end
-- a URL backing off for --lag-after or longer is lagging work (level.lua does not wait
-- for it): the depth record is switched on here, atomic with it, so its links are judged
local lag_after = tonumber(a_lag_after)
for _, b in ipairs(doc.backoff) do
  redis.call('ZADD', k_backoff, b[3], b[2])
  release(b[1], b[4])
  if b[3] - now >= lag_after then redis.call('HSET', k_state, 'record', 1) end
end
local function push_now(q, task)
  redis.call('RPUSH', prefix .. q, task)
  make_ready(q, now, k_ready, k_inflight, k_qnext)
end
for _, e in ipairs(doc.now) do push_now(e[1], e[2]) end
push_all(k_next_level, ARGV, ARGV_REST)
for _, h in ipairs(doc.hosts) do redis.call('HINCRBY', k_host_pages, h[1], h[2]) end
for _, s in ipairs(doc.stats) do redis.call('HINCRBY', k_stats, s[1], s[2]) end
for _, m in ipairs(doc.held) do redis.call('RPUSH', k_held, m) end
for _, e in ipairs(doc.errors) do
  if e[2] == '' then redis.call('HDEL', k_host_errors, e[1])
  else redis.call('HSET', k_host_errors, e[1], e[2]) end
end
for _, l in ipairs(doc.lag) do
  if l[2] == 0 then
    redis.call('SREM', k_lagging, l[1])
    redis.call('SREM', k_slow, l[1])
  else
    redis.call('SADD', k_lagging, l[1])
    redis.call('HSET', k_state, 'record', 1)
    if l[2] == 2 then redis.call('SADD', k_slow, l[1]) else redis.call('SREM', k_slow, l[1]) end
  end
end
if a_recording == '1' or redis.call('HGET', k_state, 'record') then
  depth_append(k_depths, a_new_depths)
  depth_set(k_depths, a_improved_depths)
end
local replaced, flying, again = 0, 0, 0
for _, m in ipairs(doc.improved) do
  redis.call('HSET', k_improved, m[1], m[2])
  local state = 'fetched'
  for _, old in ipairs(m[5]) do
    if redis.call('LREM', prefix .. m[4], 1, old) == 1
        or redis.call('LREM', k_next_level, 1, old) == 1 then
      state = 'queued'
      break
    end
    if redis.call('HGET', k_inflight, m[4]) == old then
      state = 'flying'
      break
    end
  end
  if state == 'queued' then
    push_now(m[4], m[6])
    replaced = replaced + 1
  elseif state == 'fetched' then
    push_now(m[4], m[3])
    again = again + 1
  else
    flying = flying + 1
  end
end
if replaced > 0 then redis.call('HINCRBY', k_stats, 'depth_improved_queued', replaced) end
if flying > 0 then redis.call('HINCRBY', k_stats, 'depth_improved_in_flight', flying) end
if again > 0 then redis.call('HINCRBY', k_stats, 'depth_refetch', again) end
for _, d in ipairs(doc.due) do
  redis.call('ZADD', k_due, d[3], d[1])
  redis.call('HSET', k_due_tasks, d[1], d[2])
end
for _, d in ipairs(doc.sitemaps) do
  if redis.call('SADD', k_sitemap_hosts, d[1]) == 1 then
    redis.call('ZADD', k_due, d[4], d[2])
    redis.call('HSET', k_due_tasks, d[2], d[3])
  end
end
-- only a page waiting on the schedule moves: one queued or in flight is fetched anyway, so
-- no page is ever fetched twice for one due entry; its host queue keeps the politeness.
-- A page that changed less than a fetch's worth after its last fetch is left: that fetch
-- bought it so little freshness that another one now is likely to buy as little.
local sooner = 0
for _, s in ipairs(doc.sooner) do
  local due = tonumber(redis.call('ZSCORE', k_due, s[1]) or '-1')
  if due > now then
    local task = cjson.decode(redis.call('HGET', k_due_tasks, s[1]) or '{}')
    local fetched = due - (tonumber(task.revisit) or 0) * 1000
    if type(task.history) == 'table' then fetched = task.history[4] * 1000 end
    if s[2] - fetched >= doc.value and not task.lastmod_wrong then
      redis.call('ZADD', k_due, 'XX', now, s[1])
      sooner = sooner + 1
    end
  end
end
if sooner > 0 then redis.call('HINCRBY', k_stats, 'sitemap_sooner', sooner) end
if #a_journal > 0 then redis.call('RPUSH', k_seen_journal, a_journal) end
if doc.acks > 0 then redis.call('LTRIM', k_in_hand, doc.acks, -1) end
redis.call('HINCRBY', k_state, 'commits', 1)
return doc.acks
