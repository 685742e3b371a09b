"""The index's marks on pages: which pages it holds as of their last fetch (``indexed_at``),
which are still to be indexed or dropped from it, and the documents it reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from srcrawl.core.defaults import DEFAULT_STORE_BATCH
from srcrawl.sql.pages import INDEXABLE
from srcrawl.sql.warc_pointers import TEXT_COLUMNS, WarcPointers


class IndexMarks(WarcPointers):
    """What the index reads from the pages and marks on them."""

    def host_texts(self, host: str, limit: int) -> list[str]:
        """The text of up to ``limit`` indexable pages of ``host`` (the first by fingerprint)."""
        rows = self._query(
            f"SELECT {TEXT_COLUMNS} FROM pages WHERE host = ? AND {INDEXABLE} ORDER BY fp LIMIT ?",
            (host, limit),
        )
        return [self._text(r) for r in rows]

    def unindexed_pages(self, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` fingerprints of pages unindexed since their last fetch, after ``after``.

        Only pages whose fetch gave a usable body (see :data:`INDEXABLE`).

        In fingerprint order, so a caller pages through them with the last one it got.
        """
        return self._pages_where(f"indexed_at IS NULL AND {INDEXABLE}", after, limit)

    def indexable_pages(self, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` fingerprints of every indexable page, marked or not, after
        ``after``, in fingerprint order (what a rebuild of the index schedules)."""
        return self._pages_where(INDEXABLE, after, limit)

    def unindexable_unmarked(self, limit: int, after: int | None = None) -> list[int]:
        """Up to ``limit`` fingerprints of pages fetched since their last index pass that
        are not indexable (gone, a redirect, an error): the index deletes their documents
        (if it has them) and then marks them with :meth:`settle_unindexable`. In
        fingerprint order, after ``after``."""
        return self._pages_where(f"indexed_at IS NULL AND NOT ({INDEXABLE})", after, limit)

    def _pages_where(self, where: str, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` fingerprints of the pages ``where`` holds of, after ``after``."""
        sql, params = f"SELECT fp FROM pages WHERE {where} ORDER BY fp LIMIT ?", [limit]
        if after is not None:
            sql = f"SELECT fp FROM pages WHERE {where} AND fp > ? ORDER BY fp LIMIT ?"
            params = [after, limit]
        rows = self.run(lambda cur: self._execute(cur, sql, params).fetchall(), read_only=True)
        return [int(r[0]) for r in rows]

    def settle_unindexable(self, fps: Sequence[int], done_at: float) -> int:
        """Mark the pages ``fps`` done at ``done_at`` if they are still unmarked and not
        indexable (a page stored anew meanwhile is left to the index); they are unmarked
        when fetched again (the page upsert). Returns how many were marked."""

        def settle(cur: Any) -> int:
            marked = 0
            for i in range(0, len(fps), 500):
                part = list(fps[i : i + 500])
                done = self._execute(
                    cur,
                    f"UPDATE pages SET indexed_at = ? WHERE fp IN ({', '.join('?' * len(part))}) "
                    f"AND indexed_at IS NULL AND NOT ({INDEXABLE})",
                    [done_at, *part],
                )
                marked += max(done.rowcount, 0)
            return marked

        return self.run(settle)

    def mark_indexed(self, versions: Sequence[tuple[int, float]], indexed_at: float) -> int:
        """Mark pages indexed, each only if its ``fetched_at`` is still the one that was
        indexed: a page fetched again meanwhile stays unmarked, for the next pass.
        ``versions``: (fp, fetched_at). Returns how many were asked for."""

        def mark(cur: Any) -> int:
            marked = 0
            for i in range(0, len(versions), DEFAULT_STORE_BATCH):
                rows = [(indexed_at, fp, at) for fp, at in versions[i : i + DEFAULT_STORE_BATCH]]
                self._executemany(
                    cur, "UPDATE pages SET indexed_at = ? WHERE fp = ? AND fetched_at = ?", rows
                )
                marked += len(rows)
            return marked

        return self.run(mark)

    def fetched_at(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> fetched_at of the stored pages among ``fps``."""
        rows = self.run(
            lambda cur: self._select_in(
                cur, "SELECT fp, fetched_at FROM pages WHERE fp IN ({})", fps
            ),
            read_only=True,
        )
        return {int(fp): float(at) for fp, at in rows}

    def indexed_pages(self) -> int:
        """Pages the index holds as of their last fetch (indexable and marked)."""
        row = self.run(
            lambda cur: self._execute(
                cur, f"SELECT COUNT(*) FROM pages WHERE indexed_at IS NOT NULL AND {INDEXABLE}"
            ).fetchone(),
            read_only=True,
        )
        return int(row[0])

    def hit_pages(self, fps: Sequence[int]) -> list[tuple[int, str, str]]:
        """(fp, url, title) of the stored pages among ``fps``, any order: what a search hit
        shows besides its snippet (no text, so no WARC file read)."""
        rows = self.run(
            lambda cur: self._select_in(
                cur, "SELECT fp, url, title FROM pages WHERE fp IN ({})", fps
            ),
            read_only=True,
        )
        return [(int(r[0]), r[1], r[2]) for r in rows]

    def index_documents(self, fps: Sequence[int]) -> list[tuple[int, float, str, str, str]]:
        """(fp, fetched_at, url, title, text) of the stored pages among ``fps``, any order."""
        rows = self.run(
            lambda cur: self._select_in(
                cur,
                f"SELECT fp, fetched_at, url, title, {TEXT_COLUMNS} FROM pages WHERE fp IN ({{}})",
                fps,
            ),
            read_only=True,
        )
        # texts in WARC files are read after the transaction: no lock held meanwhile
        return [(int(r[0]), float(r[1]), r[2], r[3], self._text(r[4:])) for r in rows]

    def unmark_indexable(self) -> int:
        """Mark every indexable page unindexed (a rebuilt index is about to replace the
        index, and marks only what it holds); returns how many were marked before."""

        def unmark(cur: Any) -> int:
            done = self._execute(
                cur,
                f"UPDATE pages SET indexed_at = NULL WHERE indexed_at IS NOT NULL AND {INDEXABLE}",
            )
            return max(done.rowcount, 0)

        return self.run(unmark)

    def reset_index(self) -> None:
        """Mark every page unindexed (benchmarks rebuild the index from scratch)."""

        def reset(cur: Any) -> None:
            self._execute(cur, "UPDATE pages SET indexed_at = NULL")

        self.run(reset)
