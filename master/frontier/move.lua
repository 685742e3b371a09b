-- Moves the crawl from level a_level to the next (a_what 'advance'; recording, when no
-- partition has lagging work (a_lagging '1'), that the level was reached strictly:
-- ``strict``, see the package doc) or completes it ('complete', at a_now in seconds);
-- 1 if this call did.
if redis.call('HGET', k_state, 'state') == 'complete' then return 0 end
if tonumber(redis.call('HGET', k_state, 'level') or '0') ~= tonumber(a_level) then return 0 end
if a_what == 'advance' then
  if a_lagging ~= '1' then redis.call('HSET', k_state, 'strict', tonumber(a_level) + 1) end
  redis.call('HSET', k_state, 'level', tonumber(a_level) + 1)
else
  redis.call('HSET', k_state, 'state', 'complete', 'finished', a_now)
end
return 1
