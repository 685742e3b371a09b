"""The link graph of the stored pages, in compact node ids.

Nodes are the rows of the ``pages`` table; node ``i`` is the ``i``-th page in
fingerprint order. Edges are the distinct links between two stored pages:
links to pages that were never stored are dropped, so are self-links, and
with ``skip_internal`` so are links between two pages of one host (as
Nutch's LinkRank does, so a site cannot vote for itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

LINK_READ_BATCH = 200_000
"""Links read from the store per query while the graph is built."""


@dataclass(frozen=True)
class Graph:
    """Nodes and distinct edges, the edges sorted by (source, destination)."""

    fps: np.ndarray
    """int64[n], ascending: node id -> URL fingerprint."""
    src: np.ndarray
    """int32[m]: source node of each edge."""
    dst: np.ndarray
    """int32[m]: destination node of each edge."""
    outdeg: np.ndarray = field(init=False, repr=False, compare=False)
    """int64[n]: out-links of each node (0 for dangling nodes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "outdeg", np.bincount(self.src, minlength=self.n))

    @property
    def n(self) -> int:
        return len(self.fps)

    @property
    def m(self) -> int:
        return len(self.src)


def _as_pairs(links: np.ndarray | Sequence[tuple[int, int]]) -> np.ndarray:
    if isinstance(links, list) and links and isinstance(links[0], tuple):
        # a store batch: flattening through fromiter is ~3x faster than asarray;
        # the length check catches any tuple that is not a pair
        flat = np.fromiter(chain.from_iterable(links), dtype=np.int64)
        if len(flat) == 2 * len(links) and all(len(p) == 2 for p in links):
            return flat.reshape(-1, 2)
    pairs = np.asarray(links, dtype=np.int64)
    if pairs.size == 0:
        return np.empty((0, 2), dtype=np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"links must be (source, destination) pairs, got shape {pairs.shape}")
    return pairs


class GraphBuilder:
    """Collects links a batch at a time and maps their fingerprints to node ids."""

    def __init__(self, fps: np.ndarray, hosts: np.ndarray | None = None) -> None:
        """``fps``: the stored pages' fingerprints; ``hosts``: a host id per page, or
        None to keep links within one host."""
        fps = np.asarray(fps, dtype=np.int64)
        order = np.argsort(fps, kind="stable")
        fps = fps[order]
        if len(fps) > 1 and not np.all(fps[1:] != fps[:-1]):
            raise ValueError("page fingerprints must be unique")
        if len(fps) >= 2**31:
            raise ValueError("more than 2**31 - 1 pages do not fit int32 node ids")
        self.fps = fps
        self.hosts = None if hosts is None else np.asarray(hosts, dtype=np.int64)[order]
        self._src: list[np.ndarray] = []
        self._dst: list[np.ndarray] = []

    def _ids(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Node ids of ``keys`` and a mask of the keys that are stored pages."""
        ids = np.searchsorted(self.fps, keys)
        np.minimum(ids, len(self.fps) - 1, out=ids)
        return ids, self.fps[ids] == keys

    def add(self, links: np.ndarray | Sequence[tuple[int, int]]) -> None:
        """Add (source fp, destination fp) links; those that are no edge are dropped."""
        pairs = _as_pairs(links)
        if not len(pairs) or not len(self.fps):
            return
        src, src_ok = self._ids(pairs[:, 0])
        dst, dst_ok = self._ids(pairs[:, 1])
        keep = src_ok & dst_ok & (src != dst)
        if self.hosts is not None:
            keep &= self.hosts[src] != self.hosts[dst]
        self._src.append(src[keep].astype(np.int32))
        self._dst.append(dst[keep].astype(np.int32))

    def build(self) -> Graph:
        """The graph of every link added so far, duplicates collapsed."""
        n = len(self.fps)
        if not self._src:
            empty = np.empty(0, dtype=np.int32)
            return Graph(self.fps, empty, empty.copy())
        key = np.concatenate(self._src).astype(np.int64) * n + np.concatenate(self._dst)
        self._src.clear()
        self._dst.clear()
        # the store hands links out in (src, dst) order, which node ids keep
        key = distinct_sorted(key if is_sorted(key) else np.sort(key))
        return Graph(self.fps, (key // n).astype(np.int32), (key % n).astype(np.int32))


def is_sorted(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or np.all(a[1:] >= a[:-1]))


def distinct_sorted(a: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array, in order.

    What np.unique returns, but numpy 2's np.unique takes a hash-based path
    that is ~100x slower than a sort on tens of millions of integers.
    """
    if len(a) < 2:
        return a
    first = np.empty(len(a), dtype=bool)
    first[0] = True
    np.not_equal(a[1:], a[:-1], out=first[1:])
    return a[first]


def host_ids(hosts: Iterable[str]) -> np.ndarray:
    """A small integer per distinct host name, in input order."""
    table: dict[str, int] = {}
    return np.fromiter((table.setdefault(h, len(table)) for h in hosts), dtype=np.int64)


def load_graph(store: Store, *, skip_internal: bool = False) -> Graph:
    """The graph of every page and link in ``store`` (see the module docstring)."""
    fps: list[int] = []
    hosts: list[str] = []
    for batch in store.iter_page_hosts():
        for fp, host in batch:
            fps.append(fp)
            hosts.append(host)
    builder = GraphBuilder(
        np.array(fps, dtype=np.int64), host_ids(hosts) if skip_internal else None
    )
    del fps, hosts
    for links in store.iter_links(batch=LINK_READ_BATCH):
        builder.add(links)
    return builder.build()
