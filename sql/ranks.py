"""PageRank scores (``ranks``) and their mean (kept in ``meta``), replaced whole by each rank
run and read in one snapshot by a search; a run of up to RANKS_KEPT pages kept in memory by
a searching process (:class:`KeptRanks`)."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from srcrawl.core.defaults import RANKS_KEPT
from srcrawl.sql.base import StoreBase, chunks

RANK_MEAN = "rank_mean"
"""Meta key: the mean PageRank score of the ranked pages, written with the scores (absent
while no page is ranked), so a search reads the two in one snapshot."""
RANK_RUN = "rank_run"
"""Meta key: the rank run the table holds, ``PAGES:TOKEN`` (a new token each run, written
with the scores): a process that keeps a run's scores in memory knows them by it, and
knows a run too large to keep without reading it."""


@dataclass(frozen=True)
class KeptRanks:
    """One rank run's scores in memory, by page (``fps`` sorted): a pool's 200 pages looked
    up by a binary search of an array, not a SQL ``IN`` list (120 µs a pool on SQLite, a
    tenth of a short Chinese search's CPU)."""

    fps: np.ndarray  # int64, sorted
    scores: np.ndarray  # float64, in the order of fps

    def scores_of(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> PageRank score of the ranked pages among ``fps``."""
        wanted = np.asarray(fps, np.int64)
        at, found = self._find(wanted)
        return dict(zip(wanted[found].tolist(), self.scores[at[found]].tolist(), strict=True))

    def score_array(self, fps: np.ndarray) -> np.ndarray:
        """Each page's PageRank score, 0 for a page not ranked."""
        out = np.zeros(len(fps), np.float64)
        at, found = self._find(fps)
        out[found] = self.scores[at[found]]
        return out

    def _find(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``fps`` is in the run's pages, and whether it is there."""
        if not len(self.fps):
            return np.zeros(len(fps), np.intp), np.zeros(len(fps), bool)
        at = np.minimum(np.searchsorted(self.fps, fps), len(self.fps) - 1)
        return at, self.fps[at] == fps


_kept: dict[str, KeptRanks | None] = {}
"""RANK_RUN -> its scores (None: more pages than RANKS_KEPT), the last two runs read; a
token is new each run, so the stores of one process never share one."""
_kept_lock = threading.Lock()


@dataclass
class RankSnapshot:
    """The mean PageRank score (None: no page is ranked) and the pages' scores, read in
    one transaction (see :meth:`Ranks.rank_snapshot`)."""

    store: Ranks
    cur: Any
    mean: float | None
    run: str | None = None  # RANK_RUN (None: ranked before runs had one)

    def scores(self, fps: Sequence[int]) -> dict[int, float]:
        """fp -> PageRank score of the ranked pages among ``fps``: from the run's scores in
        memory (read in this snapshot the first time), or by SQL for a run too large to
        keep or without a RANK_RUN."""
        kept = self._kept()
        if kept is not None:
            return kept.scores_of(fps)
        rows = self.store._select_in(self.cur, "SELECT fp, score FROM ranks WHERE fp IN ({})", fps)
        return {int(fp): float(score) for fp, score in rows}

    def score_array(self, fps: np.ndarray) -> np.ndarray:
        """Each of ``fps``'s PageRank score (int64 array in, float64 out), 0 for a page not
        ranked: :meth:`scores` as an array, without a dict between when the run is kept."""
        kept = self._kept()
        if kept is not None:
            return kept.score_array(fps)
        listed = fps.tolist()
        found = self.scores(listed)
        return np.fromiter((found.get(fp, 0.0) for fp in listed), np.float64, len(listed))

    def _kept(self) -> KeptRanks | None:
        return _kept_run(self.cur, self.store, self.run) if self.run else None

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
            self._execute(cur, self.UPSERT_META, (RANK_RUN, f"{n}:{uuid.uuid4().hex}"))
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
            meta = dict(
                self._execute(
                    cur, "SELECT k, v FROM meta WHERE k IN (?, ?)", (RANK_MEAN, RANK_RUN)
                ).fetchall()
            )
            mean = float(meta[RANK_MEAN]) if RANK_MEAN in meta else None
            yield RankSnapshot(self, cur, mean, meta.get(RANK_RUN) if mean is not None else None)


def _kept_run(cur: Any, store: Ranks, run: str) -> KeptRanks | None:
    """The scores of rank run ``run`` in memory, read by ``cur`` (in the snapshot that saw
    the run) the first time; None when the run holds more than RANKS_KEPT pages. Read
    under the lock: the threads that meet a new run together wait for one read of it."""
    with _kept_lock:
        if run not in _kept:
            pages = run.partition(":")[0]
            kept = None
            if pages.isdigit() and int(pages) <= RANKS_KEPT:
                rows = store._execute(cur, "SELECT fp, score FROM ranks").fetchall()
                fps = np.fromiter((r[0] for r in rows), np.int64, len(rows))
                scores = np.fromiter((r[1] for r in rows), np.float64, len(rows))
                order = np.argsort(fps, kind="stable")
                kept = KeptRanks(fps[order], scores[order])
            while len(_kept) >= 2:
                _kept.pop(next(iter(_kept)))
            _kept[run] = kept
        return _kept[run]
