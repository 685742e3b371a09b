"""Merging tokenized pages into the index: one store transaction, one new block.

A page's postings replace the ones it had (document frequencies follow), so
merging the same page version twice changes nothing; a page listed twice
counts once (the last copy). A page is skipped when it is gone or its
``fetched_at`` is no longer the one tokenized (fetched again since: that text
is indexed later). Merged pages get ``indexed_at``.

The merge's postings become one new block (``indexer/blocks.py``): one
``postings`` row per distinct term, its postings packed in page order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from srcrawl.indexer.blocks import block_rows, without_pages
from srcrawl.indexer.postings import PostingsBatch
from srcrawl.sql.index_tables import IndexTables
from srcrawl.sql.store import Store


@dataclass
class IndexMerge:
    """What one :func:`merge_index` did."""

    applied: int = 0  # documents whose postings now are in the index
    reindexed: int = 0  # of those, documents that replaced older postings
    stale: int = 0  # documents skipped: the page is gone or was fetched again since
    postings: int = 0
    rows: int = 0  # postings rows written: one per distinct term of the merge
    # the fetched_at of each applied document: how long a page took to become searchable
    fetched: list[float] = field(default_factory=list)


@dataclass
class _Kept:
    """The documents a merge writes, in page order, and their postings with them."""

    fps: np.ndarray  # per document
    lengths: np.ndarray  # per document and field (body, title, anchor)
    n: np.ndarray  # postings per document
    tids: np.ndarray  # per posting, document after document
    tfs: np.ndarray  # per posting: own, boilerplate, title, anchor
    doc_fp: np.ndarray
    doc_len: np.ndarray  # per posting: its document's lengths


def _last_copies(fps: np.ndarray) -> np.ndarray:
    """A mask of the documents to merge: of a page listed twice, its last copy."""
    _, last = np.unique(fps[::-1], return_index=True)
    keep = np.zeros(len(fps), bool)
    keep[len(fps) - 1 - last] = True
    return keep


def _kept(batch: PostingsBatch, keep: np.ndarray) -> _Kept:
    """The kept documents in page order, and their postings with them: the block is
    then one stable sort by term away (postings of a term in page order)."""
    fps = np.asarray(batch.fps, np.int64)
    counts = np.asarray(batch.counts, np.int64)
    docs = np.flatnonzero(keep)
    docs = docs[np.argsort(fps[docs], kind="stable")]
    starts = np.cumsum(counts) - counts
    n = counts[docs]
    order = np.repeat(starts[docs] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
    lengths = np.asarray(batch.lengths, np.int64).reshape(len(fps), -1)[docs]
    return _Kept(
        fps=fps[docs],
        lengths=lengths,
        n=n,
        tids=np.asarray(batch.terms, np.int64)[order],
        tfs=np.asarray(batch.tfs, np.int64)[order],
        doc_fp=np.repeat(fps[docs], n),
        doc_len=np.repeat(lengths, n, axis=0),
    )


OldDoc = tuple[int, int, bytes, tuple[int, int, int]]
"""A doclens row: fp, block, packed term ids, (body, title, anchor) lengths."""


def _drop_postings(tables: IndexTables, old: list[OldDoc]) -> None:
    """Take the pages of ``old`` (doclens rows: fp, block, terms, length) out of their
    blocks, and so their terms' document frequencies."""
    by_block: dict[int, tuple[list[int], list[np.ndarray]]] = {}
    for fp, block, blob, _length in old:
        gone, terms = by_block.setdefault(block, ([], []))
        gone.append(fp)
        terms.append(np.frombuffer(blob, "<i8"))
    for block, (gone, terms) in by_block.items():
        rows = tables.block_rows(block, np.unique(np.concatenate(terms)).tolist())
        if rows:
            tables.rewrite_block(block, *without_pages(rows, gone))


def _doclens_rows(kept: _Kept, block: int) -> list[tuple[int, int, int, int, int, bytes]]:
    """The forward index: each page's field lengths, block and term fingerprints (packed)."""
    packed = kept.tids.astype("<i8").tobytes()
    ends = (np.cumsum(kept.n) * 8).tolist()
    blobs = [packed[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    fps = kept.fps.tolist()
    return [
        (fp, body, title, anchor, block, blob)
        for fp, (body, title, anchor), blob in zip(fps, kept.lengths.tolist(), blobs, strict=True)
    ]


def merge_index(
    store: Store,
    batch: PostingsBatch,
    indexed_at: float,
    *,
    before_commit: Callable[[], None] | None = None,
) -> IndexMerge:
    """Merge tokenized pages into the index in one transaction (see the module doc).

    ``before_commit`` runs last inside the transaction: if it raises, nothing
    of the merge is written. A transaction the store fails for a passing reason
    runs again whole (``Store.run``): merging the same pages twice changes nothing.
    """
    if len(batch.fps) == 0:
        return IndexMerge()
    return store.in_index_tables(lambda tables: _merge(tables, batch, indexed_at, before_commit))


def _merge(
    tables: IndexTables,
    batch: PostingsBatch,
    indexed_at: float,
    before_commit: Callable[[], None] | None,
) -> IndexMerge:
    """One run of :func:`merge_index`'s transaction, from the batch as it came."""
    result = IndexMerge()
    fps = np.asarray(batch.fps, np.int64)
    keep = _last_copies(fps)
    # first: it serializes merges (see IndexTables.next_block)
    block = tables.next_block()
    current = tables.fetched_at(fps[keep].tolist())
    fetched = np.asarray(batch.fetched, np.float64)
    listed = int(keep.sum())
    for i in np.flatnonzero(keep).tolist():
        keep[i] = current.get(int(fps[i])) == float(fetched[i])
    result.stale = listed - int(keep.sum())
    if not keep.any():
        # the block number stays unused: nothing else of the merge is written
        return result
    kept = _kept(batch, keep)
    live = kept.fps.tolist()
    old = tables.doclens(live)
    _drop_postings(tables, old)
    rows = block_rows(kept.tids, kept.doc_fp, kept.tfs, kept.doc_len)
    tables.insert_block(block, rows)
    tables.put_doclens(_doclens_rows(kept, block))
    tables.mark_indexed(live, indexed_at)
    _count(tables, kept, old)
    if before_commit is not None:
        before_commit()
    result.rows, result.postings = len(rows), len(kept.tids)
    result.applied, result.reindexed = len(live), len(old)
    result.fetched = fetched[keep].tolist()
    return result


def remove_pages(
    store: Store, fps: list[int], removed_at: float, *,
    before_commit: Callable[[], None] | None = None,
) -> int:  # fmt: skip
    """Take pages that went away (or are no longer indexable) out of the index in one
    transaction: their postings, their doclens rows, their share of the counters; they
    are marked indexed as they are (nothing). Returns the pages removed. Idempotent: a
    page no longer in doclens is only marked."""

    def remove(tables: IndexTables) -> int:
        tables.next_block()  # serializes with merges (see IndexTables.next_block)
        old = tables.doclens(fps)
        _drop_postings(tables, old)
        tables.delete_doclens([doc[0] for doc in old])
        tables.mark_indexed(fps, removed_at)
        counted = tables.counters()
        if counted is not None:
            gone = [sum(r[3][i] for r in old) for i in range(3)]
            docs = counted[0] - len(old)
            tables.set_counters((docs, *(c - g for c, g in zip(counted[1:], gone, strict=True))))
        if before_commit is not None:
            before_commit()
        return len(old)

    return store.in_index_tables(remove)


def _count(tables: IndexTables, kept: _Kept, old: list[OldDoc]) -> None:
    """Move the index counters by what this merge added and replaced: counting
    doclens afresh would read every indexed page's row on every merge."""
    counted = tables.counters()
    if counted is None:  # a store that never had them: count once
        tables.set_counters(tables.recount())
        return
    added = kept.lengths.sum(axis=0).tolist()
    gone = [sum(r[3][i] for r in old) for i in range(3)]
    docs = counted[0] + len(kept.fps) - len(old)
    body, title, anchor = (c + a - g for c, a, g in zip(counted[1:], added, gone, strict=True))
    tables.set_counters((docs, body, title, anchor))
