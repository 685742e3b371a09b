"""The depth record: the depth each URL was scheduled at, while a shorter path may still come.

A page fetched behind the crawl's level (a lagging host's, a late host's sitemap
seeds) may link to a URL already scheduled deeper; the master looks the URL up
here to see whether the new path is shorter (see the package doc).

Packed, not one Redis hash field a URL: 2^BUCKET_BITS buckets (the top bits of the
fingerprint), each a hash field whose value is a run of 9-byte entries, the
fingerprint big-endian (8 bytes) then the depth (1 byte, 255: none). A Redis hash
field costs some 60–80 bytes whatever it holds, a decimal fingerprint 20 more;
a bucket's overhead is shared by the hundreds of URLs in it, so a URL costs
little more than its 9 bytes (``srcrawl bench memory --depth-record``).

New URLs are appended to their bucket (their fingerprints are new to the seen
test, so not in the record); a URL found nearer is looked up and its byte
rewritten. Both are Lua functions for the frontier's commit script (depth_record.lua),
atomic with the outcomes they come from; depths_of.lua reads depths back.
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


def packed_fp(fp: int) -> bytes:
    """A (signed or unsigned) 64-bit fingerprint as 8 bytes, big-endian."""
    return _FP.pack(fp & 0xFFFF_FFFF_FFFF_FFFF)


def packed_entries(depths: dict[int, int]) -> bytes:
    """fp → depth as the record's 9-byte entries."""
    return b"".join(packed_fp(fp) + bytes((min(d, MAX_DEPTH),)) for fp, d in depths.items())


def unpacked_depths(raw: bytes, n: int) -> list[int | None]:
    """What depths_of.lua answered for ``n`` fingerprints."""
    if len(raw) != n:
        raise ValueError(f"the depth record answered {len(raw)} depths for {n} URLs")
    return [None if d == NONE else d for d in raw]
