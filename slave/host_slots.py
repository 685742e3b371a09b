"""Host slots: a host spread over several queues (``--per-host N``) has at most N requests
in flight across the cluster, taken by the slave where each request starts.

The master hands out up to HOST_TASKS_OUT × N of such a host's tasks at once
(master/frontier/), so when a request ends the host's next task is already with a
slave or in srq: the freed slot is taken by the next request in one Redis round trip,
where the master's commit, its schedule and the slave's pop used to take 20-40 ms of
every slot's cycle. A task that finds every slot taken waits in its slave and tries
again as soon as one of that slave's own requests to the host ends, or after
HOST_SLOT_RETRY (a slot another slave frees says nothing), a wait that doubles up to
HOST_SLOT_RETRY_MAX while tries find nothing and nothing of its own ends, so slaves
idle on a busy host do not keep Redis busy. A try asks for no more of a host's slots
than its limit: the rest could not have one.

A slot is a member of the host's sorted set (``Keys.crawl_host_slots``) scored by when
it is free again: while its request runs, by the request's end at the latest (the
fetch deadline and HOST_SLOT_MARGIN, so a slave killed mid-request holds its slots no
longer than that); once the response is in, by the end of the politeness wait it
earned, so a host gets no more requests per delay than N slots allow. Times are the
Redis server's: slaves whose clocks differ agree. A host held to 1 by a Crawl-delay has
one slot, so one learnt while several tasks are out lets them go one at a time.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from srcrawl.core.defaults import HOST_SLOT_RETRY, HOST_SLOT_RETRY_MAX
from srcrawl.core.redis_script import register_script

if TYPE_CHECKING:
    import redis

    from srcrawl.core.keys import Keys

# KEYS: the hosts' slot sets. ARGV: the number of slots freed; then, for each, the index of
# its key, the slot and its cooling time (ms: 0 frees it now); then for each slot wanted,
# the index of its key, the slot, the host's limit and how long the slot may be held (ms).
# Returns 1 or 0 for each slot wanted, in order.
_SLOTS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local i = 2
for _ = 1, tonumber(ARGV[1]) do
  local key, slot, cool = KEYS[tonumber(ARGV[i])], ARGV[i + 1], tonumber(ARGV[i + 2])
  if cool > 0 then redis.call('ZADD', key, 'XX', now + cool, slot)
  else redis.call('ZREM', key, slot) end
  i = i + 3
end
local swept, granted = {}, {}
while i <= #ARGV do
  local key = KEYS[tonumber(ARGV[i])]
  if not swept[key] then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    swept[key] = true
  end
  local ok = 0
  if redis.call('ZCARD', key) < tonumber(ARGV[i + 2]) then
    redis.call('ZADD', key, now + tonumber(ARGV[i + 3]), ARGV[i + 1])
    ok = 1
  end
  granted[#granted + 1] = ok
  i = i + 4
end
-- a set lives as long as its last slot
for _, key in ipairs(KEYS) do
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if last then redis.call('PEXPIREAT', key, tonumber(last) + 1000) end
end
return granted
"""


@dataclass
class _Wanted:
    """A task waiting for a slot of its host: what starts it once it has one."""

    raw: bytes
    limit: int
    crawl_delay: float | None
    start: Callable[[], None]


@dataclass(frozen=True)
class _Held:
    host: str
    slot: str
    crawl_delay: float | None


class HostSlots:
    """The host slots of one slave's crawl driver (one thread: not thread-safe).

    :meth:`want` queues a task's start behind a slot of its host, :meth:`done` gives the
    slot of a finished request back; :meth:`run` (when :meth:`due`) frees the slots
    given back and takes what it can for the waiting tasks, starting them, in one
    round trip.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        politeness_ms: Callable[[float, float | None], int],
        hold_s: Callable[[], float],
    ) -> None:
        """``politeness_ms(fetch ms, crawl delay)``: how long a slot cools after a request;
        ``hold_s()``: how long a request may hold its slot at most (seconds)."""
        self._script = register_script(client, _SLOTS)
        self._keys = keys
        self._politeness_ms = politeness_ms
        self._hold_s = hold_s
        self._names = (f"{uuid.uuid4().hex[:12]}:{n}" for n in itertools.count())
        self._waiting: dict[str, deque[_Wanted]] = {}
        self._held: dict[bytes, list[_Held]] = {}
        self._freed: list[tuple[_Held, int]] = []
        self._untried = False
        self._retry_at = 0.0
        self._retry_wait = HOST_SLOT_RETRY

    def __len__(self) -> int:
        """Tasks waiting for a slot."""
        return sum(len(w) for w in self._waiting.values())

    def want(
        self,
        raw: bytes,
        host: str,
        limit: int,
        crawl_delay: float | None,
        start: Callable[[], None],
    ) -> None:
        """Start ``raw`` by calling ``start`` once a slot of ``host`` (``limit`` at most)
        is this slave's: at the next :meth:`run`."""
        self._waiting.setdefault(host, deque()).append(_Wanted(raw, limit, crawl_delay, start))
        self._untried = True

    def done(self, raw: bytes, fetch_ms: float) -> None:
        """The request of ``raw`` ended after ``fetch_ms``: its slot cools for the politeness
        wait that earned, then is free (given back at the next :meth:`run`)."""
        held = self._held.get(raw)
        if not held:
            return
        h = held.pop()
        if not held:
            del self._held[raw]
        self._freed.append((h, self._politeness_ms(fetch_ms, h.crawl_delay)))

    @property
    def busy(self) -> bool:
        """Does this slave hold a slot, or have a task waiting for one?"""
        return bool(self._held or self._waiting)

    def due(self) -> bool:
        """Is there a slot to give back, a task not yet tried, or a retry due?"""
        return bool(
            self._freed or self._untried or (self._waiting and time.monotonic() >= self._retry_at)
        )

    def wait_s(self, timeout: float) -> float:
        """``timeout``, or less when waiting tasks are to try again sooner."""
        if not self._waiting:
            return timeout
        return max(0.0, min(timeout, self._retry_at - time.monotonic()))

    def run(self) -> None:
        """Give back the freed slots and take slots for the waiting tasks, starting those
        that got one (oldest first for each host), in one round trip."""
        freed, self._freed = self._freed, []
        wanted = [
            (host, w)
            for host, ws in self._waiting.items()
            for w in itertools.islice(ws, ws[0].limit)
        ]
        if not freed and not wanted:
            return
        index: dict[str, int] = {}
        keys: list[str] = []

        def key_of(host: str) -> int:
            if host not in index:
                keys.append(self._keys.crawl_host_slots(host))
                index[host] = len(keys)
            return index[host]

        args: list[object] = [len(freed)]
        for h, cool in freed:
            args += [key_of(h.host), h.slot, cool]
        hold_ms = int(self._hold_s() * 1000)
        names = []
        for host, w in wanted:
            names.append(next(self._names))
            args += [key_of(host), names[-1], w.limit, hold_ms]
        granted = self._script(keys=keys, args=args)
        self._untried = False
        if freed or any(granted):
            self._retry_wait = HOST_SLOT_RETRY
        else:
            self._retry_wait = min(2 * self._retry_wait, HOST_SLOT_RETRY_MAX)
        self._retry_at = time.monotonic() + self._retry_wait
        for (host, w), name, ok in zip(wanted, names, granted, strict=True):
            if not ok:
                continue
            waiting = self._waiting[host]
            waiting.remove(w)
            if not waiting:
                del self._waiting[host]
            self._held.setdefault(w.raw, []).append(_Held(host, name, w.crawl_delay))
            w.start()

    def close(self) -> None:
        """Forget the waiting tasks (their slave hands them back) and give back every slot
        held: its requests are abandoned."""
        self._waiting.clear()
        self._untried = False
        for raw in list(self._held):
            while raw in self._held:
                self.done(raw, 0.0)
        self.run()
