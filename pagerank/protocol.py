"""The messages of the pagerank phase.

- ``srq``: a ``map`` task per shard and iteration: (graph version, iteration, shard).
- the rank vector key of an iteration: ``x = rank / outdeg``, packed float64,
  written once per iteration whatever the number of shards (see master.py).
- ``nrq``: a ``partial`` message per task with the shard's packed sums, or a
  ``stale`` message when the task belongs to a graph or iteration that has
  moved on, or an ``error`` message when the slave could not do the task.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from srcrawl.errors import EnvelopeError
from srcrawl.queues.envelope import Message, decode, encode

_FLOAT = np.dtype("<f8")


def _int(msg: Message, name: str) -> int:
    value = msg.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise EnvelopeError(f"{msg.kind} message has no integer {name!r}")
    return value


@dataclass(frozen=True)
class MapTask:
    """Compute the partial sums of one shard in one iteration of one graph."""

    version: int
    iteration: int
    shard: int

    def encode(self) -> bytes:
        return encode(
            "map", {"version": self.version, "iteration": self.iteration, "shard": self.shard}
        )

    @classmethod
    def from_message(cls, msg: Message) -> MapTask:
        """The task in ``msg``; EnvelopeError if it is not a well-formed map task."""
        if msg.kind != "map":
            raise EnvelopeError(f"expected a map task, got a {msg.kind!r} message")
        return cls(_int(msg, "version"), _int(msg, "iteration"), _int(msg, "shard"))

    @classmethod
    def decode(cls, raw: bytes) -> MapTask:
        return cls.from_message(decode(raw))


@dataclass(frozen=True)
class Partial:
    """The partial sums of one shard: ``sums[r]`` belongs to destination ``lo + r``."""

    version: int
    iteration: int
    shard: int
    lo: int
    sums: np.ndarray

    def encode(self) -> bytes:
        fields = {
            "version": self.version,
            "iteration": self.iteration,
            "shard": self.shard,
            "lo": self.lo,
            "hi": self.lo + len(self.sums),
        }
        return encode("partial", fields, self.sums.astype(_FLOAT, copy=False).tobytes())

    @classmethod
    def from_message(cls, msg: Message) -> Partial:
        lo, hi = _int(msg, "lo"), _int(msg, "hi")
        if hi < lo or len(msg.payload) != (hi - lo) * _FLOAT.itemsize:
            raise EnvelopeError("partial sums do not match their destination range")
        sums = np.frombuffer(msg.payload, dtype=_FLOAT)
        return cls(_int(msg, "version"), _int(msg, "iteration"), _int(msg, "shard"), lo, sums)


def stale(task: MapTask, reason: str) -> bytes:
    """The answer to a task whose graph or iteration is gone: the master drops it."""
    return encode(
        "stale",
        {
            "version": task.version,
            "iteration": task.iteration,
            "shard": task.shard,
            "reason": reason,
        },
    )


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
