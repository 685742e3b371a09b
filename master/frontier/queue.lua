-- Functions the frontier's scripts share (a fragment, put after the prelude).

-- the host of a queue that is one of several of its host (``host#k``), or nil
local function host_of(q) return string.match(q, '^(.+)#%d+$') end

-- how many tasks of a host allowed ``limit`` requests in flight may be out with the
-- slaves: a limit above 1 is held by the slaves' host slots (slave/host_slots.py), so
-- the next tasks can wait there; a host held to 1 is held here
local function tasks_out(limit)
  if limit > 1 then return limit * HOST_TASKS_OUT end
  return limit
end

-- unless queue q has a fetch in flight, makes it ready no earlier than its next
-- allowed time (qnext) and not before now; a queue ready already keeps its time
local function make_ready(q, now, ready, inflight, qnext)
  if redis.call('HEXISTS', inflight, q) == 0 then
    local t = tonumber(redis.call('HGET', qnext, q) or '0')
    if t < now then t = now end
    redis.call('ZADD', ready, 'NX', t, q)
  end
end

-- puts ``task`` at the tail of its queue (the queue name is the task's QUEUE_FIELD, the
-- key ``prefix`` .. name) and makes the queue ready (make_ready). A host's sitemap task
-- goes to the head instead: the sooner it is read, the sooner the pages it says changed
-- are fetched.
local function enqueue(task, now, prefix, ready, inflight, qnext)
  local fields = cjson.decode(task)
  local q = fields[QUEUE_FIELD]
  redis.call(fields.sitemaps and 'LPUSH' or 'RPUSH', prefix .. q, task)
  make_ready(q, now, ready, inflight, qnext)
end

-- RPUSHes items[from..] onto key, UNPACK_CHUNK values a call (unpack's C stack is small)
local function push_all(key, items, from)
  for i = from, #items, UNPACK_CHUNK do
    redis.call('RPUSH', key, unpack(items, i, math.min(i + UNPACK_CHUNK - 1, #items)))
  end
end
