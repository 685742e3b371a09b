"""The contract between the slave runtime and the work of one phase.

:class:`PhaseHandler` is what every handler has. The hooks below it are
what a handler may have besides; the runtime asks ``isinstance(handler,
Hook)`` and calls the hook through its protocol. They are protocols, not a
base class with no-op defaults, because a handler is any object of the right
shape: the phase packages' handlers and the tests' stand-ins alike need not
inherit from anything of the runtime's, and a handler that lacks a hook is
told from one whose hook does nothing (no ``flush`` means results are
durable as they are returned).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from srcrawl.core.telemetry import Telemetry


class PhaseHandler(Protocol):
    """What a slave does with the tasks of one phase.

    ``handle`` receives a batch of raw ``srq`` messages and returns the raw
    messages to push to ``nrq``; the runtime acknowledges the batch and
    pushes the results in one atomic step. ``handle`` must not raise for bad
    input (a malformed URL, hostile HTML): it reports such a task in its
    results. An exception means a bug; the runtime then reports the whole
    batch as failed to the master (an ``error`` message) instead of retrying
    it forever.
    """

    phase: str
    batch_size: int
    threads: int

    def handle(self, tasks: list[bytes]) -> list[bytes]: ...

    def stats(self) -> dict[str, float]:
        """Counters for the heartbeat (pages, errors, cache hit rate, …)."""
        ...


@runtime_checkable
class Flushes(Protocol):
    """A handler whose results need a write before their tasks are acknowledged."""

    def flush(self) -> None:
        """Make durable whatever the tasks returned so far produced.

        Called before the runtime acknowledges tasks this handler has
        returned results for. An exception turns the batches about to be
        acknowledged into failed ones (a StoreError: they wait for the store).
        """
        ...


@runtime_checkable
class Holds(Protocol):
    """A :class:`Flushes` handler whose flush may leave results waiting (the crawl's rows,
    until the WARC object their records are in is published)."""

    def held(self, final: bool) -> bool:
        """After a flush: whether results of tasks flushed so far still wait, so that none
        of those tasks may be acknowledged yet. ``final``: no more tasks come, finish now."""
        ...


@runtime_checkable
class RoutesElsewhere(Protocol):
    """A handler whose tasks produce messages for other partitions' queues (the crawl)."""

    def take_routed(self) -> dict[int, list[bytes]]:
        """The messages kept for other partitions so far, by partition; the runtime
        pushes them before it acknowledges the tasks that produced them."""
        ...


@runtime_checkable
class Forgets(Protocol):
    """A handler that remembers what it sent (the crawl: the links)."""

    def forget(self) -> None:
        """Results were refused (the master presumed this slave dead and queued
        their tasks again): forget what was sent, so that it is sent again."""
        ...


@runtime_checkable
class KnowsDrained(Protocol):
    """A handler that knows whether its phase has work left beyond an empty srq."""

    def drained(self) -> bool:
        """True once the phase has nothing queued and nothing in flight (``--burst``)."""
        ...


@runtime_checkable
class CountsMetrics(Protocol):
    """A handler with counters for the job's ``/metrics``."""

    def metrics(self) -> Telemetry:
        """What it counted; the runtime flushes it to Redis at each heartbeat."""
        ...


@runtime_checkable
class Closes(Protocol):
    """A handler holding resources (connections, threads) to let go when it stops."""

    def close(self) -> None: ...


@runtime_checkable
class MultiplexedHandler(PhaseHandler, Protocol):
    """A handler whose tasks wait on the network: many run at once in one thread.

    The runtime's driver thread calls :meth:`start` for each task the
    feeder hands over (``threads`` at most in flight) and :meth:`poll` in
    between, which waits until some task finished, ``wake_fd`` became
    readable (the feeder handed over more) or ``timeout`` passed. Both run
    in that one thread only. Neither raises for bad input.
    """

    def start(self, task: bytes) -> bytes | None:
        """The task's result when it is done at once, else None (``poll`` returns it)."""
        ...

    def poll(self, timeout: float, wake_fd: int) -> list[tuple[bytes, bytes]]:
        """``(task, result)`` of the tasks that finished since the last call."""
        ...

    def in_flight(self) -> int:
        """Tasks started and not yet returned by ``poll``."""
        ...
