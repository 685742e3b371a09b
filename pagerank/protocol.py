"""The messages and shared values of the pagerank phase.

- the graph key of a version: what every map task needs besides its shard
  (node count, damping, the shards' destination ranges, every node's
  out-degree), written once per run.
- the piece keys of an iteration: the ranks it starts from, one key per
  shard's destination range, packed float64. The master writes those of
  the first iteration; the task of a shard writes its piece of the next.
- the unclaimed set of an iteration: the shards no slave has taken yet.
- ``srq``: a ``map`` task per shard and iteration, (graph version,
  iteration): the slave that takes one claims a shard from the unclaimed
  set, one it already holds if it can (see slave.py). Iteration 0
  (``LOAD_ROUND``) comes before the first: its tasks make slaves claim a
  shard and load it, computing nothing; they answer ``done`` with no change.
- ``nrq``: a ``done`` message per task with the shard's part of the L1
  change, acknowledged once its piece of the next iteration is written; a
  ``stale`` message when the task's graph or iteration has moved on; an
  ``error`` message when the slave could not do the task; nothing when
  every shard of the task's iteration was already taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from srcrawl.core.errors import EnvelopeError
from srcrawl.queues.envelope import Message, decode, encode

LOAD_ROUND = 0
"""The iteration number of the load round, in which slaves load shards and compute nothing."""

_FLOAT = np.dtype("<f8")
_INDEX = np.dtype("<i4")
_BOUND = np.dtype("<i8")


def _int(msg: Message, name: str) -> int:
    value = msg.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise EnvelopeError(f"{msg.kind} message has no integer {name!r}")
    return value


@dataclass(frozen=True)
class MapTask:
    """Claim one shard of one iteration of one graph and compute it."""

    version: int
    iteration: int

    def encode(self) -> bytes:
        return encode("map", {"version": self.version, "iteration": self.iteration})

    @classmethod
    def from_message(cls, msg: Message) -> MapTask:
        """The task in ``msg``; EnvelopeError if it is not a well-formed map task."""
        if msg.kind != "map":
            raise EnvelopeError(f"expected a map task, got a {msg.kind!r} message")
        return cls(_int(msg, "version"), _int(msg, "iteration"))

    @classmethod
    def decode(cls, raw: bytes) -> MapTask:
        return cls.from_message(decode(raw))


@dataclass(frozen=True)
class ShardDone:
    """One shard of one iteration is reduced: its piece of the next rank vector is
    written, and ``delta`` is its part of the iteration's L1 change."""

    version: int
    iteration: int
    shard: int
    delta: float

    def encode(self) -> bytes:
        fields = {
            "version": self.version,
            "iteration": self.iteration,
            "shard": self.shard,
            "delta": self.delta,  # JSON keeps a float's every bit (repr round-trips)
        }
        return encode("done", fields)

    @classmethod
    def from_message(cls, msg: Message) -> ShardDone:
        """The result in ``msg``; EnvelopeError if it is not a well-formed ``done``."""
        delta = msg.get("delta")
        if not isinstance(delta, float):
            raise EnvelopeError("done message has no float 'delta'")
        return cls(_int(msg, "version"), _int(msg, "iteration"), _int(msg, "shard"), delta)


@dataclass(frozen=True)
class GraphHeader:
    """What a slave needs of a graph version besides its shards."""

    damping: float
    bounds: np.ndarray
    """int64[shards + 1]: shard ``i`` holds the destinations ``bounds[i] … bounds[i+1]-1``."""
    outdeg: np.ndarray
    """int32[n]: out-links of each node (0 for dangling nodes)."""

    @property
    def n(self) -> int:
        return len(self.outdeg)

    def pack(self, version: int) -> bytes:
        fields = {
            "version": version,
            "n": self.n,
            "shards": len(self.bounds) - 1,
            "damping": float(self.damping),
        }
        payload = self.bounds.astype(_BOUND).tobytes() + self.outdeg.astype(_INDEX).tobytes()
        return encode("graph", fields, payload)

    @classmethod
    def unpack(cls, raw: bytes) -> tuple[int, GraphHeader]:
        """(graph version, header); EnvelopeError if it is not a well-formed one."""
        msg = decode(raw)
        if msg.kind != "graph":
            raise EnvelopeError(f"expected a graph header, got a {msg.kind!r} message")
        n, shards, damping = _int(msg, "n"), _int(msg, "shards"), msg.get("damping")
        cut = (shards + 1) * _BOUND.itemsize
        if (
            not isinstance(damping, float)
            or shards < 1
            or len(msg.payload) != cut + n * _INDEX.itemsize
        ):
            raise EnvelopeError("graph header does not match its shards and out-degrees")
        bounds = np.frombuffer(msg.payload, dtype=_BOUND, count=shards + 1)
        if bounds[0] != 0 or bounds[-1] != n or np.any(np.diff(bounds) <= 0):
            raise EnvelopeError("graph header's shards do not cut its nodes")
        outdeg = np.frombuffer(msg.payload, dtype=_INDEX, offset=cut)
        return _int(msg, "version"), cls(damping, bounds, outdeg)


def stale(task: MapTask, reason: str, shard: int | None = None) -> bytes:
    """The answer to a task whose graph or iteration is gone: the master drops it,
    unless it names a shard of the running iteration."""
    fields = {"version": task.version, "iteration": task.iteration, "reason": reason}
    if shard is not None:
        fields["shard"] = shard
    return encode("stale", fields)


def task_error(raw_task: bytes, error: str) -> bytes:
    """The answer to a task a slave cannot do, shaped like the runtime's error report."""
    return encode("error", {"phase": "pagerank", "error": error}, raw_task)


def pack_vector(x: np.ndarray) -> memoryview:
    """A rank vector, or a piece of one, as stored: little-endian float64, uncopied."""
    return memoryview(np.ascontiguousarray(x, dtype=_FLOAT)).cast("B")


def unpack_vector(raw: bytes) -> np.ndarray:
    """The float64 vector stored in ``raw`` (a view, not a copy); EnvelopeError if cut short."""
    if len(raw) % _FLOAT.itemsize:
        raise EnvelopeError("a rank vector is a whole number of float64 values")
    return np.frombuffer(raw, dtype=_FLOAT)
