"""The contract between the slave runtime and the work of one phase."""

from __future__ import annotations

from typing import Protocol


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

    # Optional: ``flush()``, called before the runtime acknowledges tasks this
    # handler has returned results for; whatever those tasks produced must be
    # durable when it returns. An exception turns the batches about to be
    # acknowledged into failed ones.

    def stats(self) -> dict[str, float]:
        """Counters for the heartbeat (pages, errors, cache hit rate, …)."""
        ...


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


def is_multiplexed(handler: PhaseHandler) -> bool:
    """Whether the runtime should drive ``handler`` through start/poll."""
    return all(callable(getattr(handler, name, None)) for name in ("start", "poll", "in_flight"))
