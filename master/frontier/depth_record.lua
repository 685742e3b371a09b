-- The depth record's functions (a fragment; see depth_record.py). The bucket of an entry
-- (or of a packed fingerprint), and where in a bucket's value the entry of fingerprint
-- ``fp8`` starts (nil: not there). Entries are DEPTH_ENTRY bytes, so a match must start
-- at an entry's first byte.
local function depth_bucket(fp8)
  local a, b = string.byte(fp8, 1, 2)
  return a * DEPTH_HIGH + math.floor(b / DEPTH_LOW)
end
local function depth_entry(value, fp8)
  local from = 1
  while true do
    local at = string.find(value, fp8, from, true)
    if not at then return nil end
    if (at - 1) % DEPTH_ENTRY == 0 then return at end
    from = at + 1
  end
end
-- appends the packed entries of new URLs to their buckets, one write a bucket
local function depth_append(key, packed)
  local parts = {}
  for i = 1, #packed, DEPTH_ENTRY do
    local b = depth_bucket(string.sub(packed, i, i + 1))
    parts[b] = parts[b] or {}
    table.insert(parts[b], string.sub(packed, i, i + DEPTH_ENTRY - 1))
  end
  for b, list in pairs(parts) do
    local value = redis.call('HGET', key, b) or ''
    redis.call('HSET', key, b, value .. table.concat(list))
  end
end
-- sets the depth of URLs that may be recorded already (a shorter path found)
local function depth_set(key, packed)
  for i = 1, #packed, DEPTH_ENTRY do
    local entry = string.sub(packed, i, i + DEPTH_ENTRY - 1)
    local fp8 = string.sub(entry, 1, 8)
    local b = depth_bucket(fp8)
    local value = redis.call('HGET', key, b) or ''
    local at = depth_entry(value, fp8)
    if at then
      value = string.sub(value, 1, at + 7) .. string.sub(entry, 9) .. string.sub(value, at + 9)
    else
      value = value .. entry
    end
    redis.call('HSET', key, b, value)
  end
end
