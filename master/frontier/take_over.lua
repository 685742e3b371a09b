-- What a master does when it takes a crawl over: the batch a previous master had in hand
-- goes back to the head of nrq, and the crawl is running (a_now in seconds).
while redis.call('RPOPLPUSH', k_in_hand, k_nrq) do end
redis.call('HSETNX', k_state, 'level', 0)
redis.call('HSET', k_state, 'state', 'running', 'updated', a_now)
