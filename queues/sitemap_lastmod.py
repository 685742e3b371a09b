"""The ``<lastmod>`` sitemaps gave per page fingerprint, kept in Redis for the recrawl schedule.

One hash (``Keys.sitemap_lastmod``): fingerprint -> epoch seconds. Written by
the slave that read a host's sitemaps, read by whoever schedules fetches
again (:func:`lastmod_of`). Bounded: once it holds ``limit`` fingerprints,
only those already in it are updated; the rest are dropped and counted by
the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import redis

from srcrawl.defaults import DEFAULT_SITEMAP_LASTMOD_MAX
from srcrawl.keys import Keys

# KEYS[1] the hash; ARGV[1] the most fields; ARGV[2..] fingerprint, lastmod pairs.
# Returns how many were dropped because the hash is full.
_RECORD = """
local limit = tonumber(ARGV[1])
local dropped = 0
for i = 2, #ARGV, 2 do
  if redis.call('HLEN', KEYS[1]) < limit or redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  else
    dropped = dropped + 1
  end
end
return dropped
"""


def record_lastmod(
    client: redis.Redis,
    keys: Keys,
    lastmods: Iterable[tuple[int, float]],
    limit: int = DEFAULT_SITEMAP_LASTMOD_MAX,
) -> int:
    """Keep the (fingerprint, lastmod) pairs; how many were dropped (the hash was full)."""
    args: list[int | str] = []
    for fp, when in lastmods:
        args += [fp, repr(float(when))]
    if not args:
        return 0
    return int(client.eval(_RECORD, 1, keys.sitemap_lastmod, limit, *args))


def lastmod_of(client: redis.Redis, keys: Keys, fps: Sequence[int]) -> dict[int, float]:
    """fingerprint -> the ``<lastmod>`` a sitemap gave, for those of ``fps`` that have one."""
    if not fps:
        return {}
    values = client.hmget(keys.sitemap_lastmod, list(fps))
    return {fp: float(v) for fp, v in zip(fps, values, strict=True) if v is not None}
