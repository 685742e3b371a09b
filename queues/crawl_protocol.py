"""The messages of the crawl phase, and the values its master and slaves share.

- ``srq``: a ``fetch`` task per URL (:class:`FetchTask`): canonical URL, its
  fingerprint, depth, frontier queue, robots.txt deferrals and failed fetches
  so far, and whether it is a fetch again at a shorter depth.
- ``nrq``: one outcome per task, carrying the task's own fields beside its
  own: ``fetched`` (:class:`Fetched`, with the page's links as canonical URL
  and fingerprint, computed once, by the slave), ``robots`` (the task's
  request went to the host's robots.txt; with the pages its sitemaps name),
  ``disallowed``, ``deferred``
  (robots.txt could not be had), ``retry`` (a passing failure), ``error``
  (the slave's handler failed on the tasks in its payload); ``seed``
  messages from `srcrawl seed`; and, in a partitioned crawl, ``links``
  (:class:`Links`): links found on another partition's pages for hosts this
  partition owns, routed to it by the slave or master that found them.

The master trusts the format of what it reads, not its sender: a message or
a link entry that is not well formed raises EnvelopeError here (or is
counted in :attr:`Fetched.rejected`), and the master counts it and goes on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from srcrawl.core.errors import EnvelopeError
from srcrawl.core.keys import Keys, processing_key
from srcrawl.core.urls import MAX_URL_LENGTH, InvalidURL, canonicalize, fingerprint
from srcrawl.queues.change_rate import ChangeHistory
from srcrawl.queues.envelope import Message, decode, encode

MASTER_ID = "master"
"""The crawl master's consumer id on nrq: its processing list holds the batch in hand."""

# Message kinds.
FETCH = "fetch"
SEED = "seed"
FETCHED = "fetched"
ROBOTS = "robots"
DISALLOWED = "disallowed"
DEFERRED = "deferred"
RETRY = "retry"
ERROR = "error"
LINKS = "links"

QUEUE_FIELD = "q"
"""The field of a fetch task naming its frontier queue (the frontier's Lua reads it)."""

ERROR_ADDRESS_REFUSED = "address_refused"
"""A fetch's error when the address it resolved to is not one the crawl may reach."""

ERROR_ROBOTS_GAVE_UP = "robots_gave_up"
"""The error of a URL's row when its host's robots.txt failed every try: never requested."""

ERROR_SLAVE = "slave_error"
"""The error of a URL's row when a slave's handler failed on its task (its log says why)."""

ERROR_CONNECT = "connect"
"""A fetch's error when no connection was made (refused, unknown host, reset) or it closed
before any response: the master backs off the whole host, not the URL."""

UNKNOWN_HOST = "unknown host"
COULD_NOT_CONNECT = "could not connect"
UNREACHABLE = frozenset({UNKNOWN_HOST, COULD_NOT_CONNECT})
"""Reasons of a deferral that say no server is there at all (fewer robots.txt tries)."""

Link = tuple[str, int]
"""A link as sent: its canonical URL and that URL's fingerprint."""

_CANONICAL = re.compile(r"https?://[^/\s]+/\S*")
_FP_MIN, _FP_MAX = -(1 << 63), (1 << 63) - 1


def is_canonical_url(url: Any) -> bool:
    """True if ``url`` has the shape of a canonical URL: absolute http(s), a host, a path."""
    return type(url) is str and len(url) <= MAX_URL_LENGTH and _CANONICAL.fullmatch(url) is not None


def is_fingerprint(fp: Any) -> bool:
    """True if ``fp`` has the shape of a fingerprint: a signed 64-bit integer."""
    return type(fp) is int and _FP_MIN <= fp <= _FP_MAX


def canonical_links(urls: Iterable[str]) -> tuple[dict[str, int], int]:
    """The links of a page as they are sent: canonical URL → fingerprint, each once,
    in order; and how many of ``urls`` could not be canonicalized."""
    out: dict[str, int] = {}
    invalid = 0
    for url in urls:
        try:
            c = canonicalize(url)
        except InvalidURL:
            invalid += 1
            continue
        if c not in out:
            out[c] = fingerprint(c)
    return out, invalid


def _int(msg: Message, name: str, default: int | None = None) -> int:
    value = msg.get(name, default)
    if type(value) is not int or value < 0:
        raise EnvelopeError(f"{msg.kind} message has no count {name!r}")
    return value


def _number(msg: Message, name: str, default: float | None = None) -> float:
    value = msg.get(name, default)
    if type(value) not in (int, float) or value < 0:
        raise EnvelopeError(f"{msg.kind} message has no number {name!r}")
    return float(value)


def _status(msg: Message) -> int:
    status = msg.get("status", 0)
    if type(status) is not int:
        raise EnvelopeError(f"{msg.kind} message has no integer status")
    return status


def _optional_number(msg: Message, name: str) -> float | None:
    return None if msg.get(name) is None else _number(msg, name)


def _optional_str(msg: Message, name: str) -> str | None:
    value = msg.get(name)
    if value is not None and type(value) is not str:
        raise EnvelopeError(f"{msg.kind} message's {name!r} is not a string")
    return value


MAX_VALIDATOR_CHARS = 255
"""Longest ETag or Last-Modified a message may carry (the store's column holds as much)."""


def _validator(msg: Message, name: str) -> str | None:
    value = _optional_str(msg, name)
    if value is not None and (len(value) > MAX_VALIDATOR_CHARS or "\n" in value or "\r" in value):
        raise EnvelopeError(f"{msg.kind} message's {name!r} is no header value")
    return value


@dataclass(frozen=True, slots=True)
class FetchTask:
    """Fetch one URL: a task of srq, and the first fields of every outcome of it."""

    url: str
    fp: int
    depth: int
    queue: str
    tries: int = 0
    """robots.txt deferrals so far."""
    failed: int = 0
    """Failed fetches so far."""
    again: bool = False
    """A URL fetched once more, at a shorter depth found later."""
    revisit: float = 0.0
    """A stored page fetched again (recrawl): its current interval in seconds; 0: a new URL."""
    etag: str | None = None
    modified: str | None = None
    """The stored page's validators, sent as If-None-Match / If-Modified-Since."""
    digest: int | None = None
    """The stored page's digest (title and text): a response with the same one is unchanged."""
    history: ChangeHistory | None = None
    """The page's visit record for the adaptive revisit policy (queues/change_rate.py)."""
    sitemaps: bool = False
    """Not a page: read the host's robots.txt and sitemaps again (the always-on crawl's
    sitemap schedule, see :func:`sitemap_task`)."""
    lastmod_wrong: bool = False
    """On the schedule: the page's last fetch found its sitemap ``<lastmod>`` wrong, so a
    newer one does not make it due sooner (the frontier's commit reads it)."""
    strategy: int = 0
    """The strategy version the fetch needs at least: a slave with an older one reads the
    document again first (a seed given again once the crawl may reach its address)."""

    @property
    def recrawl(self) -> bool:
        return self.revisit > 0

    def fields(self) -> dict[str, Any]:
        out = {
            "url": self.url,
            "fp": self.fp,
            "depth": self.depth,
            QUEUE_FIELD: self.queue,
            "tries": self.tries,
        }
        if self.failed:
            out["failed"] = self.failed
        if self.again:
            out["again"] = 1
        if self.sitemaps:
            out["sitemaps"] = 1
        if self.lastmod_wrong:
            out["lastmod_wrong"] = 1
        if self.strategy:
            out["strategy"] = self.strategy
        if self.revisit:
            out.update(
                revisit=self.revisit, etag=self.etag, modified=self.modified, digest=self.digest
            )
            if self.history is not None:
                out["history"] = self.history.to_list()
        return out

    def encode(self) -> bytes:
        return encode(FETCH, self.fields())

    @classmethod
    def from_message(cls, msg: Message) -> FetchTask:
        """The task in a task or outcome message; EnvelopeError if it is malformed."""
        url, fp, queue = msg.get("url"), msg.get("fp"), msg.get(QUEUE_FIELD)
        if not is_canonical_url(url) or not is_fingerprint(fp):
            raise EnvelopeError(f"{msg.kind} message has no canonical URL and fingerprint")
        if type(queue) is not str or not queue:
            raise EnvelopeError(f"{msg.kind} message names no queue")
        again = msg.get("again")
        digest = msg.get("digest")
        if digest is not None and not is_fingerprint(digest):
            raise EnvelopeError(f"{msg.kind} message's digest is no 64-bit integer")
        return cls(
            url,
            fp,
            _int(msg, "depth"),
            queue,
            _int(msg, "tries", 0),
            _int(msg, "failed", 0),
            bool(again),
            _number(msg, "revisit", 0),
            _validator(msg, "etag"),
            _validator(msg, "modified"),
            digest,
            _history(msg),
            bool(msg.get("sitemaps")),
            bool(msg.get("lastmod_wrong")),
            _int(msg, "strategy", 0),
        )

    @classmethod
    def decode(cls, raw: bytes | str) -> FetchTask:
        msg = decode(raw)
        if msg.kind != FETCH:
            raise EnvelopeError(f"expected a fetch task, got a {msg.kind!r} message")
        return cls.from_message(msg)


def _history(msg: Message) -> ChangeHistory | None:
    raw = msg.get("history")
    if raw is None:
        return None
    history = ChangeHistory.from_list(raw)
    if history is None:
        raise EnvelopeError(f"{msg.kind} message's history is not four numbers")
    return history


def fetch_task(
    url: str,
    fp: int,
    depth: int,
    queue: str,
    tries: int = 0,
    *,
    failed: int = 0,
    again: bool = False,
) -> str:
    """A task of srq as text (see :class:`FetchTask`)."""
    return FetchTask(url, fp, depth, queue, tries, failed, again).encode().decode()


def sitemap_task(site: str, queue: str) -> FetchTask:
    """The task that reads the robots.txt and sitemaps of origin ``site`` again. Its
    fingerprint is that of no URL (no page's schedule entry is ever its own)."""
    return FetchTask(f"{site}/robots.txt", fingerprint(f"sitemaps {site}"), 0, queue, sitemaps=True)


def _entries(msg: Message, name: str, well_formed: Callable[[Any], bool]) -> tuple[list[list], int]:
    """The entries of ``msg[name]`` (a list) that are ``well_formed``, and how many others."""
    raw = msg.get(name, [])
    if type(raw) is not list:
        raise EnvelopeError(f"{msg.kind} message's {name} is not a list")
    good = [entry for entry in raw if well_formed(entry)]
    return good, len(raw) - len(good)


def _is_link(entry: Any) -> bool:
    """``[canonical URL, fingerprint]``."""
    return (
        type(entry) is list
        and len(entry) == 2
        and is_canonical_url(entry[0])
        and is_fingerprint(entry[1])
    )


def _links(msg: Message) -> tuple[list[Link], int]:
    """The well-formed link entries of ``msg`` and how many others it had."""
    good, rejected = _entries(msg, "links", _is_link)
    return [(url, fp) for url, fp in good], rejected


@dataclass(frozen=True, slots=True)
class Fetched:
    """The task's URL was fetched (a page, an error page, a redirect, a failure)."""

    task: FetchTask
    status: int
    fetch_ms: float
    crawl_delay: float | None = None
    links: tuple[Link, ...] | list[Link] = ()
    error: str | None = None
    invalid: int = 0
    """Links of the page the slave could not canonicalize."""
    rejected: int = 0
    """Link entries of the message that were malformed (set by decoding, never sent)."""
    next: FetchTask | None = None
    """The page's next fetch, with its validators, digest and interval (``revisit``, in
    seconds from now): the master schedules it. None: nothing to fetch again."""
    changed: bool | None = None
    """Whether the page changed since its stored version (None: a first fetch, or gone)."""

    def encode(self) -> bytes:
        nxt = self.next
        again = None if nxt is None else [nxt.revisit, nxt.etag, nxt.modified, nxt.digest]
        if nxt is not None and nxt.history is not None:
            again.append(nxt.history.to_list())
        return encode(
            FETCHED,
            {
                **self.task.fields(),
                "status": self.status,
                "fetch_ms": self.fetch_ms,
                "crawl_delay": self.crawl_delay,
                "links": self.links,
                "error": self.error,
                "invalid": self.invalid,
                "next": again,
                "changed": self.changed,
            },
        )

    @classmethod
    def from_message(cls, msg: Message) -> Fetched:
        status = _status(msg)
        links, rejected = _links(msg)
        task = FetchTask.from_message(msg)
        changed = msg.get("changed")
        return cls(
            task,
            status,
            _number(msg, "fetch_ms", 0),
            _optional_number(msg, "crawl_delay"),
            links,
            _optional_str(msg, "error"),
            _int(msg, "invalid", 0),
            rejected,
            _next_fetch(msg, task),
            changed if type(changed) is bool else None,
        )


def _next_fetch(msg: Message, task: FetchTask) -> FetchTask | None:
    """The next fetch a ``fetched`` message asks for: the task again, as a recrawl."""
    raw = msg.get("next")
    if raw is None:
        return None
    if type(raw) is not list or len(raw) not in (4, 5):
        raise EnvelopeError(f"{msg.kind} message's next fetch is malformed")
    revisit, etag, modified, digest, *history = raw
    fields = Message(
        msg.kind,
        {
            **task.fields(),
            "revisit": revisit,
            "etag": etag,
            "modified": modified,
            "digest": digest,
            "history": history[0] if history else None,
        },
    )
    nxt = FetchTask.from_message(fields)
    if nxt.revisit <= 0:
        raise EnvelopeError(f"{msg.kind} message's next fetch has no interval")
    # a recrawl starts afresh: no deferrals or failures carried over
    return FetchTask(
        nxt.url,
        nxt.fp,
        nxt.depth,
        nxt.queue,
        revisit=nxt.revisit,
        etag=nxt.etag,
        modified=nxt.modified,
        digest=nxt.digest,
        history=nxt.history,
    )


SitemapEntry = tuple[str, int, float | None]
"""A page a sitemap named: its canonical URL, that URL's fingerprint, its ``<lastmod>``
(epoch seconds) or None."""

SITEMAP_COUNTERS = frozenset(
    {
        "sitemaps_fetched",
        "sitemap_refused",
        "sitemap_capped",
        "sitemap_malformed",
        "sitemap_invalid_urls",
        "sitemap_urls",
    }
)
"""The crawl counters a slave's reading of a host's sitemaps may add to."""


def _is_sitemap_entry(entry: Any) -> bool:
    """``[canonical URL, fingerprint, lastmod or None]``."""
    return (
        type(entry) is list
        and len(entry) == 3
        and _is_link(entry[:2])
        and (entry[2] is None or (type(entry[2]) in (int, float) and math.isfinite(entry[2])))
    )


def _sitemap_entries(msg: Message) -> tuple[list[SitemapEntry], int]:
    """The well-formed sitemap entries of ``msg`` and how many others it had."""
    good, rejected = _entries(msg, "sitemap", _is_sitemap_entry)
    return [(url, fp, None if t is None else float(t)) for url, fp, t in good], rejected


def _sitemap_counts(msg: Message) -> dict[str, int]:
    counts = msg.get("sitemap_counts", {})
    if type(counts) is not dict or not all(
        name in SITEMAP_COUNTERS and type(n) is int and n >= 0 for name, n in counts.items()
    ):
        raise EnvelopeError(f"{msg.kind} message's sitemap counts are malformed")
    return counts


@dataclass(frozen=True, slots=True)
class RobotsFetched:
    """The task's request went to its host's robots.txt: the URL itself comes next.

    With ``--sitemaps`` the slave read the host's sitemaps before answering (the
    task held the host meanwhile): the pages they name come with it, seeds for the
    master to judge like links, and what the reading counted.
    """

    task: FetchTask
    fetch_ms: float
    crawl_delay: float | None = None
    sitemap: tuple[SitemapEntry, ...] | list[SitemapEntry] = ()
    sitemap_counts: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    """Sitemap entries of the message that were malformed (set by decoding, never sent)."""

    def encode(self) -> bytes:
        fields: dict[str, Any] = {"fetch_ms": self.fetch_ms, "crawl_delay": self.crawl_delay}
        if self.sitemap:
            fields["sitemap"] = self.sitemap
        if self.sitemap_counts:
            fields["sitemap_counts"] = self.sitemap_counts
        return encode(ROBOTS, {**self.task.fields(), **fields})

    @classmethod
    def from_message(cls, msg: Message) -> RobotsFetched:
        entries, rejected = _sitemap_entries(msg)
        return cls(
            FetchTask.from_message(msg),
            _number(msg, "fetch_ms", 0),
            _optional_number(msg, "crawl_delay"),
            entries,
            _sitemap_counts(msg),
            rejected,
        )


@dataclass(frozen=True, slots=True)
class Disallowed:
    """robots.txt disallows the task's URL."""

    task: FetchTask

    def encode(self) -> bytes:
        return encode(DISALLOWED, self.task.fields())

    @classmethod
    def from_message(cls, msg: Message) -> Disallowed:
        return cls(FetchTask.from_message(msg))


@dataclass(frozen=True, slots=True)
class Deferred:
    """The host's robots.txt could not be had: not before ``until`` (epoch seconds)."""

    task: FetchTask
    until: float
    reason: str | None = None
    """Why, when robots.txt was just fetched (not from the cache)."""
    fetch_ms: float = 0.0

    def encode(self) -> bytes:
        fields = {"until": self.until, "reason": self.reason, "fetch_ms": self.fetch_ms}
        return encode(DEFERRED, {**self.task.fields(), **fields})

    @classmethod
    def from_message(cls, msg: Message) -> Deferred:
        return cls(
            FetchTask.from_message(msg),
            _number(msg, "until", 0),
            _optional_str(msg, "reason"),
            _number(msg, "fetch_ms", 0),
        )


@dataclass(frozen=True, slots=True)
class Retry:
    """The fetch failed for a passing reason and tries remain: fetch it again later."""

    task: FetchTask
    status: int
    error: str | None
    fetch_ms: float
    crawl_delay: float | None = None
    retry_after: float | None = None

    def encode(self) -> bytes:
        return encode(
            RETRY,
            {
                **self.task.fields(),
                "status": self.status,
                "error": self.error,
                "fetch_ms": self.fetch_ms,
                "crawl_delay": self.crawl_delay,
                "retry_after": self.retry_after,
            },
        )

    @classmethod
    def from_message(cls, msg: Message) -> Retry:
        status = _status(msg)
        return cls(
            FetchTask.from_message(msg),
            status,
            _optional_str(msg, "error"),
            _number(msg, "fetch_ms", 0),
            _optional_number(msg, "crawl_delay"),
            _optional_number(msg, "retry_after"),
        )


@dataclass(frozen=True, slots=True)
class TaskError:
    """A slave's handler failed on ``tasks`` (raw srq tasks): their queues are released."""

    error: str
    tasks: tuple[bytes, ...]

    def encode(self) -> bytes:
        return task_error(b"\n".join(self.tasks), self.error)

    @classmethod
    def from_message(cls, msg: Message) -> TaskError:
        tasks = tuple(msg.payload.split(b"\n")) if msg.payload else ()
        return cls(str(msg.get("error", "")), tasks)


def task_error(raw_tasks: bytes, error: str) -> bytes:
    """The answer to tasks a slave cannot do, shaped like the runtime's error report."""
    return encode(ERROR, {"phase": "crawl", "error": error}, raw_tasks)


@dataclass(frozen=True, slots=True)
class Seed:
    """Depth-0 URLs from `srcrawl seed`, and the strategy version that put them in scope."""

    urls: tuple[Link, ...] | list[Link]
    strategy: int
    rejected: int = 0
    again: tuple[Link, ...] | list[Link] = ()
    """Seeds fetched again although seen: URLs whose stored fetch the address policy
    refused, seeded anew once the crawl may reach them, or a host's stored pages an
    operator asked to fetch again."""
    again_depths: tuple[int, ...] | list[int] = ()
    """The depth each of ``again`` is fetched at (none given: 0, a seed's): a stored page
    fetched again at its own depth finds no link nearer than it was."""

    def encode(self) -> bytes:
        fields: dict[str, Any] = {"urls": self.urls, "strategy": self.strategy}
        if self.again:
            fields["again"] = self.again
        if any(self.again_depths):
            fields["depths"] = self.again_depths
        return encode(SEED, fields)

    @classmethod
    def from_message(cls, msg: Message) -> Seed:
        urls, rejected = _links(Message(msg.kind, {"links": msg.get("urls", [])}))
        raw_again = msg.get("again", [])
        again, bad = _links(Message(msg.kind, {"links": raw_again}))
        depths = msg.get("depths", [])
        # depths that do not go one to one with the URLs (or are no depths) are not used
        well_formed = (
            not bad
            and isinstance(depths, list)
            and len(depths) == len(again)
            and all(type(d) is int and d >= 0 for d in depths)
        )
        return cls(
            urls, _int(msg, "strategy", 0), rejected + bad, again, depths if well_formed else ()
        )

    def again_at(self) -> list[tuple[str, int, int]]:
        """(url, fp, depth) of each seed fetched again."""
        depths = self.again_depths or [0] * len(self.again)
        return [(url, fp, d) for (url, fp), d in zip(self.again, depths, strict=True)]


def seed_message(
    canonical_urls: Iterable[str],
    strategy_version: int,
    again: Iterable[str] = (),
    again_depths: Iterable[int] = (),
) -> bytes:
    """An nrq message adding depth-0 seeds (canonical URLs): how `srcrawl seed` reaches
    the master. It names the strategy version that put the seeds' hosts in scope, so
    the master reloads the strategy before it judges them. The ``again`` URLs are
    fetched even if seen (see :attr:`Seed.again`), at ``again_depths`` (default 0)."""
    return Seed(
        [(u, fingerprint(u)) for u in canonical_urls],
        strategy_version,
        0,
        [(u, fingerprint(u)) for u in again],
        list(again_depths),
    ).encode()


@dataclass(frozen=True, slots=True)
class Links:
    """Links at ``depth`` for hosts of the partition whose nrq this is, found on pages of
    other partitions (queues/partitions.py)."""

    links: tuple[Link, ...] | list[Link]
    depth: int
    rejected: int = 0

    def encode(self) -> bytes:
        return encode(LINKS, {"links": self.links, "depth": self.depth})

    @classmethod
    def from_message(cls, msg: Message) -> Links:
        links, rejected = _links(msg)
        return cls(links, _int(msg, "depth"), rejected)


Outcome = Fetched | RobotsFetched | Disallowed | Deferred | Retry | TaskError | Seed | Links
"""What the master reads from nrq."""

_OUTCOMES: dict[str, Any] = {
    FETCHED: Fetched,
    ROBOTS: RobotsFetched,
    DISALLOWED: Disallowed,
    DEFERRED: Deferred,
    RETRY: Retry,
    ERROR: TaskError,
    SEED: Seed,
    LINKS: Links,
}


def read_outcome(raw: bytes) -> Outcome:
    """The nrq message ``raw``; EnvelopeError if it is not a well-formed one of the crawl."""
    msg = decode(raw)
    kind = _OUTCOMES.get(msg.kind)
    if kind is None:
        raise EnvelopeError(f"the crawl has no {msg.kind!r} message")
    return kind.from_message(msg)


def task_of(raw: bytes) -> FetchTask | None:
    """The fetch task a raw srq message holds, or None when it holds none (malformed)."""
    try:
        return FetchTask.decode(raw)
    except EnvelopeError:
        return None


def queue_of(raw: bytes) -> str | None:
    """The queue a message names, if it names one, however malformed it is otherwise."""
    try:
        queue = decode(raw).get(QUEUE_FIELD)
    except EnvelopeError:
        return None
    return queue if type(queue) is str and queue else None


def work_left(client: redis.Redis, keys: Keys) -> bool:
    """True while the job's crawl has anything queued or in flight, in one atomic read
    (a partitioned crawl: until the masters found every partition done; see
    master/frontier/barrier.py).

    A task is always in one of these: ``nrq`` (an outcome or seed for the
    master), the master's batch in hand, a ready queue, a queue with its
    task out (in ``srq`` or with a slave), or the next level.
    """
    from srcrawl.queues.partitions import crawl_partitions

    if crawl_partitions(client, keys) > 1:
        return client.hget(keys.job_keys.crawl_state, "state") not in (None, b"complete")
    nrq = keys.nrq("crawl")
    pipe = client.pipeline(transaction=True)
    pipe.hget(keys.crawl_state, "state")
    pipe.llen(nrq)
    pipe.llen(processing_key(nrq, MASTER_ID))
    pipe.zcard(keys.crawl_ready)
    pipe.hlen(keys.crawl_inflight)
    pipe.llen(keys.crawl_next_level)
    state, *counts = pipe.execute()
    return state not in (None, b"complete") and any(counts)
