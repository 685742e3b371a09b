"""The master side of PageRank: iterations as map/reduce rounds over Redis.

Per graph: the shards go to Redis once, under a fresh graph version from
``trq``. Per iteration: one map task per shard goes to ``srq``, and the
master takes the partial sums from ``nrq`` (reliably, like any consumer)
until it has exactly one per shard. Results of another graph version or
iteration, and repeats, are dropped; a slave that dies mid-iteration is
reaped and its shard recomputed by another. The reduce step (adding the
teleport and dangling mass, measuring the L1 change) runs shard by shard as
results arrive, and writes each shard's piece of the next iteration's
``x = rank / outdeg`` at once: the vector is written once per iteration, and
is complete when the last result is in, so the next iteration starts then.
"""

from __future__ import annotations

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
    DEFAULT_PAGERANK_DAMPING,
    DEFAULT_PAGERANK_ITERATIONS,
    DEFAULT_PAGERANK_KEY_TTL,
    DEFAULT_PAGERANK_REAP_INTERVAL,
    DEFAULT_PAGERANK_TOL,
)
from srcrawl.errors import EnvelopeError
from srcrawl.keys import Keys
from srcrawl.pagerank.errors import PageRankError
from srcrawl.pagerank.graph import Graph
from srcrawl.pagerank.protocol import MapTask, Partial, pack_vector
from srcrawl.pagerank.shards import Shard
from srcrawl.pagerank.transport import TransientWriter
from srcrawl.queues.envelope import Message, decode
from srcrawl.queues.protocol import PhaseQueues, new_worker_id
from srcrawl.queues.workers import Worker, reap, workers

PHASE = "pagerank"

# KEYS[1] lock; ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] "refresh" or "release".
# Extends or deletes the lock only if ARGV[1] still holds it; returns 1 if so.
_LOCK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] == 'release' then redis.call('DEL', KEYS[1])
else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
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


class ReduceStep:
    """The reduce step of one iteration, shard by shard as partial sums arrive.

    Exactly one result per shard is taken. For the destinations ``lo … hi-1``
    of an accepted shard it sets ``new = d · sums + (d · dangling mass + 1 − d) / n``,
    adds their share of the L1 change, and returns their piece of the next
    iteration's ``x = new / outdeg``: the master writes that piece while other
    shards are still being summed, so the next vector is ready when the last
    result is in.
    """

    def __init__(
        self,
        version: int,
        iteration: int,
        shards: list[Shard],
        rank: np.ndarray,
        inv_out: np.ndarray,
        damping: float,
        dangling_mass: float,
    ) -> None:
        self.version = version
        self.iteration = iteration
        self.bounds = {s.index: (s.lo, s.hi) for s in shards}
        self.rank = rank
        self.inv_out = inv_out
        self.damping = damping
        self.teleport = (damping * dangling_mass + 1.0 - damping) / len(rank)
        self.new = np.empty_like(rank)
        self.delta = 0.0
        self._missing = set(self.bounds)

    @property
    def missing(self) -> int:
        return len(self._missing)

    def offer(self, partial: Partial) -> np.ndarray | None:
        """Reduce ``partial`` if it is this iteration's first result for its shard;
        return the shard's piece of the next ``x``, or None if it was dropped."""
        if (partial.version, partial.iteration) != (self.version, self.iteration):
            return None
        if partial.shard not in self._missing:
            return None
        lo, hi = self.bounds[partial.shard]
        if (partial.lo, partial.lo + len(partial.sums)) != (lo, hi):
            return None
        self._missing.discard(partial.shard)
        new = self.new[lo:hi]
        np.multiply(partial.sums, self.damping, out=new)
        new += self.teleport
        self.delta += float(np.abs(new - self.rank[lo:hi]).sum())
        return new * self.inv_out[lo:hi]


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
        on_iteration: Callable[[IterationReport], None] | None = None,
        on_wait: Callable[[str], None] | None = None,
        slaves_alive: Callable[[], bool] | None = None,
    ) -> None:
        """``slaves_alive``, when given, says whether the slaves this run relies on
        still exist; the master gives up when it returns False."""
        self.client = client
        self.keys = keys
        self.queues = PhaseQueues(client, keys, PHASE)
        self.reap_interval = reap_interval
        self.block_timeout = block_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_ttl = heartbeat_ttl
        self.on_iteration = on_iteration or (lambda report: None)
        self.on_wait = on_wait or (lambda message: None)
        self.slaves_alive = slaves_alive
        self.id = new_worker_id(client, keys, "master")
        self._lock_script = client.register_script(_LOCK)
        self.bulk = TransientWriter(client)
        self._stop_beat = threading.Event()
        self._lost_lock = False
        self._iteration = 0

    # -- the whole run -------------------------------------------------------
    def run(self, graph: Graph, shards: list[Shard], params: RankParams) -> RankResult:
        """Rank ``graph`` (cut into ``shards``) and return the ranks."""
        if graph.n == 0:
            raise PageRankError("the graph has no nodes")
        self._acquire()
        self._stop_beat.clear()
        self._lost_lock = False
        self._iteration = 0
        worker = Worker(
            self.client,
            self.keys,
            self.id,
            [self.queues.nrq],
            role="master",
            ttl=self.heartbeat_ttl,
        )
        beat = threading.Thread(target=self._heartbeat, args=(worker,), daemon=True)
        version: int | None = None
        try:
            # tasks and results of a dead run are worthless: drop them
            self.client.delete(self.queues.srq.key, self.queues.nrq.key)
            worker.beat()
            beat.start()
            version = self.queues.trq.next("graph")
            self._publish(version, shards)
            return self._iterate(graph, shards, params, version)
        finally:
            self._stop_beat.set()
            if beat.is_alive():
                beat.join()
            # after a failure the queues still hold this run's tasks and results
            leftovers = [self.queues.srq.key, self.queues.nrq.key]
            if version is not None:
                last = self._iteration
                leftovers += [self.keys.rank_vector(version, i) for i in (1, last, last + 1)]
                leftovers += [self.keys.rank_shard(version, s.index) for s in shards]
            self.client.delete(*leftovers)
            worker.retire()
            self._release()
            self.bulk.close()

    def _publish(self, version: int, shards: list[Shard]) -> None:
        for shard in shards:  # one at a time: only one packed copy in memory
            key = self.keys.rank_shard(version, shard.index)
            self.bulk.set(key, shard.pack(version), DEFAULT_PAGERANK_KEY_TTL)

    def _iterate(
        self, graph: Graph, shards: list[Shard], params: RankParams, version: int
    ) -> RankResult:
        n = graph.n
        outdeg = graph.outdeg
        dangling = np.flatnonzero(outdeg == 0)
        inv_out = np.zeros(n, dtype=np.float64)
        np.divide(1.0, outdeg, out=inv_out, where=outdeg > 0)
        rank = np.full(n, 1.0 / n)
        result = RankResult(graph.fps, rank)
        ttl = DEFAULT_PAGERANK_KEY_TTL
        self.bulk.set(self.keys.rank_vector(version, 1), pack_vector(rank * inv_out), ttl)
        for iteration in range(1, params.iterations + 1):
            t0 = time.perf_counter()
            self._iteration = iteration
            # the vector of this iteration is complete before any of its tasks exists
            self.queues.srq.push([MapTask(version, iteration, s.index).encode() for s in shards])
            step = ReduceStep(
                version,
                iteration,
                shards,
                rank,
                inv_out,
                params.damping,
                float(rank[dangling].sum()),
            )
            following = self.keys.rank_vector(version, iteration + 1)
            if iteration == params.iterations:
                following = None  # no next vector to build
            self._collect(step, result, following)
            self.client.delete(self.keys.rank_vector(version, iteration))
            rank = result.ranks = step.new
            report = IterationReport(iteration, step.delta, time.perf_counter() - t0)
            result.reports.append(report)
            self.on_iteration(report)
            if step.delta < params.tol:
                result.converged = True
                break
        return result

    # -- collecting one iteration's partial sums -------------------------------
    def _collect(self, step: ReduceStep, result: RankResult, following: str | None) -> None:
        """Reduce results until every shard has one; write the pieces of ``following``."""
        nrq = self.queues.nrq
        next_check = last_result = time.monotonic()
        next_check += self.reap_interval
        warned = False
        while step.missing:
            if self._lost_lock:
                raise PageRankError("another pagerank master took over this job")
            wait = min(self.block_timeout, max(0.01, next_check - time.monotonic()))
            raw = self._pop(step.missing, wait)
            for message in raw:
                self._take(message, step, result, following)
            if raw:
                # acknowledged by count: this master pops into its own, empty
                # processing list and handles all it popped, so they are its head
                self.client.ltrim(nrq.processing_key(self.id), len(raw), -1)
                last_result, warned = time.monotonic(), False
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.reap_interval
                self._reap(result)
                idle = time.monotonic() - last_result
                if not warned and idle > 5 * self.reap_interval and not self._live_slaves():
                    warned = True
                    self.on_wait(
                        "waiting for a pagerank slave (start one with "
                        "`srcrawl slave start --phases pagerank`)"
                    )

    def _pop(self, count: int, timeout: float) -> list[bytes]:
        """Move up to ``count`` results into this master's processing list.

        One pipelined LMOVE per message: Redis moves each message without
        copying it (WorkQueue.pop's script copies), which matters when every
        message carries a shard's sums. Blocks up to ``timeout`` for the first.
        """
        nrq = self.queues.nrq
        proc = nrq.processing_key(self.id)
        pipe = self.client.pipeline(transaction=False)
        for _ in range(count):
            pipe.lmove(nrq.key, proc, "LEFT", "RIGHT")
        got = [m for m in pipe.execute() if m is not None]
        if got or timeout <= 0:
            return got
        first = self.client.blmove(nrq.key, proc, timeout, "LEFT", "RIGHT")
        return [] if first is None else [first]

    def _take(
        self, raw: bytes, step: ReduceStep, result: RankResult, following: str | None
    ) -> None:
        try:
            msg = decode(raw)
            if msg.kind == "partial":
                partial = Partial.from_message(msg)
                piece = step.offer(partial)
                if piece is None:
                    result.dropped += 1
                elif following is not None:
                    offset = partial.lo * piece.itemsize
                    self.bulk.setrange(
                        following, offset, pack_vector(piece), DEFAULT_PAGERANK_KEY_TTL
                    )
                return
        except EnvelopeError:
            result.dropped += 1
            return
        if msg.kind == "error":
            self._raise_if_ours(msg, step)
        elif msg.kind == "stale" and (msg.get("version"), msg.get("iteration")) == (
            step.version,
            step.iteration,
        ):
            # the shard or vector of the running iteration vanished from Redis
            raise PageRankError(
                f"a slave found shard {msg.get('shard')} of the running "
                f"iteration unavailable: {msg.get('reason')}"
            )
        result.dropped += 1

    def _raise_if_ours(self, msg: Message, step: ReduceStep) -> None:
        for raw_task in msg.payload.split(b"\n"):
            try:
                task = MapTask.decode(raw_task)
            except EnvelopeError:
                continue
            if task.version == step.version:
                raise PageRankError(
                    f"a slave failed on shard {task.shard} of iteration "
                    f"{task.iteration}: {msg.get('error')}"
                )

    def _reap(self, result: RankResult) -> None:
        """Requeue the tasks of dead slaves; raise if this run's own slaves are all gone."""
        returned = reap(self.client, self.keys)
        result.requeued += sum(returned.values())
        if self.slaves_alive is not None and not self.slaves_alive():
            raise PageRankError("every slave of this run has exited")

    def _live_slaves(self) -> int:
        srq = self.queues.srq.key
        return sum(w.alive and srq in w.queues for w in workers(self.client, self.keys))

    # -- one master per job ------------------------------------------------------
    def _acquire(self) -> None:
        ttl = int(self.heartbeat_ttl * 1000)
        if not self.client.set(self.keys.rank_master, self.id, nx=True, px=ttl):
            holder = self.client.get(self.keys.rank_master)
            raise PageRankError(
                f"another pagerank master ({holder.decode() if holder else '?'}) "
                f"runs job {self.keys.job}"
            )

    def _release(self) -> None:
        self._lock_script(keys=[self.keys.rank_master], args=[self.id, 0, "release"])

    def _heartbeat(self, worker: Worker) -> None:
        ttl = int(self.heartbeat_ttl * 1000)
        while not self._stop_beat.wait(self.heartbeat_interval):
            try:
                worker.beat({"iteration": self._iteration})
                held = self._lock_script(
                    keys=[self.keys.rank_master], args=[self.id, ttl, "refresh"]
                )
                if not held:
                    self._lost_lock = True
            except redis.RedisError:
                pass  # the next beat tries again; the wait loop sees Redis errors itself
