"""Depth levels across the partitions of a crawl (``--partitions P`` > 1).

One partition's frontier knows when *it* is done with a depth level (see
master/frontier.py), but a page fetched in one partition may link to a host
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
from collections import defaultdict
from dataclasses import dataclass

import redis

from srcrawl.keys import Keys, processing_key
from srcrawl.master.frontier import WORK_BESIDE_LAGGING
from srcrawl.queues.crawl_protocol import MASTER_ID, Links

ADVANCED = "advanced"
COMPLETE = "complete"
WAITING = "waiting"

# KEYS[1] ready, KEYS[2] inflight, KEYS[3] lagging, KEYS[4] nextlevel, KEYS[5] nrq,
# KEYS[6] the master's batch in hand, KEYS[7] the partition's crawl state, KEYS[8] its
# tasks backing off (counted as ready).
# Reads (writes nothing): {ready queues, queues in flight (both without the lagging
# ones), lagging queues with work, next-level tasks, nrq messages, batch in hand,
# the partition's level, its commits}.
_PROBE = (
    WORK_BESIDE_LAGGING
    + """
local ready, inflight, lagging = work_beside_lagging(KEYS[1], KEYS[2], KEYS[3], false)
ready = ready + redis.call('ZCARD', KEYS[8])
local st = redis.call('HMGET', KEYS[7], 'level', 'commits')
return {ready, inflight, lagging, redis.call('LLEN', KEYS[4]), redis.call('LLEN', KEYS[5]),
        redis.call('LLEN', KEYS[6]), tonumber(st[1] or '0'), tonumber(st[2] or '0')}
"""
)

# KEYS[1] the crawl's state; ARGV[1] the level it must be at, ARGV[2] "advance" or
# "complete", ARGV[3] 1 if a partition has lagging work, ARGV[4] now (s).
# Moves the crawl to the next level (recording, when no partition has lagging work, that
# the level was reached strictly: ``strict``, see master/frontier.py) or completes it;
# 1 if this call did.
_MOVE = """
if redis.call('HGET', KEYS[1], 'state') == 'complete' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'level') or '0') ~= tonumber(ARGV[1]) then return 0 end
if ARGV[2] == 'advance' then
  if ARGV[3] ~= '1' then redis.call('HSET', KEYS[1], 'strict', tonumber(ARGV[1]) + 1) end
  redis.call('HSET', KEYS[1], 'level', tonumber(ARGV[1]) + 1)
else
  redis.call('HSET', KEYS[1], 'state', 'complete', 'finished', ARGV[4])
end
return 1
"""


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
        self._probe = client.register_script(_PROBE)
        self._move = client.register_script(_MOVE)

    def level(self) -> int:
        return int(self.client.hget(self.job_keys.crawl_state, "level") or 0)

    def strict_level(self) -> int | None:
        """The last level the crawl reached with no lagging work anywhere (None: none yet)."""
        strict = self.client.hget(self.job_keys.crawl_state, "strict")
        return int(strict) if strict is not None else None

    def complete(self) -> bool:
        return self.client.hget(self.job_keys.crawl_state, "state") == b"complete"

    def probe(self, k: Keys) -> PartitionProbe:
        nrq = k.nrq("crawl")
        keys = [
            k.crawl_ready,
            k.crawl_inflight,
            k.crawl_lagging,
            k.crawl_next_level,
            nrq,
            processing_key(nrq, MASTER_ID),
            k.crawl_state,
            k.crawl_backoff,
        ]
        return PartitionProbe(*(int(n) for n in self._probe(keys=keys)))

    def probe_all(self) -> list[PartitionProbe]:
        return [self.probe(k) for k in self.partitions]

    def step(self, keep_running: bool) -> str:
        """Move the crawl to its next level, or complete it, if every partition is done
        with the current one: ADVANCED, COMPLETE (also when it was already) or WAITING."""
        if self.complete():
            return COMPLETE
        level = self.level()
        first = self.probe_all()
        if not all(p.quiet_at(level) for p in first):
            return WAITING
        second = self.probe_all()
        if not all(p.quiet_at(level) for p in second) or [p.commits for p in first] != [
            p.commits for p in second
        ]:
            return WAITING
        lagging = any(p.lagging for p in second)
        if any(p.next for p in second):
            self._move(
                keys=[self.job_keys.crawl_state], args=[level, "advance", int(lagging), time.time()]
            )
            return ADVANCED
        if lagging or keep_running:
            return WAITING
        self._move(keys=[self.job_keys.crawl_state], args=[level, "complete", 0, time.time()])
        return COMPLETE if self.complete() else WAITING


def forward_links(
    client: redis.Redis,
    job_keys: Keys,
    partitions: int,
    forward: dict[int, list[tuple[str, int, int]]],
) -> None:
    """Push links to the nrq of the partitions that own their hosts, one message per
    partition and depth: ``forward`` maps partition -> (url, fp, depth)."""
    for p, entries in forward.items():
        by_depth: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for url, fp, depth in entries:
            by_depth[depth].append((url, fp))
        messages = [Links(links, depth).encode() for depth, links in sorted(by_depth.items())]
        client.rpush(job_keys.partition(p, partitions).nrq("crawl"), *messages)
