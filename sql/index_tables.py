"""The index's tables inside one merge transaction: rows in, rows out.

``postings`` holds one row per (term, block): the term's packed postings in
that block and how many there are; ``doclens`` one row per indexed page: its
length, its block and its packed term ids; ``meta`` the last block number
and the index counters. What the packed columns hold is the indexer's
business (``indexer/blocks.py``): here they are bytes to store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

INDEX_COUNTERS = ("index_docs", "index_length", "index_title_length", "index_anchor_length")
"""Meta keys: indexed documents and the sums of their body, title and anchor lengths
(BM25F's N and mean field lengths), as of the last merge."""

Counters = tuple[int, int, int, int]
"""(documents, body length, title length, anchor length), as INDEX_COUNTERS."""

INDEX_BLOCK = "index_block"
"""Meta key: the number of the last postings block written (one per merge)."""


class IndexTables:
    """Reads and writes of the index's rows, all in the transaction of ``cur``."""

    def __init__(self, store: Store, cur: Any) -> None:
        self.store = store
        self.cur = cur

    def next_block(self) -> int:
        """A new block number, counted in ``meta``.

        Read with a write lock (MySQL: ``FOR UPDATE``; SQLite's write
        transactions hold the database lock from their start): called first,
        it makes concurrent merges run one after the other, each reading what
        the one before committed.
        """
        s = self.store
        row = s._execute(self.cur, s.LOCK_META, (INDEX_BLOCK,)).fetchone()
        block = int(row[0]) + 1 if row else 1
        s._execute(self.cur, s.UPSERT_META, (INDEX_BLOCK, str(block)))
        return block

    def fetched_at(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> fetched_at of the stored pages among ``fps``."""
        rows = self.store._select_in(
            self.cur, "SELECT fp, fetched_at FROM pages WHERE fp IN ({})", fps
        )
        return {int(fp): float(at) for fp, at in rows}

    def doclens(self, fps: Sequence[int]) -> list[tuple[int, int, bytes, tuple[int, int, int]]]:
        """(fp, block, packed term ids, (body, title, anchor) lengths) of the indexed pages
        among ``fps``."""
        rows = self.store._select_in(
            self.cur,
            "SELECT fp, block, terms, length, title_length, anchor_length FROM doclens "
            "WHERE fp IN ({})",
            fps,
        )
        return [
            (int(fp), int(b), bytes(t or b""), (int(n), int(tn), int(an)))
            for fp, b, t, n, tn, an in rows
        ]

    def block_rows(self, block: int, term_ids: Sequence[int]) -> list[tuple[int, bytes]]:
        """(term id, packed postings) of the rows of ``block`` for ``term_ids``."""
        rows = self.store._select_in(
            self.cur, "SELECT term_id, data FROM postings WHERE block = ? AND term_id IN ({})",
            term_ids, (block,),
        )  # fmt: skip
        return [(int(t), bytes(d)) for t, d in rows]

    def rewrite_block(
        self, block: int, kept: Sequence[tuple[int, int, bytes]], emptied: Sequence[int]
    ) -> None:
        """Replace rows of ``block``: ``kept`` (term id, n, data) rewritten, ``emptied`` gone."""
        s = self.store
        s._executemany(
            self.cur, "UPDATE postings SET n = ?, data = ? WHERE term_id = ? AND block = ?",
            [(n, data, tid, block) for tid, n, data in kept],
        )  # fmt: skip
        s._executemany(
            self.cur, "DELETE FROM postings WHERE term_id = ? AND block = ?",
            [(tid, block) for tid in emptied],
        )  # fmt: skip

    def insert_block(self, block: int, rows: Sequence[tuple[int, int, bytes]]) -> None:
        """Write the rows (term id, n, data) of a new block."""
        self.store._executemany(
            self.cur, "INSERT INTO postings (term_id, block, n, data) VALUES (?, ?, ?, ?)",
            [(tid, block, n, data) for tid, n, data in rows],
        )  # fmt: skip

    def put_doclens(self, rows: Sequence[tuple[int, int, int, int, int, bytes]]) -> None:
        """Insert or replace pages' doclens rows: (fp, length, title length, anchor length,
        block, packed term ids)."""
        self.store._executemany(self.cur, self.store.UPSERT_DOCLEN, rows)

    def delete_doclens(self, fps: Sequence[int]) -> None:
        self.store._executemany(self.cur, "DELETE FROM doclens WHERE fp = ?", [(fp,) for fp in fps])

    def mark_indexed(self, fps: Sequence[int], indexed_at: float) -> None:
        for i in range(0, len(fps), 500):
            part = list(fps[i : i + 500])
            # only the number of placeholders is built here, never data
            marks = ", ".join("?" * len(part))
            self.store._execute(
                self.cur, f"UPDATE pages SET indexed_at = ? WHERE fp IN ({marks})",
                [indexed_at, *part],
            )  # fmt: skip

    def counters(self) -> Counters | None:
        """:data:`Counters` from ``meta``; None in a store that never had them."""
        return self.store._index_counters(self.cur)

    def recount(self) -> Counters:
        """:data:`Counters` counted over ``doclens``: every indexed page's row."""
        row = self.store._execute(
            self.cur,
            "SELECT COUNT(*), COALESCE(SUM(length), 0), COALESCE(SUM(title_length), 0), "
            "COALESCE(SUM(anchor_length), 0) FROM doclens",
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])

    def set_counters(self, counters: Counters) -> None:
        self.store._executemany(
            self.cur,
            self.store.UPSERT_META,
            list(zip(INDEX_COUNTERS, [str(c) for c in counters], strict=True)),
        )
