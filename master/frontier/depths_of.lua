-- The depths recorded for packed fingerprints (8 bytes each, a_fps): one byte a
-- fingerprint, its recorded depth or DEPTH_NONE. Reads only.
local out, seen = {}, {}
for i = 1, #a_fps, 8 do
  local fp8 = string.sub(a_fps, i, i + 7)
  local b = depth_bucket(fp8)
  local value = seen[b]
  if value == nil then
    value = redis.call('HGET', k_depths, b) or ''
    seen[b] = value
  end
  local at = depth_entry(value, fp8)
  out[#out + 1] = at and string.sub(value, at + 8, at + 8) or string.char(DEPTH_NONE)
end
return table.concat(out)
