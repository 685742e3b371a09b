-- A function for the level scripts (a fragment): the queues of ``ready_key`` (ready) and
-- ``inflight_key`` (in flight) that are not in the lagging set, and the lagging queues
-- with work; ``forget`` drops lagging queues with no work from the set.
local function work_beside_lagging(ready_key, inflight_key, lagging_key, forget)
  local ready = redis.call('ZCARD', ready_key)
  local inflight = redis.call('HLEN', inflight_key)
  local lagging = 0
  for _, q in ipairs(redis.call('SMEMBERS', lagging_key)) do
    local r = redis.call('ZSCORE', ready_key, q) and 1 or 0
    local f = redis.call('HEXISTS', inflight_key, q)
    if r + f > 0 then lagging = lagging + 1
    elseif forget then redis.call('SREM', lagging_key, q) end
    ready = ready - r
    inflight = inflight - f
  end
  return ready, inflight, lagging
end
