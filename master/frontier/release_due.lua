-- Moves up to a_limit stored pages whose time has come into their host queues (the
-- queue name is the task's QUEUE_FIELD), as new tasks of the current level are: from
-- there they wait their host's politeness like any other. Nothing moves while the next
-- level holds new URLs (they come first, and the level barrier is not held up by pages
-- that keep coming due). Returns {pages moved, earliest due time or -1}.
local now = tonumber(a_now)
local function earliest()
  if redis.call('LLEN', k_next_level) > 0 then return -1 end
  local first = redis.call('ZRANGE', k_due, 0, 0, 'WITHSCORES')
  return tonumber(first[2] or '-1')
end
if redis.call('LLEN', k_next_level) > 0 then return {0, -1} end
local fps = redis.call('ZRANGEBYSCORE', k_due, '-inf', now, 'LIMIT', 0, tonumber(a_limit))
local n = 0
for _, fp in ipairs(fps) do
  local task = redis.call('HGET', k_due_tasks, fp)
  redis.call('ZREM', k_due, fp)
  redis.call('HDEL', k_due_tasks, fp)
  if task then
    enqueue(task, now, a_prefix, k_ready, k_inflight, k_qnext)
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', k_stats, 'recrawl_due', n) end
return {n, earliest()}
