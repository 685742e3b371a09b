-- Releases due tasks into srq; returns {tasks released, earliest next ready time or -1}.
-- First puts the tasks whose back-off is over back at the head of their queues (ready
-- no earlier than the queue's own next time). Then moves the head task of due queues
-- into srq, the queues with the most tasks first, and marks them in flight. A queue of
-- a host with all its tasks out (tasks_out) is parked instead (scored PARKED, named in the
-- host's parked set) until one of them comes back; a queue of a host whose free slots
-- all wait out their politeness (cooling), or of a host held to 1 whose next request
-- may not start yet, is scored at that time. -1 too when due queues wait for room in
-- srq or for their host (an outcome coming back is what makes room).
local now = tonumber(a_now)
local function earliest()
  local first = redis.call('ZRANGE', k_ready, 0, 0, 'WITHSCORES')
  local t = tonumber(first[2] or '-1')
  if t >= PARKED then t = -1 end
  local back = tonumber(redis.call('ZRANGE', k_backoff, 0, 0, 'WITHSCORES')[2] or '-1')
  if back >= 0 and (t < 0 or back < t) then t = back end
  return t
end
for _, task in ipairs(redis.call('ZRANGEBYSCORE', k_backoff, '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', k_backoff, task)
  local q = cjson.decode(task)[QUEUE_FIELD]
  redis.call('LPUSH', a_prefix .. q, task)
  make_ready(q, now, k_ready, k_inflight, k_qnext)
end
redis.call('ZREMRANGEBYSCORE', k_backoff_queues, '-inf', now)
local qs = redis.call('ZRANGEBYSCORE', k_ready, '-inf', now, 'LIMIT', 0, tonumber(a_limit))
if #qs == 0 then return {0, earliest()} end
local room = #qs
local cap = tonumber(a_backlog)
if cap > 0 then room = math.min(room, cap - redis.call('LLEN', k_srq)) end
if room <= 0 then return {0, -1} end
if #qs > 1 then
  local len = {}
  for _, q in ipairs(qs) do len[q] = redis.call('LLEN', a_prefix .. q) end
  table.sort(qs, function(a, b)
    if len[a] ~= len[b] then return len[a] > len[b] end
    return a < b
  end)
end
-- true for a queue of its own host; its host when that is under its limit; false if not
local function admitted(q)
  local h = host_of(q)
  if not h then return true end
  local limit = tonumber(redis.call('HGET', k_host_limit, h) or '1')
  local most = tasks_out(limit)
  local out = tonumber(redis.call('HGET', k_host_inflight, h) or '0')
  if out >= most then
    redis.call('ZADD', k_ready, 'XX', PARKED, q)
    redis.call('SADD', a_parked_prefix .. h, q)
    return false
  end
  local t = 0
  if limit == 1 then
    t = tonumber(redis.call('HGET', k_host_next, h) or '0')
  else
    local cooling = a_cooling_prefix .. h
    redis.call('ZREMRANGEBYSCORE', cooling, '-inf', now)
    if out + redis.call('ZCARD', cooling) >= most then
      t = tonumber(redis.call('ZRANGE', cooling, 0, 0, 'WITHSCORES')[2])
    end
  end
  if t > now then
    redis.call('ZADD', k_ready, 'XX', t, q)
    return false
  end
  return h
end
local n, i = 0, 0
while n < room and i < #qs do
  i = i + 1
  local q = qs[i]
  local h = admitted(q)
  if h then
    redis.call('ZREM', k_ready, q)
    local task = redis.call('LPOP', a_prefix .. q)
    if task then
      redis.call('HSET', k_inflight, q, task)
      redis.call('ZADD', k_flying, now, q)  -- how long it is out decides if it lags (level.lua)
      redis.call('RPUSH', k_srq, task)
      if h ~= true then redis.call('HINCRBY', k_host_inflight, h, 1) end
      n = n + 1
    end
  end
end
if i < #qs then return {n, -1} end
return {n, earliest()}
