"""The state of each job's phases (``jobs``): running, complete, and their statistics."""

from __future__ import annotations

import json

from srcrawl.sql.base import StoreBase


class Jobs(StoreBase):
    """One row per (job, phase)."""

    UPSERT_JOB: str  # (name, phase, state, started_at, finished_at, stats), per dialect

    # -- jobs ------------------------------------------------------------------
    def set_job(
        self,
        name: str,
        phase: str,
        state: str,
        stats: dict | None = None,
        *,
        started_at: float | None = None,
        finished_at: float | None = None,
    ) -> None:
        """Record the state of a job's phase (running, complete, …)."""
        row = (name, phase, state, started_at, finished_at, json.dumps(stats or {}))
        self.run(lambda cur: self._execute(cur, self.UPSERT_JOB, row))

    def get_job(self, name: str, phase: str) -> dict | None:
        rows = self._query(
            "SELECT state, started_at, finished_at, stats FROM jobs WHERE name = ? AND phase = ?",
            (name, phase),
        )
        if not rows:
            return None
        state, started, finished, stats = rows[0]
        return {
            "state": state,
            "started_at": started,
            "finished_at": finished,
            "stats": json.loads(stats),
        }
