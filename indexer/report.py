"""What one run of the index master did: the figures its progress line, its heartbeat
and the job's record show."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class IndexReport:
    """What one run of the index master did."""

    scheduled: int = 0  # pages sent to slaves
    indexed: int = 0  # documents written into the index (each replacing the page's last)
    stale: int = 0  # documents skipped: page fetched again (or deleted) meanwhile
    missing: int = 0  # page ids a slave found no page for
    failed: int = 0  # pages of tasks a slave refused or failed on (left unindexed)
    merges: int = 0  # Tantivy commits of documents
    merge_s: float = 0.0  # time writing and committing them, marking the pages
    wall_s: float = 0.0
    requeued: int = 0  # tasks of dead workers returned to srq
    scans: int = 0  # passes over the unindexed pages (more than one only with follow)
    # pages stored after the run started, and their delay to searchable (see freshness.py)
    freshness: dict = field(default_factory=dict)
    removed: int = 0  # pages that went away (404, 410, a redirect) taken out of the index
    errors: list[str] = field(default_factory=list)

    @property
    def pages_per_s(self) -> float:
        return self.indexed / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "pages_per_s": round(self.pages_per_s, 1)}

    def error(self, reason: str) -> None:
        """Keep ``reason`` among the run's first twenty distinct errors."""
        if len(self.errors) < 20 and reason not in self.errors:
            self.errors.append(reason)
