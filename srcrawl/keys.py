"""Every Redis key srcrawl uses, built in one place.

All keys of a job look like ``srcrawl:{JOB}:…``. The braces are a Redis
Cluster hash tag, so one job's keys live in one slot and Lua scripts and
transactions may touch several of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from srcrawl.defaults import PHASES


def _check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    return phase


@dataclass(frozen=True)
class Keys:
    """Key builders of one job."""

    job: str

    @property
    def prefix(self) -> str:
        return f"srcrawl:{{{self.job}}}"

    # -- the protocol: one srq / nrq / trq per phase ----------------------
    def srq(self, phase: str) -> str:
        """Tasks from the master to the slaves."""
        return f"{self.prefix}:{_check_phase(phase)}:srq"

    def nrq(self, phase: str) -> str:
        """Results from the slaves to the master."""
        return f"{self.prefix}:{_check_phase(phase)}:nrq"

    def trq(self, phase: str) -> str:
        """Hash of counters that hand out unique tags (slave ids, batch serials)."""
        return f"{self.prefix}:{_check_phase(phase)}:trq"

    def processing(self, queue_key: str, worker: str) -> str:
        """Messages a worker has taken from ``queue_key`` and not yet acknowledged."""
        return f"{queue_key}:processing:{worker}"

    def stats(self, phase: str) -> str:
        """Hash of counters of a phase (pages, errors, …)."""
        return f"{self.prefix}:{_check_phase(phase)}:stats"

    # -- workers ----------------------------------------------------------
    @property
    def workers(self) -> str:
        """Hash: worker id -> JSON list of the processing lists it may hold."""
        return f"{self.prefix}:workers"

    def heartbeat(self, worker: str) -> str:
        """A worker's heartbeat (JSON stats), expiring after the heartbeat TTL."""
        return f"{self.prefix}:heartbeat:{worker}"

    @property
    def tags(self) -> str:
        """Job-wide tag counters (worker ids are unique across phases)."""
        return f"{self.prefix}:tags"
