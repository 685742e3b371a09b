"""A phase master's hold on its phase: the one lifecycle the crawl, index and PageRank
masters share, around loops of their own.

One master runs a phase of a job at a time (queues/lease.py). Whatever its loop
does, a master goes through the same steps, and a :class:`MasterSession` takes them:

- from its construction, the master's Redis client waits out outages
  (srcrawl/core/outage.py): no command of the master raises because Redis went
  away for a while, unless the master was told to stop;
- :meth:`~MasterSession.acquire` takes the phase's lease, waiting for a holder to let
  go if told to;
- while the loop runs, the lease is renewed a few times per TTL, and with it the
  master's worker heartbeat (``srcrawl status``, health) — either by the loop
  (:meth:`~MasterSession.keep_alive`: a loop that stalls loses the lease, its next
  commit is refused) or by a thread (``running(background=True)``), for a master whose
  single steps may outlast a renewal (PageRank writes a whole graph in one);
- :meth:`~MasterSession.running` ends every run the same way: a lost lease is said and
  raised, and the job's record left to the new master; a Redis outage met after a stop
  was asked ends the run as stopped; and always the worker retires (results it popped
  and did not acknowledge go back to nrq), the lease is let go if it is still ours, and
  the job's record says how the run ended.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from srcrawl.core.defaults import DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_TTL
from srcrawl.core.errors import LeaseLost
from srcrawl.core.keys import Keys
from srcrawl.core.outage import REDIS_DOWN, master_waits_out
from srcrawl.queues.lease import FencedScript, MasterLease, holder_id
from srcrawl.queues.protocol import new_worker_id
from srcrawl.queues.work_queue import WorkQueue
from srcrawl.queues.workers import Worker, reap, reaped_sentences

Stats = Callable[[], dict[str, Any]]
"""The figures a master's heartbeat carries, read at each beat."""


class JobStore(Protocol):
    """Where a job's record is kept (the store's ``set_job``, sql/jobs.py)."""

    def set_job(
        self,
        name: str,
        phase: str,
        state: str,
        stats: dict | None = None,
        *,
        started_at: float | None = None,
        finished_at: float | None = None,
    ) -> None: ...


@dataclass
class JobRecord:
    """The job's record of a master's runs: ``running`` when one starts, its end state
    and ``stats`` when it ends (none when the lease was lost: that is the successor's)."""

    store: JobStore
    job: str
    phase: str
    stats: Stats = dict


@dataclass
class Run:
    """One run of a master inside :meth:`MasterSession.running`."""

    started: float = field(default_factory=time.time)
    state: str = "complete"
    """What the job's record says if the loop returns; the loop may change it."""


class MasterSession:
    """One master's lease, heartbeat and outage wait (see the module doc).

    ``worker_queues``: the queues whose processing lists the master holds (its nrq); it
    then registers as a worker, with an id from ``role`` (default ``<phase>-master``),
    beats with ``stats`` (the master sets them) and retires at the end of a run. Without,
    it holds no queue and has no heartbeat (the crawl master publishes its process
    figures itself). ``wait_out``: make the client wait out Redis outages (a partitioned
    crawl's process does that once for the client its masters share).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        phase: str,
        *,
        lease_ttl: float,
        log: logging.Logger,
        stopping: threading.Event | None = None,
        worker_queues: list[WorkQueue] | None = None,
        heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        wait_out: bool = True,
        role: str | None = None,
    ) -> None:
        self.client, self.keys, self.log = client, keys, log
        self.stopping = stopping if stopping is not None else threading.Event()
        # first, so that the Redis commands below wait out an outage too
        self.outage = master_waits_out(client, log, self.stopping) if wait_out else None
        self.worker: Worker | None = None
        self.id = role = role or f"{phase}-master"
        if worker_queues is not None:
            self.id = new_worker_id(client, keys, role)
            self.worker = Worker(
                client, keys, self.id, worker_queues, role="master", ttl=heartbeat_ttl
            )
        self.lease = MasterLease(client, keys.master_lease(phase), holder_id(self.id), lease_ttl)
        # renewed well within its TTL, however short the TTL is set
        self.renew_interval = min(heartbeat_interval, lease_ttl / 3)
        self.stats: Stats = dict
        self._last_renew = 0.0
        self._lost = False  # the background renewal found the lease gone
        self._stop_beat = threading.Event()

    # -- the lease ------------------------------------------------------------------
    def acquire(self, wait: float = 0.0, *, what: str) -> None:
        """Take the phase's lease, waiting up to ``wait`` seconds for its holder (a stop
        asked meanwhile ends the wait); ``LeaseHeld`` naming the holder if it is taken."""
        self.lease.acquire(wait, what=what, stopping=self.stopping.is_set)
        self._last_renew = time.monotonic()

    @property
    def takeover_wait(self) -> float:
        """Long enough for the lease of a master that died on another host to lapse."""
        return self.lease.ttl_ms / 1000 + 1

    def keep_alive(self) -> bool:
        """Renew the lease and beat the heartbeat if it is time; whether it was.

        ``LeaseLost`` if the lease is gone: a master that was paused past its TTL learns
        it here, before its next commit.
        """
        now = time.monotonic()
        if now - self._last_renew < self.renew_interval:
            return False
        self.lease.keep()
        self._last_renew = now
        self.beat()
        return True

    def check(self) -> None:
        """``LeaseLost`` (naming who holds the lease now) if the background renewal of
        ``running(background=True)`` found the lease gone."""
        if self._lost:
            self.lease.keep()

    def reap(self) -> dict[str, dict[str, int]]:
        """Return the tasks of dead workers to their queues, saying so in the master's log;
        what was returned (``queues/workers.py`` ``reap``)."""
        returned = reap(self.client, self.keys)
        for sentence in reaped_sentences(returned):
            self.log.warning("%s", sentence)
        return returned

    def beat(self) -> None:
        """The master's heartbeat, with its figures (none without a worker)."""
        if self.worker is not None:
            self.worker.beat(self.stats())

    # -- fenced commits ---------------------------------------------------------------
    def script(self, source: str) -> FencedScript:
        """A Lua script that runs only while the lease is held (``MasterLease.script``)."""
        return self.lease.script(source)

    def fenced(self, fill: Callable[[redis.client.Pipeline], object]) -> None:
        """Run the commands ``fill`` queues as one transaction, only while the lease is held."""
        while True:
            # transaction=True: a cluster client's pipelines default to none
            with self.client.pipeline(transaction=True) as pipe:
                self.lease.guard(pipe)
                fill(pipe)
                try:
                    pipe.execute()
                    return
                except redis.WatchError:
                    # the lease changed meanwhile: LeaseLost if it is no longer ours
                    self.lease.keep()

    # -- one run ----------------------------------------------------------------------
    @contextlib.contextmanager
    def running(
        self,
        *,
        record: JobRecord | None = None,
        background: bool = False,
        outage_stops: bool = True,
    ) -> Iterator[Run]:
        """Run the block under the lease taken by :meth:`acquire`, and end it as every
        master ends (see the module doc).

        ``record``: the job's record, written as the run starts and ends. ``background``:
        renew the lease and beat from a thread; the loop calls :meth:`check`. A Redis
        outage met after a stop was asked ends the block quietly with ``outage_stops``
        (the code after the ``with`` says what a stopped run returns); without, it is
        raised for the caller to say (``pagerank --every``).
        """
        run = Run()
        state: str | None = "failed"
        beating: threading.Thread | None = None
        try:
            if record is not None:
                record.store.set_job(record.job, record.phase, "running", started_at=run.started)
            self.beat()
            if background:
                beating = self._start_beating()
            yield run
            state = run.state
        except LeaseLost as e:
            state = None  # the job's record is its new master's to write
            self.log.error("%s: it stops, having changed nothing since", e)
            raise
        except REDIS_DOWN:
            if not (outage_stops and self.stopping.is_set()):
                raise
            self.log.error("stopped while Redis is unreachable")
            state = "stopped"
        finally:
            self._end(beating, record, state, run.started)

    def _end(
        self,
        beating: threading.Thread | None,
        record: JobRecord | None,
        state: str | None,
        started: float,
    ) -> None:
        if beating is not None:
            self._stop_beat.set()
            beating.join()
        # told to stop while Redis is away, the master leaves without these
        with contextlib.suppress(*REDIS_DOWN):
            if self.worker is not None:
                self.worker.retire()  # results popped, not acknowledged, back to nrq
        with contextlib.suppress(*REDIS_DOWN):
            self.lease.release()
        if record is not None and state is not None:
            record.store.set_job(
                record.job,
                record.phase,
                state,
                record.stats(),
                started_at=started,
                finished_at=time.time(),
            )

    def _start_beating(self) -> threading.Thread:
        self._stop_beat.clear()
        self._lost = False
        thread = threading.Thread(target=self._beating, name="master-heartbeat", daemon=True)
        thread.start()
        return thread

    def _beating(self) -> None:
        while not self._stop_beat.wait(self.renew_interval):
            try:
                if not self.lease.renew():
                    self._lost = True  # said by the loop's next check()
                self.beat()
            except redis.RedisError:
                pass  # the next beat tries again; the loop meets Redis errors itself
