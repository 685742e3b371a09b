-- Reads (writes nothing) one partition: {ready queues, queues in flight (both without
-- the lagging ones), lagging queues with work, next-level tasks, nrq messages, batch in
-- hand, the partition's level, its commits}. Tasks backing off count as ready up to
-- a_horizon (ms), as lagging work past it (see backoff_work).
local ready, inflight, lagging = work_beside_lagging(k_ready, k_inflight, k_lagging, false)
local backing, later = backoff_work(k_backoff, tonumber(a_horizon))
ready, lagging = ready + backing, lagging + later
local st = redis.call('HMGET', k_state, 'level', 'commits')
return {ready, inflight, lagging, redis.call('LLEN', k_next_level), redis.call('LLEN', k_nrq),
        redis.call('LLEN', k_in_hand), tonumber(st[1] or '0'), tonumber(st[2] or '0')}
