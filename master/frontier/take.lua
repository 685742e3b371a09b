-- Moves up to a_count messages from the head of nrq to the tail of the master's batch in
-- hand (its processing list); returns them.
local items = redis.call('LPOP', k_nrq, tonumber(a_count))
if not items then return {} end
push_all(k_in_hand, items, 1)
return items
