"""One nrq batch: what processing it decided (:class:`Batch`, the document the commit
script applies) and what it gathered on the way (:class:`BatchWork`). A batch starts
from nothing: nothing of one batch is kept for the next but what Redis holds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import orjson

from srcrawl.queues.crawl_protocol import FetchTask


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Requeue:
    """A task back at the head of its queue, which is ready again at ``at`` (ms)."""

    task: FetchTask
    at: int
    slot: int | None = None
    """When the request's slot of a host allowed several is free (ms; None: at ``at``)."""
    held: bool = False
    """The queue waits until ``at`` because its host failed (the progress line says so)."""


@dataclass(frozen=True, slots=True)
class Improvement:
    """A URL found nearer than recorded: ``task`` at the new depth (flagged ``again``) and
    the depth its deeper task was scheduled at."""

    task: FetchTask
    was: int

    def fields(self) -> list:
        t = self.task
        deeper = [replace(t, depth=self.was, again=a).encode().decode() for a in (False, True)]
        first = replace(t, again=False).encode().decode()
        return [str(t.fp), t.depth, t.encode().decode(), t.queue, deeper, first]


@dataclass
class Batch:
    """What processing a batch of nrq messages decided, applied by Frontier.commit."""

    done: dict[str, int | None] = field(default_factory=dict)
    """Queues whose in-flight task is over → when they are ready again (None: when
    their politeness said before)."""
    retry: list[Requeue] = field(default_factory=list)
    backoff: list[Requeue] = field(default_factory=list)
    """Tasks whose own URL failed: each waits until ``at`` apart from its queue, which is
    ready again at ``slot`` (its politeness)."""
    now: list[FetchTask] = field(default_factory=list)
    """New tasks of the current level."""
    next: list[FetchTask] = field(default_factory=list)
    """New tasks of the next level."""
    hosts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    """Queue → 1: lagging on a robots.txt deferral; 2: lagging, its host slow to answer;
    0: counts for the level again (see the package doc)."""
    lag_after: int = 1000
    """--lag-after in ms: a URL backing off this long or longer is lagging work."""
    depths: dict[int, int] = field(default_factory=dict)
    """fp → depth of the URLs scheduled (new to the seen test), for the depth record."""
    improved: dict[int, Improvement] = field(default_factory=dict)
    """fp → the nearer task of a URL recorded deeper."""
    recording: bool = True
    """The crawl's level was not reached strictly: depths are recorded (see the module doc)."""
    limits: dict[str, int] = field(default_factory=dict)
    """Hosts spread over several queues → most requests in flight to them from now on."""
    due: list[Requeue] = field(default_factory=list)
    """Stored pages to fetch again at their time (the recrawl schedule)."""
    sitemaps: dict[str, Requeue] = field(default_factory=dict)
    """Origin → the task that reads its sitemaps again, for a host that has none yet."""
    sooner: dict[int, int] = field(default_factory=dict)
    """fp → the ``<lastmod>`` (ms) a sitemap gave it: due now if fetched ``value`` or more
    before that."""
    value: int = 1
    """What a fetch is worth in ms of one page's freshness (the revisit policy's price)."""
    acks: int = 0
    held: list[str] = field(default_factory=list)
    """Links messages of URLs a guard did not let in: kept for later (master/guards.py)."""

    def count(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n

    def document(self) -> bytes:
        """The batch as the commit script reads it (see commit.lua)."""
        doc = {
            "done": [[q, t] for q, t in self.done.items() if t is not None],
            "free": [q for q, t in self.done.items() if t is None],
            "retry": [
                [r.task.queue, r.task.encode().decode(), r.at, r.slot or r.at, int(r.held)]
                for r in self.retry
            ],
            "backoff": [
                [r.task.queue, r.task.encode().decode(), r.at, r.slot or r.at] for r in self.backoff
            ],
            "now": [[t.queue, t.encode().decode()] for t in self.now],
            "hosts": [[h, n] for h, n in self.hosts.items()],
            "stats": [[s, n] for s, n in self.stats.items()],
            "errors": [[h, e] for h, e in self.errors.items()],
            "lag": [[q, n] for q, n in self.lag.items()],
            # fingerprints as strings: cjson reads numbers as doubles
            "improved": [m.fields() for m in self.improved.values()],
            "limits": [[h, n] for h, n in self.limits.items()],
            "due": [[str(r.task.fp), r.task.encode().decode(), r.at] for r in self.due],
            "sitemaps": [
                [o, str(r.task.fp), r.task.encode().decode(), r.at]
                for o, r in self.sitemaps.items()
            ],
            "sooner": [[str(fp), ms] for fp, ms in self.sooner.items()],
            "value": self.value,
            "acks": self.acks,
            "held": self.held,
        }
        # cjson turns empty Lua tables into {}: send empty lists as such
        return orjson.dumps(doc)


@dataclass
class BatchWork:
    """One nrq batch in hand: its commit document and what its messages gathered on the
    way, judged once every message is read (the depths improved, the lastmods, …)."""

    batch: Batch
    level: int = 0
    """The crawl's depth level when the batch was taken."""
    recorded: bool = True
    """The depth record is kept: a link behind the level may be a shorter path."""
    checks: dict[int, FetchTask] = field(default_factory=dict)
    """fp → the nearest task of a duplicate found behind the level (looked up in the depth
    record once the batch is read)."""
    scheduled: dict[int, FetchTask] = field(default_factory=dict)
    """The tasks of this batch's new URLs, by fingerprint."""
    lastmods: list[tuple[int, float]] = field(default_factory=list)
    """(fp, ``<lastmod>``) the sitemaps of this batch gave."""
    forward: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    """Links this batch found for hosts of other partitions: partition -> (url, fp, depth)."""
    held: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    """Links this batch did not admit (a guard holds admission): depth -> (url, fp)."""
    gave_up: list[tuple[FetchTask, str]] = field(default_factory=list)
    """URLs ended without a fetch, each with its reason: their rows (master/given_up.py)."""
    """Tasks given up (their host's robots.txt never answered): stored as failed rows."""
    fetched_before: dict[int, tuple[float, float, bool]] = field(default_factory=dict)
    """fp → (its fetch before this one, this one, whether this one found it changed),
    for pages of this batch going back on the schedule with a visit record."""

    def count(self, name: str, n: int = 1) -> None:
        self.batch.count(name, n)
