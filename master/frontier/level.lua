-- Returns {ready queues and tasks backing off, queues in flight (both without the lagging
-- ones), lagging queues with work, next-level tasks, nrq messages, tasks still queued
-- behind the ones in flight, tasks in flight from before the level}; forgets lagging
-- queues with no work. The last two are counted (over the queues in flight, lagging ones
-- apart) only when the level could be left with its tail in flight: nothing ready, no
-- outcome unread and a next level waiting; else they are -1.
local ready, inflight, lagging = work_beside_lagging(k_ready, k_inflight, k_lagging, true)
ready = ready + redis.call('ZCARD', k_backoff)
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
