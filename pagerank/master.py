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

The master waits out a Redis outage as every master does (srcrawl/outage.py).
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

from srcrawl.defaults import (
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
from srcrawl.errors import EnvelopeError, LeaseLost
from srcrawl.keys import Keys, last_pop_key
from srcrawl.outage import master_waits_out, wait_out_outages
from srcrawl.pagerank.errors import PageRankError, RunStateLost
from srcrawl.pagerank.graph import Graph
from srcrawl.pagerank.protocol import (
    LOAD_ROUND,
    GraphHeader,
    MapTask,
    ShardDone,
    pack_vector,
    unpack_vector,
)
from srcrawl.pagerank.shards import Shard
from srcrawl.pagerank.transport import TransientWriter
from srcrawl.queues.envelope import Message, decode
from srcrawl.queues.lease import MasterLease, holder_id
from srcrawl.queues.protocol import PhaseQueues, new_worker_id
from srcrawl.queues.workers import Worker, reap, requeued, workers

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

# KEYS[1] this master's processing list of nrq; ARGV[1] how many results it took.
# Acknowledges them: the master pops into its own, empty processing list and
# handles all it popped, so they are its head.
_ACK = """
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
return 1
"""

# KEYS: keys to delete (closing an iteration: its unclaimed set and pieces, after
# which no late slave can write a piece of the next one; or a run's leftovers).
_DELETE = """
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return #KEYS
"""


def _round(iteration: int) -> str:
    return "the load round" if iteration == LOAD_ROUND else f"iteration {iteration}"


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


class Tally:
    """The results of one iteration: exactly one per shard is taken."""

    def __init__(self, version: int, iteration: int, shards: list[Shard]) -> None:
        self.version = version
        self.iteration = iteration
        self._slot = {s.index: i for i, s in enumerate(shards)}
        self._deltas = np.zeros(len(shards))
        self._missing = set(self._slot)

    @property
    def missing(self) -> int:
        return len(self._missing)

    @property
    def missing_shards(self) -> list[int]:
        return sorted(self._missing)

    def is_missing(self, version: int, iteration: int, shard: int) -> bool:
        """Whether the shard of that iteration is one this tally still waits for."""
        return (version, iteration) == (self.version, self.iteration) and shard in self._missing

    def offer(self, done: ShardDone) -> bool:
        """Take ``done`` if it is this iteration's first result for its shard."""
        if not self.is_missing(done.version, done.iteration, done.shard):
            return False
        self._missing.discard(done.shard)
        self._deltas[self._slot[done.shard]] = done.delta
        return True

    @property
    def delta(self) -> float:
        """The L1 change of the iteration: its shards' parts, added in shard order
        (so a run gives the same figure whatever order the results came in)."""
        return float(self._deltas.sum())


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
        self.client = client
        self.outage = master_waits_out(client, log, stopping)  # as the crawl master does
        self.keys = keys
        self.queues = PhaseQueues(client, keys, PHASE)
        self.reap_interval = reap_interval
        self.stall_timeout = DEFAULT_PAGERANK_STALL_TIMEOUT
        self.block_timeout = block_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_ttl = heartbeat_ttl
        self.on_iteration = on_iteration or (lambda report: None)
        self.on_load = on_load or (lambda report: None)
        self.on_wait = on_wait or (lambda message: None)
        self.slaves_alive = slaves_alive
        self.id = new_worker_id(client, keys, "master")
        self.lease = MasterLease(client, keys.master_lease(PHASE), holder_id(self.id), lease_ttl)
        # renewed well within its TTL, however short the TTL is set
        self.renew_interval = min(heartbeat_interval, lease_ttl / 3)
        self._offer_script = self.lease.script(_OFFER)
        self._ack_script = self.lease.script(_ACK)
        self._delete_script = self.lease.script(_DELETE)
        self.bulk = TransientWriter(client)
        wait_out_outages(self.bulk.client, self.outage)
        self._comebacks = 0
        self._stop_beat = threading.Event()
        self._lost_lock = False
        self._iteration = 0

    # -- the whole run -------------------------------------------------------
    def run(self, graph: Graph, shards: list[Shard], params: RankParams) -> RankResult:
        """Rank ``graph`` (cut into ``shards``) and return the ranks."""
        if graph.n == 0:
            raise PageRankError("the graph has no nodes")
        self.lease.acquire(what="pagerank master")
        self._stop_beat.clear()
        self._lost_lock = False
        worker = Worker(
            self.client,
            self.keys,
            self.id,
            [self.queues.nrq],
            role="master",
            ttl=self.heartbeat_ttl,
        )
        beat = threading.Thread(target=self._heartbeat, args=(worker,), daemon=True)
        self._version: int | None = None
        try:
            # tasks and results of a dead run are worthless: drop them
            self._delete_script(keys=[self.queues.srq.key, self.queues.nrq.key])
            worker.beat()
            beat.start()
            for restart in range(DEFAULT_PAGERANK_RESTARTS + 1):
                try:
                    return self._attempt(graph, shards, params)
                except RunStateLost as e:
                    if restart == DEFAULT_PAGERANK_RESTARTS:
                        raise
                    self.on_wait(f"{e}: the run starts again")
                    self._drop_leftovers(self._version, shards)
            raise AssertionError("unreachable")
        finally:
            self._stop_beat.set()
            if beat.is_alive():
                beat.join()
            self._drop_leftovers(self._version, shards)
            worker.retire()
            self.lease.release()
            self.bulk.close()

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
        if not self._collect(tally, result, patient=False):
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
            self._collect(tally, result)
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

    # -- collecting one iteration's results ---------------------------------------
    def _collect(self, tally: Tally, result: RankResult, *, patient: bool = True) -> bool:
        """Take results until every shard of the iteration has one; whether it did.

        When no result came for the stall timeout, a patient collection offers
        the missing shards again; an impatient one gives up.
        """
        nrq = self.queues.nrq
        next_check = last_result = last_offer = time.monotonic()
        next_check += self.reap_interval
        warned = False
        while tally.missing:
            if self._lost_lock:
                self.lease.keep()  # raises LeaseLost, naming who holds the lease now
            self._check_state(tally.version)
            wait = min(self.block_timeout, max(0.01, next_check - time.monotonic()))
            raw = self._pop(tally.missing, wait)
            for message in raw:
                self._take(message, tally, result)
            if raw:
                # acknowledged by count: this master pops into its own, empty
                # processing list and handles all it popped, so they are its head
                self._ack_script(keys=[nrq.processing_key(self.id)], args=[len(raw)])
                last_result, warned = time.monotonic(), False
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.reap_interval
                self._reap(tally, result)
                idle = time.monotonic() - last_result
                if idle > self.stall_timeout and time.monotonic() - last_offer > self.stall_timeout:
                    if not patient:
                        return False
                    last_offer = time.monotonic()
                    self._offer_if_no_task(tally)
                if not warned and idle > 5 * self.reap_interval and not self._live_slaves():
                    warned = True
                    self.on_wait(
                        "waiting for a pagerank slave (start one with "
                        "`srcrawl slave start --phases pagerank`)"
                    )
        return True

    def _check_state(self, version: int) -> None:
        """RunStateLost if Redis came back from an outage without this run's graph (a
        restarted server keeps nothing written out of its AOF)."""
        if self.outage.comebacks == self._comebacks:
            return
        self._comebacks = self.outage.comebacks
        if not self.client.exists(self.keys.rank_graph(version)):
            raise RunStateLost("Redis came back without this run's graph (kept out of its AOF)")

    def _pop(self, count: int, timeout: float) -> list[bytes]:
        """Move up to ``count`` results into this master's processing list, in one round
        trip; blocks up to ``timeout`` when there is none. A pop sent again after an
        outage lost its reply gets what the first one moved (queues/work_queue.py)."""
        return self.queues.nrq.pop(self.id, count, timeout=timeout)

    def _take(self, raw: bytes, tally: Tally, result: RankResult) -> None:
        try:
            msg = decode(raw)
            if msg.kind == "done":
                if not tally.offer(ShardDone.from_message(msg)):
                    result.dropped += 1
                return
        except EnvelopeError:
            result.dropped += 1
            return
        if msg.kind == "error":
            self._raise_if_ours(msg, tally)
        elif msg.kind == "stale" and (msg.get("version"), msg.get("iteration")) == (
            tally.version,
            tally.iteration,
        ):
            shard = msg.get("shard")
            if shard is None or (
                isinstance(shard, int) and tally.is_missing(tally.version, tally.iteration, shard)
            ):
                # the header, a shard or the pieces of the running iteration vanished
                raise RunStateLost(
                    f"a slave found {_round(tally.iteration)} unavailable: {msg.get('reason')}"
                )
        result.dropped += 1

    def _raise_if_ours(self, msg: Message, tally: Tally) -> None:
        for raw_task in msg.payload.split(b"\n"):
            try:
                task = MapTask.decode(raw_task)
            except EnvelopeError:
                continue
            if (task.version, task.iteration) == (tally.version, tally.iteration):
                raise PageRankError(
                    f"a slave failed in {_round(task.iteration)}: {msg.get('error')}"
                )

    def _reap(self, tally: Tally, result: RankResult) -> None:
        """Requeue the tasks of dead slaves and make the shards they may have claimed
        claimable again; raise if this run's own slaves are all gone."""
        # only a task of this phase can have claimed a shard: a dead slave of
        # another phase (the same job's crawl, say) costs no offer
        returned = requeued(reap(self.client, self.keys), self.queues.srq.key)
        if returned:
            result.requeued += returned
            # which shard a dead slave held is not recorded: offer every missing
            # one again; a shard computed twice writes the same bytes, and the
            # master takes one answer per shard
            self._offer(tally.version, tally.iteration, tally.missing_shards)
        if self.slaves_alive is not None and not self.slaves_alive():
            raise PageRankError("every slave of this run has exited")

    def _offer_if_no_task(self, tally: Tally) -> None:
        """Offer the missing shards again when no map task is left to compute them.

        A slave that retires hands its unacknowledged task back to srq, but a
        shard it had claimed stays claimed; the task, taken again, finds no
        shard to claim. Recomputing a shard writes the same bytes and the
        master takes one answer per shard, so offering again is always safe.
        """
        if self.client.llen(self.queues.srq.key) == 0:
            self._offer(tally.version, tally.iteration, tally.missing_shards)

    def _live_slaves(self) -> int:
        srq = self.queues.srq.key
        return sum(w.alive and srq in w.queues for w in workers(self.client, self.keys))

    # -- one master per job ------------------------------------------------------
    def _heartbeat(self, worker: Worker) -> None:
        last_beat = time.monotonic()
        while not self._stop_beat.wait(self.renew_interval):
            try:
                if not self.lease.renew():
                    self._lost_lock = True
                if time.monotonic() - last_beat >= self.heartbeat_interval:
                    worker.beat({"iteration": self._iteration})
                    last_beat = time.monotonic()
            except redis.RedisError:
                pass  # the next beat tries again; the wait loop sees Redis errors itself
