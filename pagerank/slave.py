"""The slave side of PageRank: the map step of one shard per task.

Shards are fetched from Redis once per graph version and kept; the rank
vector once per iteration, whatever the number of shards this slave serves
in it. So an iteration moves only the vector in and the partial sums out.

The partial sums (8 bytes per destination, megabytes per shard) are
pushed to ``nrq`` just before the runtime acknowledges the task, not by the
acknowledgement itself, so that they stay out of the append-only file (see
transport.py). A slave that dies between the two steps leaves its task to
be computed again, and the master takes one result per (iteration, shard)
and drops the repeat. Small answers (stale or failed tasks), and every
answer while that push fails, go the usual, atomic way.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import redis

from srcrawl.config import Config
from srcrawl.errors import EnvelopeError
from srcrawl.pagerank.protocol import MapTask, Partial, stale, task_error, unpack_vector
from srcrawl.pagerank.shards import Shard, ShardSums
from srcrawl.pagerank.transport import TransientWriter


class RankHandler:
    """PhaseHandler of the ``pagerank`` phase (see slave/handler.py)."""

    phase = "pagerank"
    batch_size = 1  # one shard per pop: idle slaves take the remaining shards
    threads = 1  # numpy does the work; one core per slave process

    def __init__(self, cfg: Config) -> None:
        self.client: redis.Redis = cfg.redis()
        self.bulk = TransientWriter(self.client)
        self.keys = cfg.keys
        self._lock = threading.Lock()
        self._version: int | None = None
        self._shards: dict[int, ShardSums] = {}
        self._vector: tuple[int, int, np.ndarray] | None = None
        self.computed = 0
        self.stale = 0
        self.shard_loads = 0
        self.vector_loads = 0
        self.compute_s = 0.0
        self.vector_s = 0.0

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        with self._lock:
            answers = [self._answer(raw) for raw in tasks]
        partials = [message for message, is_partial in answers if is_partial]
        if partials:
            try:
                self.bulk.rpush(self.keys.nrq(self.phase), *partials)
            except redis.RedisError:
                return [message for message, _ in answers]
        return [message for message, is_partial in answers if not is_partial]

    def _answer(self, raw: bytes) -> tuple[bytes, bool]:
        """The answer to one task, and whether it is a partial sums message."""
        answer = self._compute(raw)
        return (answer, False) if isinstance(answer, bytes) else (answer.encode(), True)

    def _compute(self, raw: bytes) -> Partial | bytes:
        try:
            task = MapTask.decode(raw)
        except EnvelopeError as e:
            return task_error(raw, f"malformed map task: {e}")
        if task.version != self._version:
            # a new graph: the old one's shards will not be asked for again
            self._version, self._shards, self._vector = task.version, {}, None
        x = self._vector_of(task)
        if x is None:
            self.stale += 1
            return stale(task, "the rank vector of its iteration is gone")
        try:
            shard = self._shard_of(task)
        except ValueError as e:
            return task_error(raw, f"shard {task.shard} is corrupt: {e}")
        if shard is None:
            self.stale += 1
            return stale(task, "the shard is gone")
        if shard.max_source >= len(x):
            return task_error(
                raw,
                f"shard {task.shard} names node {shard.max_source} beyond the vector's {len(x)}",
            )
        t0 = time.perf_counter()
        sums = shard.sums(x)
        self.compute_s += time.perf_counter() - t0
        self.computed += 1
        return Partial(task.version, task.iteration, task.shard, shard.lo, sums)

    def _vector_of(self, task: MapTask) -> np.ndarray | None:
        """``x`` of the task's iteration (cached); None if Redis no longer has it."""
        cached = self._vector
        if cached is not None and cached[:2] == (task.version, task.iteration):
            return cached[2]
        t0 = time.perf_counter()
        raw = self.client.get(self.keys.rank_vector(task.version, task.iteration))
        if raw is None:
            return None
        try:
            x = unpack_vector(raw)
        except EnvelopeError:
            return None
        self.vector_loads += 1
        self.vector_s += time.perf_counter() - t0
        self._vector = (task.version, task.iteration, x)
        return x

    def _shard_of(self, task: MapTask) -> ShardSums | None:
        """The cached shard; None if Redis no longer has it; ValueError if it is corrupt."""
        shard = self._shards.get(task.shard)
        if shard is not None:
            return shard
        raw = self.client.get(self.keys.rank_shard(task.version, task.shard))
        if raw is None:
            return None
        try:
            version, packed = Shard.unpack(raw)
        except EnvelopeError as e:
            raise ValueError(str(e)) from e
        if (version, packed.index) != (task.version, task.shard):
            raise ValueError(
                f"the key of shard {task.shard} holds shard {packed.index} of graph {version}"
            )
        self.shard_loads += 1
        shard = self._shards[task.shard] = ShardSums(packed)
        return shard

    def stats(self) -> dict[str, float]:
        return {
            "shards": self.computed,
            "stale": self.stale,
            "shard_loads": self.shard_loads,
            "vector_loads": self.vector_loads,
            "compute_s": round(self.compute_s, 3),
            "vector_s": round(self.vector_s, 3),
            "cache_mb": round(sum(s.nbytes for s in self._shards.values()) / 2**20, 1),
        }
