"""Depth levels across the partitions of a crawl (``--partitions P`` > 1).

One partition's frontier knows when *it* is done with a depth level (see
the package doc), but a page fetched in one partition may link to a host
of another: a level is over only when every partition is done with it and
no link is on its way. The crawl's level is kept once, in the job's crawl
state; each partition keeps the level it released its next-level tasks to
(its own crawl state) and a count of its commits.

Whichever master finds its partition done asks the barrier to move the
crawl on. The barrier reads every partition twice, each read one script on
that partition's slot: the crawl may move on when, in both reads, every
partition is at the crawl's level with nothing ready, in flight, in its nrq
or in its master's hands, and no partition committed anything in between.
A link is always somewhere a read sees: in a task still in flight (until
its outcome is committed), in an nrq (a slave routes a page's links to
their owners before it acknowledges the page; a master forwards a link
before it commits the batch it came in), or in a batch in a master's hands;
so two equal, quiet reads mean nothing can reach the level any more. The
move itself is a compare-and-set on the crawl's level, so masters racing to
make it make it once. Each partition then releases its next-level tasks and
records the level; until it has, the crawl cannot move again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from srcrawl.core.defaults import DEFAULT_LAG_AFTER
from srcrawl.core.keys import Keys, processing_key
from srcrawl.core.redis_script import register_script
from srcrawl.master.frontier import lua
from srcrawl.master.frontier.host_queues import script_keys
from srcrawl.queues.crawl_protocol import MASTER_ID

ADVANCED = "advanced"
COMPLETE = "complete"
WAITING = "waiting"


@dataclass(frozen=True)
class PartitionProbe:
    ready: int
    inflight: int
    lagging: int
    next: int
    nrq: int
    in_hand: int
    level: int
    commits: int

    def quiet_at(self, level: int) -> bool:
        """Done with ``level``: nothing of it queued, in flight or unread."""
        idle = not (self.ready or self.inflight or self.nrq or self.in_hand)
        return idle and self.level == level


class LevelBarrier:
    """The crawl's depth level over all its partitions (see the module doc)."""

    def __init__(self, client: redis.Redis, job_keys: Keys, partitions: int) -> None:
        self.client = client
        self.job_keys = job_keys
        self.partitions = job_keys.partitions(partitions)
        self._probe = register_script(client, lua.PROBE.source())
        self._move = register_script(client, lua.MOVE.source())

    def level(self) -> int:
        return int(self.client.hget(self.job_keys.crawl_state, "level") or 0)

    def strict_level(self) -> int | None:
        """The last level the crawl reached with no lagging work anywhere (None: none yet)."""
        strict = self.client.hget(self.job_keys.crawl_state, "strict")
        return int(strict) if strict is not None else None

    def complete(self) -> bool:
        return self.client.hget(self.job_keys.crawl_state, "state") == b"complete"

    def probe(self, k: Keys, horizon: int) -> PartitionProbe:
        """One partition's work; tasks backing off past ``horizon`` (ms) are lagging work."""
        nrq = k.nrq("crawl")
        named = script_keys(k, k.srq("crawl"), nrq, processing_key(nrq, MASTER_ID))
        keys, args = lua.PROBE.keys_of(named), lua.PROBE.args_of({"horizon": horizon})
        return PartitionProbe(*(int(n) for n in self._probe(keys=keys, args=args)))

    def probe_all(self, horizon: int) -> list[PartitionProbe]:
        return [self.probe(k, horizon) for k in self.partitions]

    def step(self, keep_running: bool, lag_after: float = DEFAULT_LAG_AFTER) -> str:
        """Move the crawl to its next level, or complete it, if every partition is done
        with the current one: ADVANCED, COMPLETE (also when it was already) or WAITING.
        A task backing off for ``lag_after`` seconds or more does not hold the level."""
        if self.complete():
            return COMPLETE
        level = self.level()
        horizon = int(time.time() * 1000 + lag_after * 1000)  # one for both probes
        first = self.probe_all(horizon)
        if not all(p.quiet_at(level) for p in first):
            return WAITING
        second = self.probe_all(horizon)
        if not all(p.quiet_at(level) for p in second) or [p.commits for p in first] != [
            p.commits for p in second
        ]:
            return WAITING
        lagging = any(p.lagging for p in second)
        if any(p.next for p in second):
            self._move_to(level, "advance", int(lagging))
            return ADVANCED
        if lagging or keep_running:
            return WAITING
        self._move_to(level, "complete", 0)
        return COMPLETE if self.complete() else WAITING

    def _move_to(self, level: int, what: str, lagging: int) -> None:
        """Advance or complete the crawl at ``level`` (a compare-and-set, see move.lua)."""
        keys = lua.MOVE.keys_of({"state": self.job_keys.crawl_state})
        args = lua.MOVE.args_of(
            {"level": level, "what": what, "lagging": lagging, "now": time.time()}
        )
        self._move(keys=keys, args=args)
