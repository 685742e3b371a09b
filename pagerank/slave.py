"""The slave side of PageRank: the map and the reduce step of one shard per task.

A task names an iteration, not a shard: the slave claims one of the
iteration's unclaimed shards, preferably the one it computed in the
iteration before, then one it already holds, so that each shard tends to
stay with one slave and is read from Redis once per run, not once per
slave. The graph header and the shards are fetched once per graph version
and kept: in the load round before the first iteration, whose tasks claim
and load a shard and compute nothing (the claims of the first iteration
then prefer the shards loaded), or by the first task that claims a shard
this slave does not hold. Once per iteration, whatever the number of shards it serves in
it, a slave assembles the rank vector the iteration starts from (one piece
per shard: those it computed itself in the iteration before, it kept; it
reads only the others) and derives ``x = rank / outdeg`` and the constant
term ``(d · dangling mass + 1 − d) / n`` (pages without out-links spread
their rank evenly, as in networkx). Shards partition the destinations, so
a shard's sums are final for its range: the task finishes the shard's
destinations, ``rank' = d · sums + constant``, and answers with the
shard's part of the L1 change, a message of a few bytes. The new ranks are
the shard's piece of the next iteration: the runtime's acker thread writes
it (``flush``) just before it acknowledges the task, while the next shard
is being summed.

Computing a shard twice (the master offers the shards of a dead slave
again) writes the same bytes to the same key: they depend only on the
iteration's pieces, the shard and the header. A piece is written only
while the shard's piece of the running iteration exists; the master
deletes those when it closes the iteration, so a late slave cannot touch
an iteration in use. The master takes one answer per (iteration, shard)
and drops repeats.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

import numpy as np
import redis

from srcrawl.core.defaults import (
    DEFAULT_PAGERANK_CLAIM_RETRY,
    DEFAULT_PAGERANK_KEY_TTL,
    DEFAULT_PAGERANK_STEAL_AFTER,
    DEFAULT_PAGERANK_WRITE_RETRY_DELAY,
    DEFAULT_PAGERANK_WRITE_TRIES,
)
from srcrawl.core.errors import EnvelopeError
from srcrawl.core.keys import Keys
from srcrawl.core.outage import REDIS_DOWN, RedisOutage
from srcrawl.core.redis_script import register_script
from srcrawl.pagerank.protocol import (
    LOAD_ROUND,
    GraphHeader,
    MapTask,
    ShardDone,
    pack_vector,
    stale,
    task_error,
)
from srcrawl.pagerank.shards import Shard, ShardSums
from srcrawl.pagerank.transport import TransientWriter
from srcrawl.settings.config import Config

_FLOAT = np.dtype("<f8")

# KEYS[1] the unclaimed set of an iteration, KEYS[2] srq; ARGV[1] the task, or ''
# if the caller takes any shard; ARGV[2…] the shards the caller prefers.
# Removes and returns the first preferred shard still in the set. Else, if the set
# is empty (every shard is taken, or the iteration is over), returns -1. Else, given
# the task, pushes it back to srq for the slaves holding the shards left and returns
# -2; without, removes and returns any shard of the set.
_CLAIM = """
for i = 2, #ARGV do
  if redis.call('SREM', KEYS[1], ARGV[i]) == 1 then return tonumber(ARGV[i]) end
end
if redis.call('SCARD', KEYS[1]) == 0 then return -1 end
if ARGV[1] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return -2
end
return tonumber(redis.call('SPOP', KEYS[1]))
"""


@dataclass(frozen=True)
class GraphFacts:
    """A graph header made ready for repeated iterations."""

    damping: float
    bounds: list[tuple[int, int]]
    """(lo, hi) of each shard's destinations, by shard number."""
    inv_out: np.ndarray
    """float64[n]: 1 / out-degree, 0 for dangling nodes."""
    dangling: np.ndarray
    """intp[k]: the nodes without out-links, ascending."""

    @property
    def n(self) -> int:
        return len(self.inv_out)

    @classmethod
    def of(cls, header: GraphHeader) -> GraphFacts:
        inv_out = np.zeros(header.n, dtype=np.float64)
        np.divide(1.0, header.outdeg, out=inv_out, where=header.outdeg > 0)
        cuts = header.bounds.tolist()
        bounds = list(itertools.pairwise(cuts))
        return cls(header.damping, bounds, inv_out, np.flatnonzero(header.outdeg == 0))


@dataclass(frozen=True)
class IterationInput:
    """What every shard of one iteration reads."""

    version: int
    iteration: int
    rank: np.ndarray
    x: np.ndarray
    """``rank / outdeg`` (0 for dangling nodes): what flows along each link."""
    constant: float
    """``(d · dangling mass + 1 − d) / n``: added to every node's new rank."""

    @classmethod
    def of(
        cls, version: int, iteration: int, rank: np.ndarray, graph: GraphFacts
    ) -> IterationInput:
        d = graph.damping
        # the same operations in the same order as one in-process iteration,
        # so the ranks come out bit for bit the same
        constant = float((d * rank[graph.dangling].sum() + 1.0 - d) / graph.n)
        return cls(version, iteration, rank, rank * graph.inv_out, constant)


@dataclass(frozen=True)
class Piece:
    """A computed piece waiting to be written: to ``key`` while ``guard`` exists."""

    key: str
    guard: str
    data: memoryview


class RankHandler:
    """PhaseHandler of the ``pagerank`` phase (see slave/handler.py)."""

    phase = "pagerank"
    batch_size = 1  # one shard per pop: idle slaves take the remaining shards
    threads = 1  # numpy does the work; one core per slave process

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.bulk = TransientWriter(self.client)
        self.keys = keys
        self._lock = threading.Lock()
        self._version: int | None = None
        self._graph: GraphFacts | None = None
        self._shards: dict[int, ShardSums] = {}
        self._input: IterationInput | None = None
        self._pieces: dict[int, np.ndarray] = {}
        """Pieces this slave computed, of the iteration ``_pieces_of``, by shard."""
        self._pieces_of: int | None = None
        self._pending: list[Piece] = []
        self._computed: dict[int, list[int]] = {}
        """Shards this slave claimed, by iteration (the running one and the one before)."""
        self._pending_lock = threading.Lock()
        self._claim_script = register_script(self.client, _CLAIM)
        self._waiting: tuple[int, int, float] | None = None
        """(version, iteration, since when): the iteration whose tasks this slave has
        been handing back to the holders of the shards left."""
        self.computed = 0
        self.stale = 0
        self.retries = 0
        self.late = 0
        self.deferred = 0
        self.shard_loads = 0
        self.vector_loads = 0
        self.pieces_read = 0
        self.compute_s = 0.0
        self.vector_s = 0.0
        self.write_s = 0.0

    @classmethod
    def from_config(cls, cfg: Config) -> RankHandler:
        """The handler of the configured Redis and job."""
        return cls(cfg.redis(), cfg.keys)

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        with self._lock:
            answers = [self._answer(raw) for raw in tasks]
        return [a for a in answers if a is not None]

    def _answer(self, raw: bytes) -> bytes | None:
        """The answer to one task; None when every shard of its iteration is taken."""
        try:
            task = MapTask.decode(raw)
        except EnvelopeError as e:
            return task_error(raw, f"malformed map task: {e}")
        if task.version != self._version:
            # a new graph: the old one's shards will not be asked for again
            self._version, self._graph, self._shards, self._input = task.version, None, {}, None
            self._pieces, self._pieces_of, self._computed = {}, None, {}
        try:
            graph = self._graph_of(task)
        except ValueError as e:
            return task_error(raw, str(e))
        if graph is None:
            return self._stale(task, "the graph header is gone")
        index = self._claim(task, raw)
        if index is None:
            return None
        self._claimed(task.iteration, index)
        try:
            shard = self._shard_of(task, index)
        except ValueError as e:
            return task_error(raw, str(e))
        if shard is None:
            return self._stale(task, "the shard is gone", index)
        if index >= len(graph.bounds) or graph.bounds[index] != (shard.lo, shard.hi):
            return task_error(raw, f"shard {index} does not match the graph header")
        if shard.max_source >= graph.n:
            return task_error(raw, f"shard {index} names nodes beyond the graph's {graph.n}")
        if task.iteration == LOAD_ROUND:
            return ShardDone(task.version, task.iteration, index, 0.0).encode()
        return self._reduce(task, index, graph, shard)

    def _claimed(self, iteration: int, index: int) -> None:
        """Note the shard claimed in ``iteration``; forget the claims of older ones."""
        self._computed.setdefault(iteration, []).append(index)
        for old in [i for i in self._computed if i < iteration - 1]:
            del self._computed[old]

    def _reduce(self, task: MapTask, index: int, graph: GraphFacts, shard: ShardSums) -> bytes:
        """Sum the shard, finish its destinations' new ranks and queue them as its piece
        of the next iteration; answer with its part of the L1 change."""
        given = self._input_of(task, graph)
        if given is None:
            return self._stale(task, "the ranks of its iteration are gone", index)
        t0 = time.perf_counter()
        new = shard.sums(given.x)
        new *= graph.damping
        new += given.constant
        delta = float(np.abs(new - given.rank[shard.lo : shard.hi]).sum())
        self._keep(task.iteration + 1, index, new)
        self.compute_s += time.perf_counter() - t0
        piece = Piece(
            self.keys.rank_piece(task.version, task.iteration + 1, index),
            self.keys.rank_piece(task.version, task.iteration, index),
            pack_vector(new),
        )
        with self._pending_lock:
            self._pending.append(piece)
        self.computed += 1
        return ShardDone(task.version, task.iteration, index, delta).encode()

    def _claim(self, task: MapTask, raw: bytes) -> int | None:
        """Take a shard of the task's iteration that no slave has taken, if any is left:
        preferably the one this slave computed in the iteration before, then one it
        holds, so that each shard tends to stay with one slave and is read once.

        When only shards it does not hold are left, a slave that holds some hands
        the task back for a while instead: their holders are usually about to
        claim them, sooner than this slave could read one (an 8 MB read and
        conversion for a few milliseconds of sums). Past DEFAULT_PAGERANK_STEAL_AFTER
        (a holder died, or is slow) it takes one. Nobody holds a shard in the
        load round, nor does a slave that joined later: those take any.
        """
        previous = self._computed.get(task.iteration - 1, [])
        preferred = previous + [i for i in self._shards if i not in previous]
        now, this = time.monotonic(), (task.version, task.iteration)
        since = self._waiting[2] if self._waiting and self._waiting[:2] == this else now
        wait = (
            task.iteration != LOAD_ROUND
            and bool(preferred)
            and now - since < DEFAULT_PAGERANK_STEAL_AFTER
        )
        unclaimed = self.keys.rank_unclaimed(task.version, task.iteration)
        index = int(
            self._claim_script(
                keys=[unclaimed, self.keys.srq(self.phase)], args=[raw if wait else b"", *preferred]
            )
        )
        if index == -2:
            self._waiting = (*this, since)
            self.deferred += 1
            time.sleep(DEFAULT_PAGERANK_CLAIM_RETRY)  # rather than pop the same task at once
        return None if index < 0 else index

    def flush(self) -> None:
        """Write the pieces of the tasks computed so far (the runtime calls this
        before it acknowledges them, from another thread, so the next shard is
        summed meanwhile). A write that fails is tried again a few times, then
        the error goes to the runtime, which reports those tasks as failed."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
        t0 = time.perf_counter()
        try:
            while pending:
                self._write(pending[0])
                pending.pop(0)
        finally:
            if pending:  # unwritten: the tasks acknowledged next need them too
                with self._pending_lock:
                    self._pending[:0] = pending
            self.write_s += time.perf_counter() - t0

    def _write(self, piece: Piece) -> None:
        delay = DEFAULT_PAGERANK_WRITE_RETRY_DELAY
        for attempt in range(DEFAULT_PAGERANK_WRITE_TRIES):
            try:
                if not self.bulk.set_while(
                    piece.key, piece.data, DEFAULT_PAGERANK_KEY_TTL, guard=piece.guard
                ):
                    # the master closed the iteration: its pieces are all written
                    self.late += 1
                return
            except (redis.RedisError, *REDIS_DOWN) as e:
                # a client that waits out outages gives up on Redis only once the slave
                # stops: it leaves at once; any other failed write is tried again
                waited = isinstance(e, REDIS_DOWN) and isinstance(
                    self.bulk.client.get_retry(), RedisOutage
                )
                if waited or attempt + 1 == DEFAULT_PAGERANK_WRITE_TRIES:
                    raise
                self.retries += 1
                time.sleep(delay)
                delay *= 2

    def _stale(self, task: MapTask, reason: str, shard: int | None = None) -> bytes:
        self.stale += 1
        return stale(task, reason, shard)

    def _keep(self, iteration: int, shard: int, piece: np.ndarray) -> None:
        """Keep a computed piece for the iteration that starts from it: the stored
        one holds the same bytes, whoever wrote it."""
        if self._pieces_of != iteration:
            self._pieces, self._pieces_of = {}, iteration
        self._pieces[shard] = piece

    def _graph_of(self, task: MapTask) -> GraphFacts | None:
        """The cached graph facts; None if Redis no longer has them; ValueError if corrupt."""
        if self._graph is not None:
            return self._graph
        raw = self.client.get(self.keys.rank_graph(task.version))
        if raw is None:
            return None
        try:
            version, header = GraphHeader.unpack(raw)
        except EnvelopeError as e:
            raise ValueError(f"the graph header is corrupt: {e}") from e
        if version != task.version:
            raise ValueError(f"the graph header of {task.version} holds that of {version}")
        self._graph = GraphFacts.of(header)
        return self._graph

    def _input_of(self, task: MapTask, graph: GraphFacts) -> IterationInput | None:
        """The task's iteration input (cached); None if Redis lacks one of its pieces."""
        cached = self._input
        if cached is not None and (cached.version, cached.iteration) == (
            task.version,
            task.iteration,
        ):
            return cached
        t0 = time.perf_counter()
        own = self._pieces if self._pieces_of == task.iteration else {}
        others = [i for i in range(len(graph.bounds)) if i not in own]
        raws = []
        if others:
            keys = [self.keys.rank_piece(task.version, task.iteration, i) for i in others]
            raws = self.client.mget(keys)
        rank = np.empty(graph.n, dtype=np.float64)
        for i, piece in own.items():
            lo, hi = graph.bounds[i]
            rank[lo:hi] = piece
        for i, raw in zip(others, raws, strict=True):
            lo, hi = graph.bounds[i]
            if raw is None or len(raw) != (hi - lo) * _FLOAT.itemsize:
                return None
            rank[lo:hi] = np.frombuffer(raw, dtype=_FLOAT)
        self._input = IterationInput.of(task.version, task.iteration, rank, graph)
        self.vector_loads += 1
        self.pieces_read += len(others)
        self.vector_s += time.perf_counter() - t0
        return self._input

    def _shard_of(self, task: MapTask, index: int) -> ShardSums | None:
        """The cached shard; None if Redis no longer has it; ValueError if it is corrupt."""
        shard = self._shards.get(index)
        if shard is not None:
            return shard
        try:
            parts = self.client.lrange(self.keys.rank_shard(task.version, index), 0, -1)
            if not parts:
                return None
            version, packed = Shard.unpack(parts)
        except (EnvelopeError, ValueError, redis.ResponseError) as e:
            raise ValueError(f"shard {index} is corrupt: {e}") from e
        if (version, packed.index) != (task.version, index):
            raise ValueError(
                f"shard {index} is corrupt: its key holds shard {packed.index} of graph {version}"
            )
        self.shard_loads += 1
        shard = self._shards[index] = ShardSums(packed)
        return shard

    def stats(self) -> dict[str, float]:
        return {
            "shards": self.computed,
            "stale": self.stale,
            "retries": self.retries,
            "late": self.late,
            "deferred": self.deferred,
            "shard_loads": self.shard_loads,
            "vector_loads": self.vector_loads,
            "pieces_read": self.pieces_read,
            "compute_s": round(self.compute_s, 3),
            "vector_s": round(self.vector_s, 3),
            "write_s": round(self.write_s, 3),
            "cache_mb": round(sum(s.nbytes for s in self._shards.values()) / 2**20, 1),
        }
