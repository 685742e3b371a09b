"""The graph cut by destination ranges, and the map step over one cut.

Shard ``i`` holds the in-links of the destination nodes ``lo … hi-1``: edge
``k`` of the shard goes from node ``sources[k]`` to node ``lo + rows[k]``.
Given ``x = rank / outdeg`` for every node, a shard's partial sums are, per
destination, the sum of ``x`` over its sources; the shards' sums side by
side are the whole link term of one PageRank iteration.

Within a shard the edges are sorted by source, not by destination: the
gather ``x[sources]`` then walks ``x`` forwards (about three times faster
than the random walk of a CSC layout), and the scatter-add into the shard's
own rows stays in cache, since a shard has few rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from srcrawl.core.defaults import DEFAULT_PAGERANK_SHARD_CHUNK
from srcrawl.queues.envelope import decode, encode

Buffer = bytes | memoryview

ROW_COST = 1.0
"""Work of one destination row relative to one edge, for balancing the cuts."""

_INDEX = np.dtype("<i4")


@dataclass(frozen=True)
class Shard:
    """The in-links of destinations ``lo … hi-1`` (see the module docstring)."""

    index: int
    lo: int
    hi: int
    sources: np.ndarray
    """int32[nnz] (intp once unpacked): source node of each edge, ascending."""
    rows: np.ndarray
    """int32[nnz] (intp once unpacked): destination of each edge, minus ``lo``."""

    @property
    def nnz(self) -> int:
        return len(self.sources)

    def pack(self, version: int, chunk_bytes: int = DEFAULT_PAGERANK_SHARD_CHUNK) -> list[Buffer]:
        """The shard as stored: a header message, then ``sources`` and ``rows`` as
        little-endian int32, cut into chunks of at most ``chunk_bytes`` (uncopied)."""
        fields = {
            "version": version,
            "shard": self.index,
            "lo": self.lo,
            "hi": self.hi,
            "nnz": self.nnz,
        }
        step = max(1, chunk_bytes // _INDEX.itemsize)
        parts: list[Buffer] = [encode("shard", fields)]
        for column in (self.sources, self.rows):
            flat = np.ascontiguousarray(column, dtype=_INDEX)
            parts += [memoryview(flat[i : i + step]).cast("B") for i in range(0, len(flat), step)]
        return parts

    @classmethod
    def unpack(cls, parts: Sequence[bytes]) -> tuple[int, Shard]:
        """(graph version, shard) of a stored shard; ValueError if it is inconsistent.

        Its ``sources`` and ``rows`` come back as native-width integers, what
        ShardSums works with: the chunks are converted as they are copied out,
        one pass over the bytes (a read of one large value instead costs Redis
        and hiredis more time than the several smaller ones of a chunked shard).
        """
        if not parts:
            raise ValueError("a shard has a header")
        msg = decode(parts[0])
        if msg.kind != "shard":
            raise ValueError(f"expected a shard, got a {msg.kind!r} message")
        head = [msg.get(name) for name in ("version", "shard", "lo", "hi", "nnz")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in head):
            raise ValueError("shard header lacks version, shard, lo, hi or nnz")
        version, index, lo, hi, nnz = head
        sizes = [len(chunk) for chunk in parts[1:]]
        if hi <= lo or nnz < 0 or sum(sizes) != 2 * nnz * _INDEX.itemsize:
            raise ValueError("shard payload does not match its header")
        if any(size % _INDEX.itemsize for size in sizes):
            raise ValueError("shard payload is cut inside a value")
        both = np.empty(2 * nnz, dtype=np.intp)
        at = 0
        for chunk in parts[1:]:
            values = np.frombuffer(chunk, dtype=_INDEX)
            both[at : at + len(values)] = values
            at += len(values)
        sources, rows = both[:nnz], both[nnz:]
        if nnz and (sources.min() < 0 or rows.min() < 0 or rows.max() >= hi - lo):
            raise ValueError("shard names a node outside its ranges")
        return version, cls(index, lo, hi, sources, rows)


def shard_count(edges: int, nodes: int, edges_per_shard: int) -> int:
    """How many shards a graph gets: about ``edges_per_shard`` edges each, at least one."""
    if nodes <= 0:
        return 0
    return max(1, min(nodes, math.ceil(edges / max(1, edges_per_shard))))


def cut_shards(src: np.ndarray, dst: np.ndarray, n: int, count: int) -> list[Shard]:
    """Cut the edges (``src[i] → dst[i]``) of an ``n``-node graph into at most
    ``count`` shards of contiguous destination ranges with about equal work.

    Every destination belongs to exactly one shard. Edges keep their order
    within a shard, so edges sorted by source (as a Graph's are) stay so.
    """
    if n <= 0:
        return []
    count = max(1, min(count, n))
    work = np.zeros(n + 1, dtype=np.float64)
    np.cumsum(np.bincount(dst, minlength=n) + ROW_COST, out=work[1:])
    cuts = np.searchsorted(work, work[-1] * np.arange(1, count) / count)
    bounds = np.unique(np.concatenate(([0], cuts, [n])))
    # a stable sort by shard number: a radix sort while the numbers fit 16 bits
    label = np.searchsorted(bounds, dst, side="right") - 1
    label = label.astype(np.int16 if len(bounds) < 2**15 else np.int64)
    order = np.argsort(label, kind="stable")
    sizes = np.bincount(label, minlength=len(bounds) - 1)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    sources, targets = src[order].astype(np.int32), dst[order]
    shards = []
    for i, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        a, b = int(offsets[i]), int(offsets[i + 1])
        rows = (targets[a:b] - lo).astype(np.int32)
        shards.append(Shard(i, lo, hi, sources[a:b], rows))
    return shards


class ShardSums:
    """A shard made ready for repeated map steps (what a slave keeps cached)."""

    def __init__(self, shard: Shard) -> None:
        self.index = shard.index
        self.lo = shard.lo
        self.hi = shard.hi
        # native-width indices: take() and bincount() would convert int32 each time
        # (an unpacked shard has them already: no copy then)
        self.sources = np.asarray(shard.sources, dtype=np.intp)
        self.rows = np.asarray(shard.rows, dtype=np.intp)
        self.max_source = int(self.sources.max()) if len(self.sources) else -1
        self.nbytes = self.sources.nbytes + self.rows.nbytes

    def sums(self, x: np.ndarray) -> np.ndarray:
        """float64[hi - lo]: for each destination, the sum of ``x`` over its sources.

        ``x`` must have more than ``max_source`` entries.
        """
        # mode="clip" skips the per-index bounds error path; max_source is checked
        gathered = np.take(x, self.sources, mode="clip")
        sums = np.bincount(self.rows, weights=gathered, minlength=self.hi - self.lo)
        # bincount of no values gives integers even with weights: a shard without
        # in-links must still give float sums (the caller scales them in place)
        return sums.astype(np.float64, copy=False)
