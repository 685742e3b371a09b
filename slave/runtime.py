"""The slave process: a template loop that serves any set of phases.

install signal handlers → per phase, a feeder pops (blocking) one batch
for every idle consumer in one round trip, ``threads`` consumers each
{ handle a batch → hand the results to the acker }, and the acker
acknowledges whatever batches finished meanwhile, with their results, in
one round trip → heartbeat thread → on stop, hand back anything
unacknowledged. With many fetch threads that is a round trip or two per
batch of pages instead of two or three per page. A multiplexed handler
(:class:`~srcrawl.slave.handler.MultiplexedHandler`, the crawl) gets one
driver thread instead of the consumers: it starts the tasks the feeder
pops into its free slots and collects them as they finish, ``threads`` of
them in flight at once. The first SIGTERM/SIGINT
lets every consumer finish its batch; a second one exits at once (what it
held is requeued by the master once the heartbeat lapses). While Redis
cannot be reached, every command waits for it (see :mod:`srcrawl.core.outage`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from srcrawl.core.defaults import (
    DEFAULT_BLOCK_TIMEOUT,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HEARTBEAT_TTL,
)
from srcrawl.core.errors import StoreError
from srcrawl.core.outage import REDIS_DOWN, RedisOutage, wait_out_outages
from srcrawl.core.signals import install_stop_handlers
from srcrawl.queues.envelope import encode
from srcrawl.queues.partitions import PartitionedQueues
from srcrawl.queues.protocol import PhaseQueues, new_worker_id
from srcrawl.queues.workers import Worker
from srcrawl.settings.config import Config
from srcrawl.slave.handler import (
    Closes,
    CountsMetrics,
    Flushes,
    Forgets,
    Holds,
    KnowsDrained,
    MultiplexedHandler,
    PhaseHandler,
    RoutesElsewhere,
)

if TYPE_CHECKING:
    import redis

    from srcrawl.core.keys import Keys

log = logging.getLogger("srcrawl.slave")


_HELD: list = []
"""What :meth:`Slave._flush` returns when the flushed results still wait (a :class:`Holds`
handler): the batches are kept, not acknowledged, and flushed again soon."""
_HOLD_TICK = 0.2
"""Seconds between two flushes while results are held (each may publish what is due)."""


class Slave:
    """One slave process serving ``handlers`` (one per phase)."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        handlers: Sequence[PhaseHandler],
        *,
        worker_id: str | None = None,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL,
        block_timeout: float = DEFAULT_BLOCK_TIMEOUT,
    ) -> None:
        """``client``: the process's Redis client, the one its handlers use, so that
        their commands too wait out an outage."""
        self.keys = keys
        self.stopping = threading.Event()
        self.client = client
        # every Redis command of this process (the handlers' too) waits out an outage
        wait_out_outages(self.client, RedisOutage(log, stopping=self.stopping))
        self.handlers = list(handlers)
        self.queues: dict[str, PhaseQueues | PartitionedQueues] = {
            h.phase: PartitionedQueues(self.client, keys, h.phase)
            if h.phase == "crawl"
            else PhaseQueues(self.client, keys, h.phase)
            for h in self.handlers
        }
        self.id = worker_id or new_worker_id(self.client, keys, "slave")
        self.worker = Worker(self.client, keys, self.id, self._srqs(), ttl=heartbeat_ttl)
        for q in self.queues.values():
            if isinstance(q, PartitionedQueues):  # a crawl started anew with other partitions
                q.on_change = lambda _srqs: self.worker.set_queues(self._srqs())
        self.heartbeat_interval = heartbeat_interval
        self.block_timeout = block_timeout
        self.batches = 0
        self.failed_batches = 0
        self.stored_at = 0.0
        """When a flush last made results durable (epoch seconds; 0: never)."""
        self.store_error: tuple[float, str] | None = None
        """When and why a flush last failed, until one succeeds: in the heartbeat, where
        `srcrawl health slave` reads it (a slave that cannot store is not healthy)."""
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: Config, handlers: Sequence[PhaseHandler], **options: Any) -> Slave:
        """A slave of the configured Redis and job; ``options`` as for the constructor."""
        return cls(cfg.redis(), cfg.keys, handlers, **options)

    def _srqs(self) -> list:
        return [srq for q in self.queues.values() for srq in q.srqs]

    # -- signals -----------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """First signal: finish the batch in hand. Second: leave at once."""
        install_stop_handlers(self.stopping)

    # -- the loop ------------------------------------------------------------
    def run(self, *, burst: bool = False) -> None:
        """Serve until stopped; with ``burst``, return once every queue is drained."""
        self.worker.beat(self.stats())
        beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        beat.start()
        phases = [_phase_of(h)(self, h, self.queues[h.phase], burst) for h in self.handlers]
        try:
            for p in phases:
                p.start()
            for p in phases:
                p.join()
        finally:
            self.stopping.set()
            for p in phases:
                p.join()
            try:
                self.publish_metrics()
                self.worker.retire()
            except REDIS_DOWN:
                # the master requeues them once this slave's heartbeat lapses
                log.error("left without handing back its tasks: Redis is unreachable")

    def _handle(self, handler: PhaseHandler, tasks: list[bytes]) -> list[bytes]:
        try:
            results = handler.handle(tasks)
        except Exception:
            # a bug, not bad input: report the batch instead of retrying it forever
            log.exception("%s handler failed on a batch of %d", handler.phase, len(tasks))
            results = self._failed(handler, tasks)
        with self._lock:
            self.batches += 1
        return results

    def _failed(self, handler: PhaseHandler, tasks: list[bytes]) -> list[bytes]:
        with self._lock:
            self.failed_batches += 1
        fields = {"phase": handler.phase, "worker": self.id, "error": traceback.format_exc(limit=3)}
        return [encode("error", fields, b"\n".join(tasks))]

    def _flush(
        self,
        handler: PhaseHandler,
        groups: list[tuple[list[bytes], list[bytes]]],
        final: bool = False,
    ) -> list | None:
        """Make what ``groups`` produced durable before their ack (see PhaseHandler).

        None: the store is down (StoreError), or Redis is and the slave is stopping
        (until then a write to Redis waits for it); the handler keeps what it could
        not write and the groups must not be acknowledged yet. :data:`_HELD`: stored
        but not yet acknowledgeable (see :class:`Holds`; ``final``: no more come).
        """
        if not isinstance(handler, Flushes):
            return groups
        try:
            handler.flush()
            if isinstance(handler, Holds) and handler.held(final):
                return _HELD
        except REDIS_DOWN:
            # stopping with Redis gone: nothing unwritten is acknowledged, not even as
            # failed; the tasks go back to the queue (or to the reaper)
            return None
        except StoreError as e:
            self.store_error = (time.time(), f"{handler.phase}: {e}")
            log.exception("%s: store down, %d batches wait", handler.phase, len(groups))
            return None
        except Exception as e:
            self.store_error = (time.time(), f"{handler.phase}: {type(e).__name__}: {e}")
            log.exception("%s handler could not store %d batches", handler.phase, len(groups))
            return [(tasks, self._failed(handler, tasks)) for tasks, _ in groups]
        self.stored_at, self.store_error = time.time(), None
        return groups

    def _ack(
        self,
        handler: PhaseHandler,
        q: PhaseQueues | PartitionedQueues,
        groups: list[tuple[list[bytes], list[bytes]]],
    ) -> None:
        # Retrying is safe: an ack that went through but whose reply was lost
        # finds its tasks gone the second time and pushes nothing again.
        delay = 0.1
        routed = handler.take_routed() if isinstance(handler, RoutesElsewhere) else {}
        while True:
            try:
                # links for other partitions go first: until the ack, the task is in
                # flight, so no partition can be found done before they are queued
                if routed:
                    q.route(routed)
                    routed = {}
                accepted = q.ack_groups(self.id, groups)
                if not all(accepted):
                    self._refused(handler, accepted.count(False))
                return
            except REDIS_DOWN:  # only once stopping: until then the client waits for Redis
                log.error(
                    "stopping with %d batches not acknowledged: Redis is unreachable", len(groups)
                )
                return
            except Exception:
                if self.stopping.is_set() and delay > 5:
                    raise  # give up: the tasks stay in the processing list for the reaper
                log.exception("ack of %s tasks failed; retrying", handler.phase)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _refused(self, handler: PhaseHandler, n: int) -> None:
        """Batches whose results were refused: their tasks went back to the queue.

        That happens when the master presumed this slave dead (silent past
        its heartbeat TTL, as in a long Redis outage). The handler forgets
        what it remembered of them (the crawl: the links it has sent), so
        that fetching them again sends everything again.
        """
        log.warning("%d finished batches were no longer this slave's; they run again", n)
        if isinstance(handler, Forgets):
            handler.forget()

    def _heartbeat(self) -> None:
        while not self.stopping.wait(self.heartbeat_interval):
            try:
                self.worker.beat(self.stats())
                self.publish_metrics()
            except REDIS_DOWN:  # stopping: nothing more to say
                return
            except Exception:
                log.exception("heartbeat failed")

    def publish_metrics(self) -> None:
        """Add what the handlers counted since the last heartbeat to the job's metrics."""
        for h in self.handlers:
            if isinstance(h, CountsMetrics):
                h.metrics().flush(self.client, self.keys)

    def stats(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            "batches": self.batches,
            "failed_batches": self.failed_batches,
            "stored_at": self.stored_at,
        }
        if self.store_error is not None:
            out["store_error_at"], out["store_error"] = self.store_error
        for h in self.handlers:
            for k, v in h.stats().items():
                out[f"{h.phase}_{k}"] = v
        return out


class _Phase:
    """What serving one phase needs whatever drives its handler: its queues, a feeder
    thread that pops tasks, the finished batches and an acker thread that stores
    and acknowledges them, one round trip for all that finished meanwhile.

    Subclasses say how tasks are run: :class:`_ThreadedPhase` (a consumer thread
    per batch in hand) or :class:`_MultiplexedPhase` (one driver thread with many
    tasks in flight).
    """

    def __init__(
        self,
        slave: Slave,
        handler: PhaseHandler,
        q: PhaseQueues | PartitionedQueues,
        burst: bool,
    ) -> None:
        self.slave = slave
        self.handler = handler
        self.q = q
        self.burst = burst
        self.consumers = max(1, handler.threads)
        self.work: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()
        self.done: list[tuple[list[bytes], list[bytes]]] = []
        self.done_cond = threading.Condition()
        self.backlog = 4 * self.consumers
        self.fed = False
        name = handler.phase
        self.threads = self._runners(name)
        self.feeder = threading.Thread(target=self._feed, name=f"{name}-feeder", daemon=True)
        self.acker = threading.Thread(target=self._acks, name=f"{name}-acker", daemon=True)

    def _runners(self, name: str) -> list[threading.Thread]:
        """The threads that run the tasks the feeder hands over."""
        raise NotImplementedError

    def _feed(self) -> None:
        """Pop tasks into :attr:`work` until stopped (or drained, in a burst)."""
        raise NotImplementedError

    def starved(self) -> bool:
        """Whether the slave runs at most half the tasks it could: results it holds back
        (their tasks unacknowledged, so their hosts' next URLs not yet released) are then
        likely what it waits for."""
        return False

    def start(self) -> None:
        for t in (self.acker, *self.threads, self.feeder):
            t.start()

    def join(self) -> None:
        for t in (self.feeder, *self.threads):
            while t.is_alive():
                t.join(timeout=0.5)
        with self.done_cond:
            self.fed = True
            self.done_cond.notify()
        while self.acker.is_alive():
            self.acker.join(timeout=0.5)

    def _pop(self, n: int) -> list[bytes] | None:
        """Up to ``n`` tasks (the first blocks); None once Redis is gone while stopping."""
        slave = self.slave
        try:
            return self.q.pop(slave.id, n, timeout=slave.block_timeout)
        except REDIS_DOWN:  # only once stopping: until then the client waits
            return None
        except Exception:  # a bug, or a Redis error reply: say so, keep the process
            log.exception("pop of %s tasks failed", self.handler.phase)
            time.sleep(1.0)
            return []

    def _drained(self) -> bool:
        """Burst: leave once the phase has no work queued or in flight, not when srq is empty.

        A handler that knows its phase's state says (the crawl: see
        ``CrawlHandler.drained``); for the others an empty srq is all there is.
        """
        handler = self.handler
        try:
            return handler.drained() if isinstance(handler, KnowsDrained) else True
        except REDIS_DOWN:  # only once stopping: leave
            return True

    def _acks(self) -> None:
        """Acknowledge every batch finished since the last round trip, in one.

        Batches whose results the handler holds (:class:`Holds`: the crawl's rows wait
        for their WARC object) are kept and flushed again with the next ones, every
        :data:`_HOLD_TICK` at least, until they may be acknowledged; at most
        ``16 * backlog`` of them, past which the phase stops starting tasks (the
        backlog fills), as when the store is down."""
        held: list[tuple[list[bytes], list[bytes]]] = []
        hold_max = 16 * self.backlog
        while True:
            with self.done_cond:
                while not self.done and not self.fed and not held:
                    self.done_cond.wait()
                if held and (not self.done or len(held) >= hold_max):
                    self.done_cond.wait(timeout=_HOLD_TICK)
                room = max(0, hold_max - len(held))
                groups = held + self.done[:room]
                self.done = self.done[room:]
                self.done_cond.notify_all()
                if not groups and self.fed:
                    return
                final = self.fed and not self.done
            # held rows are published at once (not by size or age) when the slave
            # starves: the work they hold back is what it waits for (see starved)
            now = final or self.starved()
            delay = 0.5
            while (flushed := self.slave._flush(self.handler, groups, now)) is None:
                if self.slave.stopping.is_set():
                    # leave the groups unacknowledged: their tasks go back to the
                    # queue when the slave retires (or to the reaper if it dies)
                    log.error("stopping with %d batches not stored", len(groups))
                    return
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
            if flushed is _HELD:
                held = groups
                if final and self.slave.stopping.is_set():
                    log.error("stopping with %d batches whose WARC object is not stored", len(held))
                    return
                continue
            held = []
            self.slave._ack(self.handler, self.q, flushed)


class _ThreadedPhase(_Phase):
    """``handler.threads`` consumer threads, each handling one batch at a time."""

    def __init__(
        self,
        slave: Slave,
        handler: PhaseHandler,
        q: PhaseQueues | PartitionedQueues,
        burst: bool,
    ) -> None:
        super().__init__(slave, handler, q, burst)
        self.idle = threading.Semaphore(self.consumers)

    def _runners(self, name: str) -> list[threading.Thread]:
        return [
            threading.Thread(target=self._consume, name=f"{name}-{i}", daemon=True)
            for i in range(self.consumers)
        ]

    def _feed(self) -> None:
        """Pop one batch per idle consumer; the first pop blocks, the rest come along."""
        batch = max(1, self.handler.batch_size)
        try:
            while not self.slave.stopping.is_set():
                if not self.idle.acquire(timeout=0.5):
                    continue
                idle = 1
                while self.idle.acquire(blocking=False):
                    idle += 1
                tasks = self._pop(idle * batch)
                if tasks is None:
                    return
                batches = [tasks[i : i + batch] for i in range(0, len(tasks), batch)]
                for b in batches:
                    self.work.put(b)
                for _ in range(idle - len(batches)):
                    self.idle.release()
                if not tasks and self.burst and self._drained():
                    return
        finally:
            for _ in self.threads:
                self.work.put(None)

    def _consume(self) -> None:
        while True:
            tasks = self.work.get()
            if tasks is None:
                return
            results = self.slave._handle(self.handler, tasks)
            with self.done_cond:
                self.done.append((tasks, results))
                self.done_cond.notify_all()
                # while the acker cannot store (the database is down), stop
                # taking work rather than piling up fetched pages in memory
                while len(self.done) > self.backlog and not self.slave.stopping.is_set():
                    self.done_cond.wait(timeout=0.5)
            self.idle.release()


class _MultiplexedPhase(_Phase):
    """One driver thread running up to ``handler.threads`` tasks of a
    :class:`~srcrawl.slave.handler.MultiplexedHandler` at once.

    The driver starts every task and collects it; the feeder pops tasks
    into the free slots and wakes the driver through a socket pair.
    """

    def __init__(
        self,
        slave: Slave,
        handler: MultiplexedHandler,
        q: PhaseQueues | PartitionedQueues,
        burst: bool,
    ) -> None:
        self.mux = handler
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.slots = threading.Condition()
        self.plenty = False
        self.feeder_waits = False
        super().__init__(slave, handler, q, burst)
        self.free = self.consumers
        self.refill = max(1, self.consumers // 4)
        self.in_hand = 0  # tasks popped and not finished

    def starved(self) -> bool:
        with self.slots:
            return self.in_hand * 2 <= self.consumers

    def _runners(self, name: str) -> list[threading.Thread]:
        return [threading.Thread(target=self._drive, name=f"{name}-driver", daemon=True)]

    def _feed(self) -> None:
        """Pop tasks into the multiplexed handler's free slots; the first pop blocks.

        While the queue holds more than the slave takes (the last pop came
        back full and left tasks behind) the feeder waits for a quarter of
        the slots to be free, so that one round trip fills several and a
        finished task does not wake it each time; when tasks are scarce any
        free slot is filled at once. A pop that came back full but emptied
        the queue says tasks are scarce: the master releases them one
        finished task at a time (one site at its --per-host bound), and a
        task left in srq until a second slot frees is a slot idle meanwhile.
        """
        try:
            while not self.slave.stopping.is_set():
                take = self._free_slots()
                if take is None:
                    return
                tasks = self._pop(take)
                if tasks is None:
                    return
                with self.slots:
                    self.free += take - len(tasks)
                    self.in_hand += len(tasks)
                    self.plenty = len(tasks) == take and self.q.left > 0
                if tasks:
                    self.work.put(tasks)
                    self._wake()
                elif self.burst and self._drained():
                    return
        finally:
            self.work.put(None)
            self._wake()

    def _free_slots(self) -> int | None:
        """Wait until enough slots are free and take them all; None once stopping."""
        with self.slots:
            while not (self.free >= self.refill or (self.free and not self.plenty)):
                self.feeder_waits = True
                self.slots.wait(0.5)
                self.feeder_waits = False
                if self.slave.stopping.is_set():
                    return None
            take, self.free = self.free, 0
        return take

    def _drive(self) -> None:
        """Start the tasks the feeder popped, collect those that finished, until it ends."""
        handler = self.mux
        ending = False
        try:
            while True:
                ending = self._start_handed_over(handler, ending)
                if ending and handler.in_flight() == 0:
                    return
                try:
                    finished = handler.poll(0.5, self._wake_r.fileno())
                except Exception:  # a bug: say so, keep the process
                    log.exception("%s handler failed while polling", handler.phase)
                    time.sleep(1.0)
                    continue
                with contextlib.suppress(OSError):  # BlockingIOError once drained
                    while self._wake_r.recv(4096):
                        pass
                self._finished(finished)
        finally:
            if isinstance(handler, Closes):
                handler.close()

    def _start_handed_over(self, handler: MultiplexedHandler, ending: bool) -> bool:
        """Start what the feeder handed over; True once it said it is done."""
        # results pile up only while the store is down: start no more then
        while not ending and len(self.done) <= self.backlog:
            try:
                tasks = self.work.get_nowait()
            except queue.Empty:
                break
            if tasks is None:
                return True
            self._start(handler, tasks)
        return ending

    def _start(self, handler: MultiplexedHandler, tasks: list[bytes]) -> None:
        at_once = []
        for task in tasks:
            try:
                result = handler.start(task)
            except Exception:
                log.exception("%s handler failed to start a task", handler.phase)
                result = self.slave._failed(handler, [task])[0]
            if result is not None:
                at_once.append((task, result))
        self._finished(at_once)

    def _wake(self) -> None:
        # BlockingIOError: a wake-up is pending already
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _finished(self, pairs: list[tuple[bytes, bytes]]) -> None:
        """Hand each finished task and its result to the acker."""
        if not pairs:
            return
        with self.slave._lock:
            self.slave.batches += len(pairs)
        with self.done_cond:
            self.done.extend(([task], [result]) for task, result in pairs)
            self.done_cond.notify_all()
        with self.slots:
            self.free += len(pairs)
            self.in_hand -= len(pairs)
            if self.feeder_waits and (self.free >= self.refill or not self.plenty):
                self.slots.notify()


def _phase_of(handler: PhaseHandler) -> type[_Phase]:
    """How the runtime drives ``handler``."""
    return _MultiplexedPhase if isinstance(handler, MultiplexedHandler) else _ThreadedPhase
