"""The slave process: a template loop that serves any set of phases.

install signal handlers → per phase, ``threads`` consumers each loop
{ pop a batch (blocking) → handle → ack + push results } → heartbeat thread
→ on stop, hand back anything unacknowledged. The first SIGTERM/SIGINT lets
every consumer finish its batch; a second one exits at once (what it held
is requeued by the master once the heartbeat lapses).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Sequence

from srcrawl.config import Config
from srcrawl.defaults import (
    DEFAULT_BLOCK_TIMEOUT,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HEARTBEAT_TTL,
)
from srcrawl.queues.envelope import encode
from srcrawl.queues.protocol import PhaseQueues, new_worker_id
from srcrawl.queues.workers import Worker
from srcrawl.signals import install_stop_handlers
from srcrawl.slave.handler import PhaseHandler

log = logging.getLogger("srcrawl.slave")


class Slave:
    """One slave process serving ``handlers`` (one per phase)."""

    def __init__(
        self,
        cfg: Config,
        handlers: Sequence[PhaseHandler],
        *,
        worker_id: str | None = None,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL,
        block_timeout: float = DEFAULT_BLOCK_TIMEOUT,
    ) -> None:
        self.cfg = cfg
        self.client = cfg.redis()
        self.handlers = list(handlers)
        self.queues = {h.phase: PhaseQueues(self.client, cfg.keys, h.phase) for h in self.handlers}
        self.id = worker_id or new_worker_id(self.client, cfg.keys, "slave")
        self.worker = Worker(
            self.client,
            cfg.keys,
            self.id,
            [q.srq for q in self.queues.values()],
            ttl=heartbeat_ttl,
        )
        self.heartbeat_interval = heartbeat_interval
        self.block_timeout = block_timeout
        self.stopping = threading.Event()
        self.batches = 0
        self.failed_batches = 0
        self._lock = threading.Lock()

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
        consumers = [
            threading.Thread(
                target=self._consume, args=(h, burst), name=f"{h.phase}-{i}", daemon=True
            )
            for h in self.handlers
            for i in range(max(1, h.threads))
        ]
        try:
            for t in consumers:
                t.start()
            for t in consumers:
                while t.is_alive():
                    t.join(timeout=0.5)
        finally:
            self.stopping.set()
            self.worker.retire()

    def _consume(self, handler: PhaseHandler, burst: bool) -> None:
        q = self.queues[handler.phase]
        timeout = 0.0 if burst else self.block_timeout
        while not self.stopping.is_set():
            try:
                tasks = q.srq.pop(self.id, handler.batch_size, timeout=timeout)
            except Exception:  # Redis gone for a moment: back off, keep the process
                log.exception("pop from %s failed", q.srq.key)
                time.sleep(1.0)
                continue
            if not tasks:
                if burst:
                    return
                continue
            try:
                results = handler.handle(tasks)
            except Exception:
                # a bug, not bad input: report the batch instead of retrying it forever
                log.exception("%s handler failed on a batch of %d", handler.phase, len(tasks))
                with self._lock:
                    self.failed_batches += 1
                results = [
                    encode(
                        "error",
                        {
                            "phase": handler.phase,
                            "worker": self.id,
                            "error": traceback.format_exc(limit=3),
                        },
                        b"\n".join(tasks),
                    )
                ]
            self._ack(q, tasks, results)
            with self._lock:
                self.batches += 1

    def _ack(self, q: PhaseQueues, tasks: list[bytes], results: list[bytes]) -> None:
        # Retrying is safe: an ack that went through but whose reply was lost
        # finds its tasks gone the second time and pushes nothing again.
        delay = 0.1
        while True:
            try:
                q.srq.ack(self.id, tasks, results, q.nrq)
                return
            except Exception:
                if self.stopping.is_set() and delay > 5:
                    raise  # give up: the tasks stay in the processing list for the reaper
                log.exception("ack to %s failed; retrying", q.srq.key)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _heartbeat(self) -> None:
        while not self.stopping.wait(self.heartbeat_interval):
            try:
                self.worker.beat(self.stats())
            except Exception:
                log.exception("heartbeat failed")

    def stats(self) -> dict[str, float]:
        out: dict[str, float] = {"batches": self.batches, "failed_batches": self.failed_batches}
        for h in self.handlers:
            for k, v in h.stats().items():
                out[f"{h.phase}_{k}"] = v
        return out
