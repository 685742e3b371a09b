-- Returns {ready queues and tasks backing off, queues in flight (both without the lagging
-- ones), lagging queues with work and tasks backing off past now + a_lag_after, next-level
-- tasks, nrq messages, tasks still queued behind the ones in flight, tasks in flight from
-- before the level}; forgets lagging queues with no work. The last two are counted (over
-- the queues in flight, lagging ones apart) only when the level could be left with its
-- tail in flight: nothing ready, no outcome unread and a next level waiting; else -1.
-- First, a queue whose task has been in flight for a_lag_after ms or longer (its host is
-- slow to answer, or does not) becomes lagging (and slow), and the depth record is
-- switched on in the same step, as the commit does for a robots.txt deferral: the level
-- goes on without it, and what its task and queue hold comes behind the level.
local now, lag_after = tonumber(a_now), tonumber(a_lag_after)
local slow = redis.call('ZRANGEBYSCORE', k_flying, '-inf', now - lag_after)
local marked = 0
for _, q in ipairs(slow) do
  if redis.call('HEXISTS', k_inflight, q) == 1 and redis.call('SADD', k_lagging, q) == 1 then
    redis.call('SADD', k_slow, q)
    marked = marked + 1
  end
end
if marked > 0 then
  redis.call('HSET', k_state, 'record', 1)
  redis.call('HINCRBY', k_stats, 'slow_lagging', marked)
end
local ready, inflight, lagging = work_beside_lagging(k_ready, k_inflight, k_lagging, true, k_slow)
local backing, later = backoff_work(k_backoff, now + lag_after)
ready, lagging = ready + backing, lagging + later
local nextlevel, nrq = redis.call('LLEN', k_next_level), redis.call('LLEN', k_nrq)
local queued, behind = -1, -1
if ready == 0 and nrq == 0 and nextlevel > 0 and inflight > 0 then
  queued, behind = 0, 0
  local level = tonumber(redis.call('HGET', k_state, 'level') or '0')
  local flying = redis.call('HGETALL', k_inflight)
  for i = 1, #flying, 2 do
    local q = flying[i]
    if redis.call('SISMEMBER', k_lagging, q) == 0 then
      queued = queued + redis.call('LLEN', a_prefix .. q)
      local d = tonumber(string.match(flying[i + 1], '"depth":(%d+)') or '0')
      if d < level then behind = behind + 1 end
    end
  end
end
return {ready, inflight, lagging, nextlevel, nrq, queued, behind}
