"""The roles a process of a local run takes, as typed values that cross a process boundary.

A local run (see :mod:`srcrawl.app.runner`) starts each child with one role:
forked, it is handed the value; started as a new interpreter
(``python -m srcrawl.app.child``), it reads the role as one JSON object on
stdin. Never as command-line arguments: what a child does is typed and
checked here, not parsed from strings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from srcrawl.core.defaults import DEFAULT_FETCH_THREADS, DEFAULT_HEARTBEAT_TTL, PHASES
from srcrawl.core.errors import ConfigError

PARSERS = ("lxml", "bs4")


@dataclass(frozen=True)
class SlaveRole:
    """A slave serving ``phases`` (what ``srcrawl slave start`` runs)."""

    kind: ClassVar[str] = "slave"
    phases: tuple[str, ...] = field(default=PHASES)
    threads: int = DEFAULT_FETCH_THREADS
    """Fetches in flight at once (crawl phase)."""
    parser: str = "lxml"
    burst: bool = False
    """Leave once the queues are drained."""
    heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL

    def __post_init__(self) -> None:
        object.__setattr__(self, "phases", tuple(self.phases))
        unknown = [p for p in self.phases if p not in PHASES]
        if unknown or not self.phases:
            raise ConfigError(
                f"unknown phase {', '.join(unknown) or '(none)'}; choose from {','.join(PHASES)}"
            )
        if self.parser not in PARSERS:
            raise ConfigError(f"unknown parser {self.parser!r}; choose from {', '.join(PARSERS)}")
        if self.threads < 1 or self.heartbeat_ttl <= 0:
            raise ConfigError("a slave needs at least one thread and a positive heartbeat TTL")


@dataclass(frozen=True)
class CrawlMasterRole:
    """The crawl master of the job (what ``srcrawl master start`` runs, without seeds)."""

    kind: ClassVar[str] = "crawl-master"
    keep_running: bool = False
    """Wait for new seeds once the crawl is complete."""
    end_deferred: bool = False
    """End a one-shot crawl once all that is left waits on hosts whose robots.txt could not
    be had (``srcrawl crawl``: ``--resume`` tries them again), rather than retry them."""


Role = SlaveRole | CrawlMasterRole
_ROLES: dict[str, type[SlaveRole] | type[CrawlMasterRole]] = {
    SlaveRole.kind: SlaveRole,
    CrawlMasterRole.kind: CrawlMasterRole,
}


def role_to_json(role: Role) -> str:
    return json.dumps({"role": role.kind, **asdict(role)})


def role_from_json(text: str) -> Role:
    """The role ``text`` describes; ConfigError for anything else."""
    try:
        fields = json.loads(text)
        cls = _ROLES[fields.pop("role")]
        return cls(**fields)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"not a role of a local run: {text[:200]!r}") from e
