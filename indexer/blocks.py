"""The index's postings as stored: blocks of packed postings, and reading them back.

Each merge writes one *block*: a ``postings`` row per distinct term of the
merge, holding that term's postings in page order as packed records of
28 bytes (:func:`posting_dtype`): the page, and per field its term frequency
and length, so that BM25F never joins doclens. A page's ``doclens`` row names
its block and lists its term fingerprints (packed int64), so that a page
merged again can be taken out of its old block. The store reads and writes
these rows as it is handed them; what is inside them is known only here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from srcrawl.sql.store import Store


@functools.cache
def posting_dtype() -> np.dtype:
    """The numpy record of one packed posting (28 bytes, little-endian).

    fp int64; body: tf uint32 (occurrences in the page's own text), dl uint32
    (body length), boiler uint16 (occurrences in its host's boilerplate);
    title: ttf, tdl uint16; anchor: atf uint16, adl uint32. The uint16
    counts are capped at 65,535 (a title or an anchor field longer than
    that is cut at indexing anyway).
    """
    return np.dtype([
        ("fp", "<i8"), ("tf", "<u4"), ("dl", "<u4"), ("boiler", "<u2"), ("ttf", "<u2"),
        ("tdl", "<u2"), ("atf", "<u2"), ("adl", "<u4"),
    ])  # fmt: skip


def records(blobs: Sequence[bytes]) -> np.ndarray:
    """The postings of packed blobs, concatenated (a fresh, writable record array)."""
    return np.frombuffer(b"".join(bytes(b) for b in blobs), posting_dtype()).copy()


def block_rows(
    tids: np.ndarray, fps: np.ndarray, tfs: np.ndarray, dls: np.ndarray
) -> list[tuple[int, int, bytes]]:
    """(term id, postings, packed postings) per distinct term of ``tids``, in term order.

    ``tfs``: per posting, its four term frequencies (own, boilerplate, title,
    anchor); ``dls``: its page's field lengths (body, title, anchor). The
    postings come in page order and stay so within a term (stable sort).
    Raises ValueError if a page lists a term twice.
    """
    if not len(tids):  # only empty pages
        return []
    order = np.argsort(tids, kind="stable")
    t = tids[order]
    dtype = posting_dtype()
    recs = np.empty(len(t), dtype)
    recs["fp"] = fps[order]
    tf, dl = np.minimum(tfs[order], 0xFFFFFFFF), np.minimum(dls[order], 0xFFFFFFFF)
    recs["tf"], recs["boiler"] = tf[:, 0], np.minimum(tf[:, 1], 0xFFFF)
    recs["ttf"], recs["atf"] = np.minimum(tf[:, 2], 0xFFFF), np.minimum(tf[:, 3], 0xFFFF)
    recs["dl"], recs["tdl"], recs["adl"] = dl[:, 0], np.minimum(dl[:, 1], 0xFFFF), dl[:, 2]
    new_term = t[1:] != t[:-1]
    if (~new_term & (recs["fp"][1:] == recs["fp"][:-1])).any():
        raise ValueError("a page lists a term twice")
    starts = np.flatnonzero(np.concatenate(([True], new_term)))
    ends = np.append(starts[1:], len(t))
    raw = recs.tobytes()
    size = dtype.itemsize
    # in key order, so consecutive inserts land on the same B-tree pages
    return [
        (tid, e - s, raw[s * size : e * size])
        for tid, s, e in zip(t[starts].tolist(), starts.tolist(), ends.tolist(), strict=True)
    ]


def without_pages(
    rows: Sequence[tuple[int, bytes]], gone: Sequence[int]
) -> tuple[list[tuple[int, int, bytes]], list[int]]:
    """Block rows (term id, packed postings) with the postings of pages ``gone`` removed.

    Returns the rows that keep postings, as (term id, postings, packed), and
    the term ids left with none.
    """
    dtype = posting_dtype()
    # every row of the block at once: one membership test, one copy
    sizes = np.fromiter((len(r[1]) // dtype.itemsize for r in rows), np.int64, len(rows))
    recs = records([r[1] for r in rows])
    stays = ~np.isin(recs["fp"], np.asarray(gone, np.int64))
    kept_n = np.bincount(np.repeat(np.arange(len(rows)), sizes)[stays], minlength=len(rows))
    raw = recs[stays].tobytes()
    ends = (np.cumsum(kept_n) * dtype.itemsize).tolist()
    kept: list[tuple[int, int, bytes]] = []
    emptied: list[int] = []
    start = 0
    for (tid, _data), n, end in zip(rows, kept_n.tolist(), ends, strict=True):
        if n:
            kept.append((int(tid), n, raw[start:end]))
        else:
            emptied.append(int(tid))
        start = end
    return kept, emptied


def term_postings(
    store: Store,
    term_id: int,
    *,
    limit: int | None = None,
    weigh: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """A term's postings: a numpy record array (:func:`posting_dtype`) in page order.

    With ``limit``, only the ``limit`` postings of highest weight by ``weigh``
    (the ranking's term weight of each posting; by default the body's tf);
    ties by fingerprint.
    """
    recs = records(store.term_blocks(term_id))
    recs = recs[np.argsort(recs["fp"], kind="stable")]
    if limit is not None and len(recs) > limit:
        weights = weigh(recs) if weigh is not None else recs["tf"].astype(np.float64)
        # in page order already, so a stable sort on the weight breaks ties by fp
        best = np.argsort(-weights, kind="stable")[:limit]
        recs = recs[np.sort(best)]
    return recs


def term_postings_among(store: Store, term_id: int, fps: Sequence[int]) -> np.ndarray:
    """A term's postings (as :func:`term_postings`) in the pages ``fps``.

    Reads only the blocks holding those pages' postings.
    """
    wanted = np.unique(np.asarray(fps, np.int64))
    recs = records(store.term_blocks_of_pages(term_id, wanted.tolist()))
    recs = recs[np.isin(recs["fp"], wanted)]
    return recs[np.argsort(recs["fp"], kind="stable")]
