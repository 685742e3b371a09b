"""Every Redis key srcrawl uses, built in one place.

All keys of a job look like ``srcrawl:{JOB}:…``. The braces are a Redis
Cluster hash tag, so one job's keys live in one slot and Lua scripts and
transactions may touch several of them.

A crawl with ``--partitions P`` > 1 keeps each partition's frontier, seen set,
queues and counters under ``srcrawl:{JOB/p}:…`` (:meth:`Keys.partition`): one
hash tag per partition, so Redis Cluster spreads the partitions over its
nodes while each partition's scripts stay within one slot. What the whole
job shares (the strategy document, workers, tags, the robots.txt cache, the
crawl's global state) keeps the job's own tag.
"""

from __future__ import annotations

from dataclasses import dataclass

from srcrawl.core.defaults import PHASES


def _check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    return phase


def processing_key(queue_key: str, consumer: str) -> str:
    """Messages ``consumer`` took from the queue ``queue_key`` and has not yet acknowledged."""
    return f"{queue_key}:processing:{consumer}"


def last_pop_key(queue_key: str, consumer: str) -> str:
    """The record of ``consumer``'s last pop from the queue ``queue_key`` (its token and
    how many messages it moved), so that a pop sent again after an outage moves nothing
    twice. Outside :func:`processing_pattern`: it is no processing list."""
    return f"{queue_key}:lastpop:{consumer}"


def lease_acquirer_key(lease_key: str) -> str:
    """The holder that acquired the lease ``lease_key`` last (no TTL): who may take the
    lease back if it lapses with nobody taking it (``queues/lease.py``)."""
    return f"{lease_key}:acquirer"


def lease_waiting_key(lease_key: str, host: str) -> str:
    """A process on ``host`` waiting for the lease ``lease_key`` (a standby master, a master
    waiting for its first seeds, a ranker between runs): its holder id, with a short TTL
    it renews while it waits. What `srcrawl health` reads (srcrawl/app/health.py)."""
    return f"{lease_key}:waiting:{host}"


def processing_pattern(queue_key: str) -> str:
    """SCAN pattern of every processing list of the queue ``queue_key``."""
    return processing_key(queue_key, "*")


@dataclass(frozen=True)
class Keys:
    """Key builders of one job."""

    job: str
    part: int | None = None
    """The crawl partition these keys are of (None: the job itself, or its one partition)."""

    @property
    def prefix(self) -> str:
        if self.part is None:
            return self.job_prefix
        return f"srcrawl:{{{self.job}/{self.part}}}"

    @property
    def job_prefix(self) -> str:
        """The prefix of what the whole job shares, whichever partition these keys are of."""
        return f"srcrawl:{{{self.job}}}"

    def partition(self, p: int, partitions: int) -> Keys:
        """The keys of partition ``p`` of a crawl of ``partitions`` (itself when there is one)."""
        if not 0 <= p < partitions:
            raise ValueError(f"partition {p} of {partitions}")
        return Keys(self.job) if partitions == 1 else Keys(self.job, p)

    def partitions(self, partitions: int) -> list[Keys]:
        """The keys of every partition of a crawl of ``partitions``."""
        return [self.partition(p, partitions) for p in range(partitions)]

    @property
    def job_keys(self) -> Keys:
        return Keys(self.job)

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

    def stats(self, phase: str) -> str:
        """Hash of counters of a phase (pages, errors, …)."""
        return f"{self.prefix}:{_check_phase(phase)}:stats"

    def master_lease(self, phase: str) -> str:
        """The lease naming the one master of a phase (``queues/lease.py``)."""
        return f"{self.prefix}:{_check_phase(phase)}:master"

    # -- workers ----------------------------------------------------------
    @property
    def workers(self) -> str:
        """Hash: worker id -> JSON list of the processing lists it may hold."""
        return f"{self.job_prefix}:workers"

    def heartbeat(self, worker: str) -> str:
        """A worker's heartbeat (JSON stats), expiring after the heartbeat TTL."""
        return f"{self.job_prefix}:heartbeat:{worker}"

    @property
    def tags(self) -> str:
        """Job-wide tag counters (worker ids are unique across phases)."""
        return f"{self.job_prefix}:tags"

    @property
    def metrics(self) -> str:
        """Hash of the job's counters published by its processes for ``/metrics``
        (fetches and bytes by status class, fetch time buckets, WARC bytes and files,
        PageRank runs): each process adds what it counted since its last heartbeat, so
        the totals outlive the process (srcrawl/core/telemetry.py)."""
        return f"{self.job_prefix}:metrics"

    @property
    def processes(self) -> str:
        """Hash: process id -> JSON of its memory, open files and CPU (and ``at``), for
        processes with no worker heartbeat (the crawl master); entries older than the
        heartbeat TTL are stale (srcrawl/core/telemetry.py)."""
        return f"{self.job_prefix}:processes"

    @property
    def guards(self) -> str:
        """Hash: guard (``disk``, ``redis_memory``) -> JSON of why the crawl is paused, set
        by the crawl master while it holds (master/guards.py)."""
        return f"{self.job_prefix}:guards"

    # -- crawl frontier and seen set (written by the crawl master only) ---
    @property
    def crawl_strategy(self) -> str:
        """The versioned strategy document (scope, politeness, policy) as JSON."""
        return f"{self.job_prefix}:crawl:strategy"

    @property
    def crawl_state(self) -> str:
        """Hash: level, advancing flag, state (running/complete), timestamps, and ``paused``
        (when an operator paused the job: its master hands out no task, see
        master/crawl_control.py). Of a partition (P > 1): the level its own next-level tasks
        were released to, and its commits."""
        return f"{self.prefix}:crawl:state"

    @property
    def crawl_assignment(self) -> str:
        """Hash: partition -> the master process that took it last, and ``version``, counted
        up at each change: which master holds what (master/partitioned.py)."""
        return f"{self.job_prefix}:crawl:assignment"

    @property
    def crawl_masters(self) -> str:
        """Hash: crawl master process id -> when its registration lapses (epoch ms); how the
        masters of a partitioned crawl know their fair share (master/partitioned.py)."""
        return f"{self.job_prefix}:crawl:masters"

    @property
    def crawl_ready(self) -> str:
        """Sorted set: queue name -> earliest time (ms) its next request may start."""
        return f"{self.prefix}:crawl:ready"

    @property
    def crawl_inflight(self) -> str:
        """Hash: queue name -> the task it has in flight (at most one per queue)."""
        return f"{self.prefix}:crawl:inflight"

    @property
    def crawl_queue_next(self) -> str:
        """Hash: queue name -> earliest time (ms) of its next request, kept while idle."""
        return f"{self.prefix}:crawl:qnext"

    def crawl_queue(self, name: str) -> str:
        """List of fetch tasks of one frontier queue (a host, or a hash bucket)."""
        return f"{self.prefix}:crawl:q:{name}"

    @property
    def crawl_queue_prefix(self) -> str:
        return f"{self.prefix}:crawl:q:"

    @property
    def crawl_next_level(self) -> str:
        """List of fetch tasks of the next depth level, released when this level is done."""
        return f"{self.prefix}:crawl:nextlevel"

    @property
    def crawl_host_pages(self) -> str:
        """Hash: host -> URLs scheduled (for the per-host page cap)."""
        return f"{self.prefix}:crawl:hostpages"

    @property
    def crawl_host_errors(self) -> str:
        """Hash: host -> JSON of why its robots.txt could not be had (while it could not)."""
        return f"{self.prefix}:crawl:hosterrors"

    @property
    def crawl_host_inflight(self) -> str:
        """Hash: host -> requests in flight, for hosts spread over several queues (--per-host)."""
        return f"{self.prefix}:crawl:hostinflight"

    @property
    def crawl_host_limit(self) -> str:
        """Hash: host -> most requests in flight (--per-host, or 1 with a robots Crawl-delay);
        a host not in it is held to 1 until its robots.txt is read."""
        return f"{self.prefix}:crawl:hostlimit"

    @property
    def crawl_host_next(self) -> str:
        """Hash: host -> earliest time (ms) of its next request, for hosts held to 1 at a time."""
        return f"{self.prefix}:crawl:hostnext"

    @property
    def crawl_parked_prefix(self) -> str:
        """Prefix of the set per host of its queues parked while the host is at its limit."""
        return f"{self.prefix}:crawl:parked:"

    @property
    def crawl_cooling_prefix(self) -> str:
        """Prefix of the sorted set per host (limit above 1) of its request slots waiting out
        their politeness: queue whose request freed the slot -> when it is free (epoch ms)."""
        return f"{self.prefix}:crawl:cooling:"

    def crawl_host_slots(self, host: str) -> str:
        """Sorted set of a host's request slots taken by the slaves (--per-host N > 1): slot
        -> when it is free again (epoch ms, the Redis server's clock). Under the job's own
        hash tag, so one script call takes and frees the slots of several hosts."""
        return f"{self.job_prefix}:crawl:slots:{host}"

    @property
    def crawl_lagging(self) -> str:
        """Set of frontier queues whose head task waits on a robots.txt deferral: the depth
        levels do not wait for them (see master/frontier/)."""
        return f"{self.prefix}:crawl:lagging"

    @property
    def crawl_slow(self) -> str:
        """Set of lagging queues that lag because their host is slow to answer (a fetch out
        for --lag-after or longer), not because of a robots.txt deferral."""
        return f"{self.prefix}:crawl:slow"

    @property
    def crawl_flying(self) -> str:
        """Sorted set: queue name -> when (ms) its task in flight was handed out."""
        return f"{self.prefix}:crawl:flying"

    @property
    def crawl_held(self) -> str:
        """List of Links messages not admitted while a guard held admission (low disk, Redis
        memory): they go back to nrq when it lets go (master/guards.py)."""
        return f"{self.prefix}:crawl:held"

    @property
    def crawl_backoff(self) -> str:
        """Sorted set of fetch tasks backing off after a failure of their own URL (the task →
        when it goes back to the head of its queue): its queue goes on meanwhile."""
        return f"{self.prefix}:crawl:backoff"

    @property
    def crawl_backoff_queues(self) -> str:
        """Sorted set of frontier queues held back by a failure of their host (a connection
        failure, 429 or 503 with Retry-After) → until when (the progress line says so)."""
        return f"{self.prefix}:crawl:backoff:queues"

    @property
    def crawl_depths(self) -> str:
        """Hash of packed buckets: the depth record, each URL's scheduled depth while a shorter
        path to it may still come (master/frontier/depth_record.py)."""
        return f"{self.prefix}:crawl:depths"

    @property
    def crawl_improved(self) -> str:
        """Hash: fp -> depth of URLs found again by a shorter path; the store is told at the end."""
        return f"{self.prefix}:crawl:improved"

    @property
    def crawl_due(self) -> str:
        """Sorted set: fp -> when the stored page is due to be fetched again (epoch ms).
        The recrawl schedule (see master/frontier/, docs/ARCHITECTURE.md)."""
        return f"{self.prefix}:crawl:due"

    @property
    def crawl_due_tasks(self) -> str:
        """Hash: fp -> the fetch task of a due page (its URL, queue, validators, digest and
        current interval), moved into its host queue when its time comes."""
        return f"{self.prefix}:crawl:due:tasks"

    @property
    def seen_snapshot(self) -> str:
        """The serialised Bloom filter of the seen set."""
        return f"{self.prefix}:crawl:seen:snapshot"

    @property
    def seen_journal(self) -> str:
        """List of packed fingerprints added to the seen set since the snapshot."""
        return f"{self.prefix}:crawl:seen:journal"

    def robots(self, origin: str) -> str:
        """robots.txt outcome of one origin (``scheme://host:port``), shared by all slaves.

        Expires by itself (TTL); found by prefix, like the queue lists.
        """
        return f"{self.robots_prefix}{origin}"

    @property
    def robots_prefix(self) -> str:
        """Prefix of every robots.txt cache key of the job."""
        return f"{self.job_prefix}:crawl:robots:"

    @property
    def crawl_sitemap_hosts(self) -> str:
        """Set: origins whose sitemaps are on the recrawl schedule (read again every
        --sitemap-every by a task of their own), so each has one such task at a time."""
        return f"{self.prefix}:crawl:sitemap:hosts"

    @property
    def sitemap_lastmod(self) -> str:
        """Hash: page fingerprint -> the ``<lastmod>`` its host's sitemap gave (epoch seconds).

        Bounded (DEFAULT_SITEMAP_LASTMOD_MAX fields). Forgotten with the rest of the crawl's
        state (reset_crawl): the sitemaps are read again with each host's robots.txt, and
        the schedule their ``<lastmod>`` moves goes with the reset too.
        """
        return f"{self.prefix}:crawl:sitemap:lastmod"

    def crawl_keys(self) -> list[str]:
        """Every fixed key of a crawl's state (queue lists are found by prefix)."""
        return [
            self.crawl_strategy,
            self.crawl_state,
            self.crawl_ready,
            self.crawl_inflight,
            self.crawl_queue_next,
            self.crawl_next_level,
            self.crawl_host_pages,
            self.seen_snapshot,
            self.seen_journal,
            self.stats("crawl"),
            self.crawl_host_errors,
            self.crawl_lagging,
            self.crawl_slow,
            self.crawl_flying,
            self.crawl_depths,
            self.crawl_improved,
            self.crawl_host_inflight,
            self.crawl_host_limit,
            self.crawl_host_next,
            self.crawl_due,
            self.crawl_due_tasks,
            self.crawl_sitemap_hosts,
            self.crawl_held,
            self.crawl_backoff,
            self.crawl_backoff_queues,
        ]

    # -- the portal's admin area (portal/admin.py), shared by every portal worker --------
    @property
    def admin_secret(self) -> str:
        """The random key that signs the admin area's session cookies, made by the first
        portal process that needs it (SET NX), so every worker checks what another signed."""
        return f"{self.job_prefix}:admin:secret"

    def admin_session(self, session: str) -> str:
        """A logged-in admin session, expiring with it; logging out deletes it."""
        return f"{self.job_prefix}:admin:session:{session}"

    def admin_login_failures(self, client: str) -> str:
        """Failed logins from one client address in the current window (expires with it)."""
        return f"{self.job_prefix}:admin:login-failures:{client}"

    # -- pagerank (the master writes these; slaves write the next rank pieces) --
    def rank_graph(self, version: int) -> str:
        """What every map task of a graph version needs: damping, shard ranges, out-degrees."""
        return f"{self.prefix}:pagerank:graph:{version}"

    def rank_shard(self, version: int, shard: int) -> str:
        """Packed arrays of one shard of a published graph version."""
        return f"{self.prefix}:pagerank:shard:{version}:{shard}"

    def rank_unclaimed(self, version: int, iteration: int) -> str:
        """Set of the shard numbers of an iteration no slave has claimed yet."""
        return f"{self.prefix}:pagerank:unclaimed:{version}:{iteration}"

    def rank_piece(self, version: int, iteration: int, shard: int) -> str:
        """The ranks of one shard's destinations that an iteration of a graph version
        starts from (packed float64); the task of that shard in the iteration before
        writes it."""
        return f"{self.prefix}:pagerank:piece:{version}:{iteration}:{shard}"

    # -- the index published to an object store (indexer/publisher.py, replica.py) --
    @property
    def index_published(self) -> str:
        """Hash: the commit the index master last published to the object store (its
        ``commit`` opstamp, ``published_at`` epoch seconds, ``files``, ``bytes``)."""
        return f"{self.job_prefix}:index:published"

    @property
    def index_replicas(self) -> str:
        """Hash: replica id (``host:directory``) -> JSON of the commit it holds and when
        it became searchable there, refreshed every INDEX_REPLICA_REPORT_EVERY seconds."""
        return f"{self.job_prefix}:index:replicas"
