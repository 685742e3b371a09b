-- Releases up to a_chunk next-level tasks into their queues (the queue name is the
-- task's QUEUE_FIELD). Returns the tasks left in the next level.
local now = tonumber(a_now)
local tasks = redis.call('LRANGE', k_next_level, 0, tonumber(a_chunk) - 1)
if #tasks > 0 then redis.call('LTRIM', k_next_level, #tasks, -1) end
for _, task in ipairs(tasks) do
  enqueue(task, now, a_prefix, k_ready, k_inflight, k_qnext)
end
return redis.call('LLEN', k_next_level)
