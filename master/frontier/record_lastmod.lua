-- Keeps the (fingerprint, lastmod) pairs of ARGV from ARGV_REST on in k_lastmod, which
-- holds at most a_limit fields. Returns how many were dropped because it is full.
local limit = tonumber(a_limit)
local dropped = 0
for i = ARGV_REST, #ARGV, 2 do
  if redis.call('HLEN', k_lastmod) < limit or redis.call('HEXISTS', k_lastmod, ARGV[i]) == 1 then
    redis.call('HSET', k_lastmod, ARGV[i], ARGV[i + 1])
  else
    dropped = dropped + 1
  end
end
return dropped
