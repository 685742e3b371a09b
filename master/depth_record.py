"""The depth record: the depth each URL was scheduled at, while a shorter path may still come.

A page fetched behind the crawl's level (a lagging host's, a late host's sitemap
seeds) may link to a URL already scheduled deeper; the master looks the URL up
here to see whether the new path is shorter (see master/frontier.py).

Packed, not one Redis hash field a URL: 2^BUCKET_BITS buckets (the top bits of the
fingerprint), each a hash field whose value is a run of 9-byte entries, the
fingerprint big-endian (8 bytes) then the depth (1 byte, 255: none). A Redis hash
field costs some 60–80 bytes whatever it holds, a decimal fingerprint 20 more;
a bucket's overhead is shared by the hundreds of URLs in it, so a URL costs
little more than its 9 bytes (``srcrawl bench memory --depth-record``).

New URLs are appended to their bucket (their fingerprints are new to the seen
test, so not in the record); a URL found nearer is looked up and its byte
rewritten. Both are Lua functions for the frontier's commit script, atomic with
the outcomes they come from; :data:`DEPTHS_OF` reads depths back.
"""

from __future__ import annotations

import struct

BUCKET_BITS = 12
"""4096 buckets: a crawl of a million recorded URLs has ~250 in a bucket (2.2 KB)."""
ENTRY = 9
NONE = 255
MAX_DEPTH = 254
"""Deeper URLs are recorded at this depth (a path found shorter than it still improves)."""

_FP = struct.Struct(">Q")

# Lua: the bucket of an entry (or of a packed fingerprint), and where in a bucket's
# value the entry of fingerprint ``fp8`` starts (nil: not there). Entries are 9 bytes,
# so a match must start at an entry's first byte.
LUA_FUNCTIONS = f"""
local function depth_bucket(fp8)
  local a, b = string.byte(fp8, 1, 2)
  return a * {1 << (BUCKET_BITS - 8)} + math.floor(b / {1 << (16 - BUCKET_BITS)})
end
local function depth_entry(value, fp8)
  local from = 1
  while true do
    local at = string.find(value, fp8, from, true)
    if not at then return nil end
    if (at - 1) % {ENTRY} == 0 then return at end
    from = at + 1
  end
end
-- appends the packed entries of new URLs to their buckets, one write a bucket
local function depth_append(key, packed)
  local parts = {{}}
  for i = 1, #packed, {ENTRY} do
    local b = depth_bucket(string.sub(packed, i, i + 1))
    parts[b] = parts[b] or {{}}
    table.insert(parts[b], string.sub(packed, i, i + {ENTRY - 1}))
  end
  for b, list in pairs(parts) do
    local value = redis.call('HGET', key, b) or ''
    redis.call('HSET', key, b, value .. table.concat(list))
  end
end
-- sets the depth of URLs that may be recorded already (a shorter path found)
local function depth_set(key, packed)
  for i = 1, #packed, {ENTRY} do
    local entry = string.sub(packed, i, i + {ENTRY - 1})
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
"""

# KEYS[1] the record; ARGV[1] packed fingerprints (8 bytes each). Returns one byte a
# fingerprint: its recorded depth, or 255 (none).
DEPTHS_OF = (
    LUA_FUNCTIONS
    + f"""
local out, seen = {{}}, {{}}
for i = 1, #ARGV[1], 8 do
  local fp8 = string.sub(ARGV[1], i, i + 7)
  local b = depth_bucket(fp8)
  local value = seen[b]
  if value == nil then
    value = redis.call('HGET', KEYS[1], b) or ''
    seen[b] = value
  end
  local at = depth_entry(value, fp8)
  out[#out + 1] = at and string.sub(value, at + 8, at + 8) or '\\{NONE}'
end
return table.concat(out)
"""
)


def packed_fp(fp: int) -> bytes:
    """A (signed or unsigned) 64-bit fingerprint as 8 bytes, big-endian."""
    return _FP.pack(fp & 0xFFFF_FFFF_FFFF_FFFF)


def packed_entries(depths: dict[int, int]) -> bytes:
    """fp → depth as the record's 9-byte entries."""
    return b"".join(packed_fp(fp) + bytes((min(d, MAX_DEPTH),)) for fp, d in depths.items())


def unpacked_depths(raw: bytes, n: int) -> list[int | None]:
    """What DEPTHS_OF answered for ``n`` fingerprints."""
    if len(raw) != n:
        raise ValueError(f"the depth record answered {len(raw)} depths for {n} URLs")
    return [None if d == NONE else d for d in raw]
