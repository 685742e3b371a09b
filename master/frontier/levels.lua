-- Functions for the level scripts (a fragment). work_beside_lagging: the queues of
-- ``ready_key`` (ready) and ``inflight_key`` (in flight) that are not in the lagging set,
-- and the lagging queues with work; ``forget`` drops lagging queues with no work from the
-- set (and from ``slow_key``, the lagging queues of slow hosts).
local function work_beside_lagging(ready_key, inflight_key, lagging_key, forget, slow_key)
  local ready = redis.call('ZCARD', ready_key)
  local inflight = redis.call('HLEN', inflight_key)
  local lagging = 0
  for _, q in ipairs(redis.call('SMEMBERS', lagging_key)) do
    local r = redis.call('ZSCORE', ready_key, q) and 1 or 0
    local f = redis.call('HEXISTS', inflight_key, q)
    if r + f > 0 then lagging = lagging + 1
    elseif forget then
      redis.call('SREM', lagging_key, q)
      if slow_key then redis.call('SREM', slow_key, q) end
    end
    ready = ready - r
    inflight = inflight - f
  end
  return ready, inflight, lagging
end
-- The tasks backing off: {those due by ``horizon`` (ms), which hold the level like ready
-- work, those due later}. A task that backs off past the horizon (now + --lag-after) is
-- lagging work: the level does not wait for it, and the commit that put it there switched
-- the depth record on (commit.lua), so its links, behind the level, keep depths exact.
local function backoff_work(backoff_key, horizon)
  local all = redis.call('ZCARD', backoff_key)
  if all == 0 then return 0, 0 end
  local later = redis.call('ZCOUNT', backoff_key, '(' .. horizon, '+inf')
  return all - later, later
end
