"""The master side of PageRank: iterations as rounds of map tasks over Redis.

Per run: the graph header (damping, the shards' destination ranges, the
out-degrees) and the shards go to Redis once, under a fresh graph version
from ``trq``, and the first iteration's ranks (every node 1/n) as one
piece per shard. Then the load round: one task per shard, each of which
makes a slave claim a shard, read and keep it, so that the shards are in
the slaves' memory before the first iteration and their one-time cost is
timed apart from the iterations. The round is only a head start: a shard
no slave loaded in it (its slave died, none answered within the stall
timeout, a slave joined later) is loaded by whichever slave claims it in
an iteration. Per iteration: the master makes every shard claimable and
pushes one map task per shard to ``srq``; the slave that takes a task
claims a shard, sums it, finishes its destinations' new ranks and writes
them as the shard's piece of the next iteration (see slave.py), so the
reduce step happens in the map tasks and only a few bytes per shard come
back: its part of the L1 change. The master takes those from ``nrq``
(reliably, like any consumer) until it has exactly one per shard; results
of another graph version or iteration, and repeats, are dropped. When it
reaps a dead slave it offers the missing shards again; one computed twice
writes the same bytes.

The master waits out a Redis outage as every master does (srcrawl/core/outage.py).
The graph, the shards and the rank pieces are written out of the AOF
(pagerank/transport.py), so a Redis that was restarted comes back without
them: the master notices (the graph's key is gone when Redis is back, a
slave reports a piece it needs missing, or the final ranks are) and starts
the run again under a new graph version, from the first iteration, at most
DEFAULT_PAGERANK_RESTARTS times. Nothing of the lost run is kept, so the
ranks are those of one whole run. With one result per shard the next iteration's
pieces are all written: the master closes the iteration (deletes its
pieces, after which no late slave can write the next ones) and starts the
next. It reads the ranks once, at the end.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import redis

from srcrawl.core.defaults import (
    DEFAULT_BLOCK_TIMEOUT,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HEARTBEAT_TTL,
    DEFAULT_MASTER_LEASE_TTL,
    DEFAULT_PAGERANK_DAMPING,
    DEFAULT_PAGERANK_ITERATIONS,
    DEFAULT_PAGERANK_KEY_TTL,
    DEFAULT_PAGERANK_REAP_INTERVAL,
    DEFAULT_PAGERANK_RESTARTS,
    DEFAULT_PAGERANK_STALL_TIMEOUT,
    DEFAULT_PAGERANK_TOL,
)
from srcrawl.core.errors import LeaseLost
from srcrawl.core.keys import Keys, last_pop_key
from srcrawl.core.outage import wait_out_outages
from srcrawl.pagerank.collect import ACK, Collector, Tally
from srcrawl.pagerank.errors import PageRankError, RunStateLost
from srcrawl.pagerank.graph import Graph
from srcrawl.pagerank.protocol import LOAD_ROUND, GraphHeader, MapTask, pack_vector, unpack_vector
from srcrawl.pagerank.shards import Shard
from srcrawl.pagerank.transport import TransientWriter
from srcrawl.queues.master_session import MasterSession
from srcrawl.queues.protocol import PhaseQueues

__all__ = ["IterationReport", "LoadReport", "RankMaster", "RankParams", "RankResult", "Tally"]

PHASE = "pagerank"

log = logging.getLogger("srcrawl.pagerank")

# The master's commits, each run fenced by its lease (queues/lease.py): a
# master that lost its lease can neither offer, nor acknowledge, nor close an
# iteration, and stops with LeaseLost.

# KEYS[1] the unclaimed set of an iteration, KEYS[2] srq; ARGV[1] the set's TTL
# in seconds, ARGV[2] the map task, ARGV[3…] the shards. Makes the shards
# claimable and pushes one task per shard.
_OFFER = """
for i = 3, #ARGV do redis.call('SADD', KEYS[1], ARGV[i]) end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
for i = 3, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[2]) end
return #ARGV - 2
"""

# KEYS: keys to delete (closing an iteration: its unclaimed set and pieces, after
# which no late slave can write a piece of the next one; or a run's leftovers).
_DELETE = """
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return #KEYS
"""


@dataclass(frozen=True)
class RankParams:
    """How to iterate: damping, at most ``iterations`` rounds, stop below ``tol``."""

    iterations: int = DEFAULT_PAGERANK_ITERATIONS
    damping: float = DEFAULT_PAGERANK_DAMPING
    tol: float = DEFAULT_PAGERANK_TOL

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise PageRankError(f"--iterations must be at least 1, not {self.iterations}")
        if not 0.0 <= self.damping < 1.0:
            raise PageRankError(f"--damping must be in [0, 1), not {self.damping}")
        if not self.tol >= 0.0:
            raise PageRankError(f"--tol must be 0 or more, not {self.tol}")


@dataclass(frozen=True)
class IterationReport:
    iteration: int
    delta: float
    """L1 norm of the change of the rank vector in this iteration."""
    seconds: float


@dataclass(frozen=True)
class LoadReport:
    """The one-time steps of a run, before its first iteration."""

    publish_seconds: float
    """The master writing the header, the shards and the first ranks to Redis."""
    seconds: float
    """The load round: slaves reading the shards from Redis and keeping them ready."""
    loaded: int
    """Shards loaded in the round; fewer than ``shards`` if it stalled (the rest are
    loaded by the slaves that claim them in an iteration)."""
    shards: int


@dataclass
class RankResult:
    fps: np.ndarray
    """int64[n]: the fingerprint of each ranked page."""
    ranks: np.ndarray
    """float64[n]: its rank; the ranks sum to 1."""
    reports: list[IterationReport] = field(default_factory=list)
    converged: bool = False
    """True when --tol stopped the iterations."""
    requeued: int = 0
    """Tasks returned to srq because the slave holding them died."""
    dropped: int = 0
    """Results dropped: of another graph or iteration, or a repeat."""
    load: LoadReport | None = None


class RankMaster:
    """Runs the iterations of one graph over the pagerank queues of a job."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        reap_interval: float = DEFAULT_PAGERANK_REAP_INTERVAL,
        block_timeout: float = DEFAULT_BLOCK_TIMEOUT,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL,
        lease_ttl: float = DEFAULT_MASTER_LEASE_TTL,
        on_iteration: Callable[[IterationReport], None] | None = None,
        on_load: Callable[[LoadReport], None] | None = None,
        on_wait: Callable[[str], None] | None = None,
        slaves_alive: Callable[[], bool] | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        """``slaves_alive``, when given, says whether the slaves this run relies on
        still exist; the master gives up when it returns False. ``lease_ttl``:
        the seconds this master's lease lives unrenewed (``Config.lease_ttl``).
        ``stopping``: once set, a Redis outage ends the run with its error instead of
        being waited out (``pagerank --every`` told to stop while Redis is gone)."""
        self.client, self.keys = client, keys
        self.queues = PhaseQueues(client, keys, PHASE)
        # the lease, the heartbeat, the outage wait and the run's endings
        self.session = MasterSession(
            client,
            keys,
            PHASE,
            role="master",
            lease_ttl=lease_ttl,
            log=log,
            stopping=stopping,
            worker_queues=[self.queues.nrq],
            heartbeat_ttl=heartbeat_ttl,
            heartbeat_interval=heartbeat_interval,
        )
        self.session.stats = lambda: {"iteration": self._iteration}
        self.id, self.lease, self.outage = self.session.id, self.session.lease, self.session.outage
        self.on_iteration = on_iteration or (lambda report: None)
        self.on_load = on_load or (lambda report: None)
        self.on_wait = on_wait or (lambda message: None)
        self._offer_script = self.lease.script(_OFFER)
        self._delete_script = self.lease.script(_DELETE)
        self.collector = Collector(
            client,
            keys,
            self.queues,
            self.id,
            ack=self.lease.script(ACK),
            offer=self._offer,
            check=self._check_state,
            reap_interval=reap_interval,
            block_timeout=block_timeout,
            stall_timeout=DEFAULT_PAGERANK_STALL_TIMEOUT,
            on_wait=self.on_wait,
            slaves_alive=slaves_alive,
        )
        self.bulk = TransientWriter(client)
        wait_out_outages(self.bulk.client, self.outage)
        self._iteration = 0  # the round the heartbeat reports

    # -- the whole run -------------------------------------------------------
    def run(self, graph: Graph, shards: list[Shard], params: RankParams) -> RankResult:
        """Rank ``graph`` (cut into ``shards``) and return the ranks."""
        if graph.n == 0:
            raise PageRankError("the graph has no nodes")
        self.session.acquire(what="pagerank master")
        self._version: int | None = None
        # renewed by a thread: publishing a graph may outlast a renewal; a Redis outage
        # met once told to stop is the caller's to say (pagerank --every)
        try:
            with self.session.running(background=True, outage_stops=False):
                try:
                    # tasks and results of a dead run are worthless: drop them
                    self._delete_script(keys=[self.queues.srq.key, self.queues.nrq.key])
                    return self._attempts(graph, shards, params)
                finally:
                    self._drop_leftovers(self._version, shards)
        finally:
            self.bulk.close()
        raise AssertionError("unreachable: a Redis outage is raised, not ended quietly")

    def _attempts(self, graph: Graph, shards: list[Shard], params: RankParams) -> RankResult:
        """Run until one whole run gets through; again when Redis lost its state."""
        for restart in range(DEFAULT_PAGERANK_RESTARTS + 1):
            try:
                return self._attempt(graph, shards, params)
            except RunStateLost as e:
                if restart == DEFAULT_PAGERANK_RESTARTS:
                    raise
                self.on_wait(f"{e}: the run starts again")
                self._drop_leftovers(self._version, shards)
        raise AssertionError("unreachable")

    def _attempt(self, graph: Graph, shards: list[Shard], params: RankParams) -> RankResult:
        """One whole run under a new graph version; RunStateLost if its graph went."""
        self._version = version = self.queues.trq.next("graph")
        self._comebacks = self.outage.comebacks
        self._iteration = 0
        t0 = time.perf_counter()
        self._publish(version, graph, shards, params)
        result = RankResult(graph.fps, np.full(graph.n, 1.0 / graph.n))
        result.load = self._load(version, shards, result, time.perf_counter() - t0)
        self.on_load(result.load)
        result = self._iterate(graph, shards, params, version, result)
        # the ranks are this master's to hand on only while it leads
        self.lease.keep()
        return result

    def _drop_leftovers(self, version: int | None, shards: list[Shard]) -> None:
        """Delete what this run left in Redis (after a failure, the queues still hold
        its tasks and results), unless the lease is lost: then they are its successor's."""
        nrq = self.queues.nrq
        leftovers = [self.queues.srq.key, nrq.key, last_pop_key(nrq.key, self.id)]
        if version is not None:
            last = self._iteration
            leftovers.append(self.keys.rank_graph(version))
            leftovers += [self.keys.rank_shard(version, s.index) for s in shards]
            for i in sorted({LOAD_ROUND, 1, last, last + 1}):
                leftovers.append(self.keys.rank_unclaimed(version, i))
                leftovers += [self.keys.rank_piece(version, i, s.index) for s in shards]
        with contextlib.suppress(LeaseLost):  # the run fails with the LeaseLost it met first
            self._delete_script(keys=leftovers)

    def _publish(self, version: int, graph: Graph, shards: list[Shard], params: RankParams) -> None:
        ttl = DEFAULT_PAGERANK_KEY_TTL
        bounds = np.array([s.lo for s in shards] + [graph.n], dtype=np.int64)
        if [s.index for s in shards] != list(range(len(shards))) or np.any(np.diff(bounds) <= 0):
            raise PageRankError("the shards must cut the nodes in order, numbered from 0")
        header = GraphHeader(params.damping, bounds, graph.outdeg)
        self.bulk.set(self.keys.rank_graph(version), header.pack(version), ttl)
        for shard in shards:
            self.bulk.set_list(self.keys.rank_shard(version, shard.index), shard.pack(version), ttl)
        first = np.full(graph.n, 1.0 / graph.n)
        for shard in shards:
            key = self.keys.rank_piece(version, 1, shard.index)
            self.bulk.set(key, pack_vector(first[shard.lo : shard.hi]), ttl)

    def _load(
        self, version: int, shards: list[Shard], result: RankResult, publish_seconds: float
    ) -> LoadReport:
        """Run the load round: every shard loaded by a slave, or a stall."""
        t0 = time.perf_counter()
        self._offer(version, LOAD_ROUND, [s.index for s in shards])
        tally = Tally(version, LOAD_ROUND, shards)
        if not self.collector.collect(tally, result, patient=False):
            # the shards left are loaded by the slaves that claim them in an
            # iteration; the round's tasks left in srq would find nothing to claim
            self.client.lrem(self.queues.srq.key, 0, MapTask(version, LOAD_ROUND).encode())
        self._delete_script(keys=[self.keys.rank_unclaimed(version, LOAD_ROUND)])
        loaded = len(shards) - tally.missing
        return LoadReport(publish_seconds, time.perf_counter() - t0, loaded, len(shards))

    def _iterate(
        self,
        graph: Graph,
        shards: list[Shard],
        params: RankParams,
        version: int,
        result: RankResult,
    ) -> RankResult:
        for iteration in range(1, params.iterations + 1):
            t0 = time.perf_counter()
            self._iteration = iteration
            # the pieces of this iteration are all written before any of its tasks exists
            self._offer(version, iteration, [s.index for s in shards])
            tally = Tally(version, iteration, shards)
            self.collector.collect(tally, result)
            # closed: from now on no slave can write a piece of the next iteration
            closed = [self.keys.rank_piece(version, iteration, s.index) for s in shards]
            self._delete_script(keys=[self.keys.rank_unclaimed(version, iteration), *closed])
            delta = tally.delta
            last = iteration == params.iterations or delta < params.tol
            if last:
                result.ranks = self._ranks(version, iteration + 1, graph.n, shards)
                result.converged = delta < params.tol
            report = IterationReport(iteration, delta, time.perf_counter() - t0)
            result.reports.append(report)
            self.on_iteration(report)
            if last:
                break
        return result

    def _offer(self, version: int, iteration: int, shards: list[int]) -> None:
        """Make ``shards`` claimable and push one task per shard, in one round trip."""
        task = MapTask(version, iteration).encode()
        self._offer_script(
            keys=[self.keys.rank_unclaimed(version, iteration), self.queues.srq.key],
            args=[DEFAULT_PAGERANK_KEY_TTL, task, *shards],
        )

    def _ranks(self, version: int, iteration: int, n: int, shards: list[Shard]) -> np.ndarray:
        """The ranks the slaves wrote for ``iteration``, piece by piece."""
        raws = self.client.mget([self.keys.rank_piece(version, iteration, s.index) for s in shards])
        ranks = np.empty(n, dtype=np.float64)
        for shard, raw in zip(shards, raws, strict=True):
            piece = unpack_vector(raw or b"")
            if len(piece) != shard.hi - shard.lo:
                raise RunStateLost(
                    f"the ranks of shard {shard.index} after iteration {iteration - 1} are gone"
                )
            ranks[shard.lo : shard.hi] = piece
        return ranks

    def _check_state(self, version: int) -> None:
        """LeaseLost (naming who holds the lease now) if the renewal found the lease gone;
        RunStateLost if Redis came back from an outage without this run's graph (a
        restarted server keeps nothing written out of its AOF)."""
        self.session.check()
        if self.outage.comebacks == self._comebacks:
            return
        self._comebacks = self.outage.comebacks
        if not self.client.exists(self.keys.rank_graph(version)):
            raise RunStateLost("Redis came back without this run's graph (kept out of its AOF)")
