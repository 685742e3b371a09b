"""Collecting one PageRank round: exactly one result per shard, taken from nrq.

The master takes results reliably, like any consumer: it moves them into its own
processing list and acknowledges them by count once handled (they are the head of
that list). Results of another graph version or round, and repeats, are dropped.
While it waits it reaps dead slaves and offers the shards they may have held again;
a shard computed twice writes the same bytes, and one answer per shard is taken.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import redis

from srcrawl.core.errors import EnvelopeError
from srcrawl.core.keys import Keys
from srcrawl.pagerank.errors import PageRankError, RunStateLost
from srcrawl.pagerank.protocol import LOAD_ROUND, MapTask, ShardDone
from srcrawl.pagerank.shards import Shard
from srcrawl.queues.envelope import Message, decode
from srcrawl.queues.lease import FencedScript
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.workers import reap, requeued, workers

if TYPE_CHECKING:
    from srcrawl.pagerank.master import RankResult

# KEYS[1] this master's processing list of nrq; ARGV[1] how many results it took.
# Acknowledges them: the master pops into its own, empty processing list and
# handles all it popped, so they are its head.
ACK = """
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
return 1
"""


def round_name(iteration: int) -> str:
    return "the load round" if iteration == LOAD_ROUND else f"iteration {iteration}"


class Tally:
    """The results of one iteration: exactly one per shard is taken."""

    def __init__(self, version: int, iteration: int, shards: list[Shard]) -> None:
        self.version = version
        self.iteration = iteration
        self._slot = {s.index: i for i, s in enumerate(shards)}
        self._deltas = np.zeros(len(shards))
        self._missing = set(self._slot)

    @property
    def missing(self) -> int:
        return len(self._missing)

    @property
    def missing_shards(self) -> list[int]:
        return sorted(self._missing)

    def is_missing(self, version: int, iteration: int, shard: int) -> bool:
        """Whether the shard of that iteration is one this tally still waits for."""
        return (version, iteration) == (self.version, self.iteration) and shard in self._missing

    def offer(self, done: ShardDone) -> bool:
        """Take ``done`` if it is this iteration's first result for its shard."""
        if not self.is_missing(done.version, done.iteration, done.shard):
            return False
        self._missing.discard(done.shard)
        self._deltas[self._slot[done.shard]] = done.delta
        return True

    @property
    def delta(self) -> float:
        """The L1 change of the iteration: its shards' parts, added in shard order
        (so a run gives the same figure whatever order the results came in)."""
        return float(self._deltas.sum())


class Collector:
    """Takes the results of a round for the master ``worker_id`` (see the module doc).

    ``ack``: the fenced acknowledgement (``ACK``); ``offer(version, iteration, shards)``
    makes shards claimable again; ``check(version)`` raises if the run cannot go on (its
    lease or its state in Redis lost). ``slaves_alive``, when given, says whether the
    slaves the run relies on still exist; ``on_wait`` hears when no slave is there.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        queues: PhaseQueues,
        worker_id: str,
        *,
        ack: FencedScript,
        offer: Callable[[int, int, list[int]], None],
        check: Callable[[int], None],
        reap_interval: float,
        block_timeout: float,
        stall_timeout: float,
        on_wait: Callable[[str], None],
        slaves_alive: Callable[[], bool] | None,
    ) -> None:
        self.client, self.keys, self.queues, self.id = client, keys, queues, worker_id
        self._ack, self._offer, self._check = ack, offer, check
        self.reap_interval, self.block_timeout = reap_interval, block_timeout
        self.stall_timeout = stall_timeout
        self.on_wait, self.slaves_alive = on_wait, slaves_alive

    def collect(self, tally: Tally, result: RankResult, *, patient: bool = True) -> bool:
        """Take results until every shard of the iteration has one; whether it did.

        When no result came for the stall timeout, a patient collection offers
        the missing shards again; an impatient one gives up.
        """
        nrq = self.queues.nrq
        next_check = last_result = last_offer = time.monotonic()
        next_check += self.reap_interval
        warned = False
        while tally.missing:
            self._check(tally.version)
            wait = min(self.block_timeout, max(0.01, next_check - time.monotonic()))
            raw = self._pop(tally.missing, wait)
            for message in raw:
                self._take(message, tally, result)
            if raw:
                # acknowledged by count: this master pops into its own, empty
                # processing list and handles all it popped, so they are its head
                self._ack(keys=[nrq.processing_key(self.id)], args=[len(raw)])
                last_result, warned = time.monotonic(), False
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.reap_interval
                self.reap(tally, result)
                idle = time.monotonic() - last_result
                if idle > self.stall_timeout and time.monotonic() - last_offer > self.stall_timeout:
                    if not patient:
                        return False
                    last_offer = time.monotonic()
                    self._offer_if_no_task(tally)
                if not warned and idle > 5 * self.reap_interval and not self._live_slaves():
                    warned = True
                    self.on_wait(
                        "waiting for a pagerank slave (start one with "
                        "`srcrawl slave start --phases pagerank`)"
                    )
        return True

    def _pop(self, count: int, timeout: float) -> list[bytes]:
        """Move up to ``count`` results into this master's processing list, in one round
        trip; blocks up to ``timeout`` when there is none. A pop sent again after an
        outage lost its reply gets what the first one moved (queues/work_queue.py)."""
        return self.queues.nrq.pop(self.id, count, timeout=timeout)

    def _take(self, raw: bytes, tally: Tally, result: RankResult) -> None:
        try:
            msg = decode(raw)
            if msg.kind == "done":
                if not tally.offer(ShardDone.from_message(msg)):
                    result.dropped += 1
                return
        except EnvelopeError:
            result.dropped += 1
            return
        if msg.kind == "error":
            self._raise_if_ours(msg, tally)
        elif msg.kind == "stale" and (msg.get("version"), msg.get("iteration")) == (
            tally.version,
            tally.iteration,
        ):
            shard = msg.get("shard")
            if shard is None or (
                isinstance(shard, int) and tally.is_missing(tally.version, tally.iteration, shard)
            ):
                # the header, a shard or the pieces of the running iteration vanished
                raise RunStateLost(
                    f"a slave found {round_name(tally.iteration)} unavailable: {msg.get('reason')}"
                )
        result.dropped += 1

    def _raise_if_ours(self, msg: Message, tally: Tally) -> None:
        for raw_task in msg.payload.split(b"\n"):
            try:
                task = MapTask.decode(raw_task)
            except EnvelopeError:
                continue
            if (task.version, task.iteration) == (tally.version, tally.iteration):
                raise PageRankError(
                    f"a slave failed in {round_name(task.iteration)}: {msg.get('error')}"
                )

    def reap(self, tally: Tally, result: RankResult) -> None:
        """Requeue the tasks of dead slaves and make the shards they may have claimed
        claimable again; raise if this run's own slaves are all gone."""
        # only a task of this phase can have claimed a shard: a dead slave of
        # another phase (the same job's crawl, say) costs no offer
        returned = requeued(reap(self.client, self.keys), self.queues.srq.key)
        if returned:
            result.requeued += returned
            # which shard a dead slave held is not recorded: offer every missing
            # one again; a shard computed twice writes the same bytes, and the
            # master takes one answer per shard
            self._offer(tally.version, tally.iteration, tally.missing_shards)
        if self.slaves_alive is not None and not self.slaves_alive():
            raise PageRankError("every slave of this run has exited")

    def _offer_if_no_task(self, tally: Tally) -> None:
        """Offer the missing shards again when no map task is left to compute them.

        A slave that retires hands its unacknowledged task back to srq, but a
        shard it had claimed stays claimed; the task, taken again, finds no
        shard to claim. Recomputing a shard writes the same bytes and the
        master takes one answer per shard, so offering again is always safe.
        """
        if self.client.llen(self.queues.srq.key) == 0:
            self._offer(tally.version, tally.iteration, tally.missing_shards)

    def _live_slaves(self) -> int:
        srq = self.queues.srq.key
        return sum(w.alive and srq in w.queues for w in workers(self.client, self.keys))
