"""PageRank scores (``ranks``) and their mean (kept in ``meta``), replaced whole by each rank
run and read in one snapshot by a search."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from srcrawl.sql.base import StoreBase, chunks

RANK_MEAN = "rank_mean"
"""Meta key: the mean PageRank score of the ranked pages, written with the scores (absent
while no page is ranked), so a search reads the two in one snapshot."""


@dataclass
class RankSnapshot:
    """The mean PageRank score (None: no page is ranked) and the pages' scores, read in
    one transaction (see :meth:`Ranks.rank_snapshot`)."""

    store: Ranks
    cur: Any
    mean: float | None

    def scores(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> PageRank score of the ranked pages among ``fps``."""
        rows = self.store._select_in(self.cur, "SELECT fp, score FROM ranks WHERE fp IN ({})", fps)
        return {int(fp): float(score) for fp, score in rows}

    def out_links(self, fps: Sequence[int]) -> dict[int, int]:
        """fp -> how many pages it links to, of the pages among ``fps`` that link to any
        (read by the links table's key, which starts with the source)."""
        rows = self.store._select_in(
            self.cur, "SELECT src, COUNT(*) FROM links WHERE src IN ({}) GROUP BY src", fps
        )
        return {int(fp): int(n) for fp, n in rows}

    def out_link_mean(self) -> float:
        """The mean number of pages a page that links to any links to (0: no links).
        Reads the whole links table: for measuring the signal (``srcrawl bench loco``), not
        kept as the rank mean is."""
        row = self.store._execute(
            self.cur, "SELECT COUNT(*), COUNT(DISTINCT src) FROM links"
        ).fetchone()
        return row[0] / row[1] if row and row[1] else 0.0


class Ranks(StoreBase):
    """The rank table, its mean, and the snapshot a search reads them in."""

    def replace_ranks(self, ranks: Iterable[tuple[int, float]]) -> int:
        """Replace the whole rank table in one transaction; returns the rows written.

        ``ranks`` is read once per run of the transaction: an iterator is read into a
        list first, so a run after a passing error writes every score again."""
        rows = list(ranks) if isinstance(ranks, Iterator) else ranks

        def write(cur: Any) -> int:
            n = 0
            self._execute(cur, "DELETE FROM ranks")
            for batch in chunks(rows, self.batch_size * 20):
                self._executemany(cur, "INSERT INTO ranks (fp, score) VALUES (?, ?)", batch)
                n += len(batch)
            self._write_rank_mean(cur)
            return n

        return self.run(write)

    def _write_rank_mean(self, cur: Any) -> None:
        """:data:`RANK_MEAN` of the scores in the rank table, in ``cur``'s transaction."""
        (mean,) = self._execute(cur, "SELECT AVG(score) FROM ranks").fetchone()
        if mean is None:
            self._execute(cur, "DELETE FROM meta WHERE k = ?", (RANK_MEAN,))
        else:
            self._execute(cur, self.UPSERT_META, (RANK_MEAN, repr(float(mean))))

    def top_ranks(self, limit: int | None = None) -> list[tuple[str, float]]:
        """(url, rank) of ranked pages, highest rank first."""
        sql = "SELECT p.url, r.score FROM ranks r JOIN pages p ON p.fp = r.fp ORDER BY r.score DESC"
        if limit is None:
            return [(u, float(s)) for u, s in self._query(sql)]
        return [(u, float(s)) for u, s in self._query(sql + " LIMIT ?", (limit,))]

    def page_ranks(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> PageRank score of the ranked pages among ``fps``."""
        rows = self.run(
            lambda cur: self._select_in(cur, "SELECT fp, score FROM ranks WHERE fp IN ({})", fps),
            read_only=True,
        )
        return {int(fp): float(score) for fp, score in rows}

    def rank_mean(self) -> float | None:
        """The mean PageRank score, or None when no page is ranked."""
        return self.run(self._rank_mean, read_only=True)

    def _rank_mean(self, cur: Any) -> float | None:
        row = self._execute(cur, "SELECT v FROM meta WHERE k = ?", (RANK_MEAN,)).fetchone()
        return None if row is None else float(row[0])

    @contextlib.contextmanager
    def rank_snapshot(self) -> Iterator[RankSnapshot]:
        """The ranks as one read transaction sees them: a rank run replacing the scores
        meanwhile is seen whole or not at all, never its scores with the old mean."""
        with self.transaction(read_only=True) as cur:
            yield RankSnapshot(self, cur, self._rank_mean(cur))
