"""A Redis list with reliable, batched consumption.

Consumers never pop destructively: a batch moves atomically from the queue
into the consumer's own processing list, and leaves it only when the
consumer acknowledges it — in the same atomic step that pushes the
batch's results. If the consumer dies, :meth:`WorkQueue.requeue` returns its
processing list to the head of the queue. Every operation is one round
trip for any number of messages.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import redis

from srcrawl.core.defaults import LUA_UNPACK_CHUNK
from srcrawl.core.keys import last_pop_key, processing_key
from srcrawl.core.redis_script import register_script

POP_RECORD_TTL = 86_400
"""Seconds a consumer's record of its last pop lives: longer than any outage it waits out."""

# KEYS[1] queue, KEYS[2] processing list, KEYS[3] the record of the consumer's last
# pop; ARGV[1] how many, ARGV[2] this pop's token.
# Moves up to ARGV[1] messages from the head of the queue to the tail of the
# processing list; returns them in queue order, and how many the queue still holds.
# A pop sent again with the same token (Redis ran it and went away before its reply
# arrived) moves nothing more and returns what the first one moved: the last
# messages of the processing list, as one consumer pops a queue from one thread and
# nothing but its pops adds to its list (acks and requeues only take out).
_POP = f"""
local last = redis.call('GET', KEYS[3])
if last then
  local sep = string.find(last, ':', 1, true)
  if string.sub(last, 1, sep - 1) == ARGV[2] then
    local moved = tonumber(string.sub(last, sep + 1))
    local again = {{}}
    if moved > 0 then again = redis.call('LRANGE', KEYS[2], -moved, -1) end
    return {{again, redis.call('LLEN', KEYS[1])}}
  end
end
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local n = #items
if n > 0 then
  redis.call('LTRIM', KEYS[1], n, -1)
  for i = 1, n, {LUA_UNPACK_CHUNK} do
    redis.call('RPUSH', KEYS[2], unpack(items, i, math.min(i + {LUA_UNPACK_CHUNK - 1}, n)))
  end
  -- a pop that moved nothing needs no record: sent again, it may well pop
  redis.call('SET', KEYS[3], ARGV[2] .. ':' .. n, 'EX', {POP_RECORD_TTL})
end
return {{items, redis.call('LLEN', KEYS[1])}}
"""

# KEYS[1] processing list, KEYS[2] result queue; ARGV[1] number of tasks n,
# ARGV[2..n+1] the tasks, ARGV[n+2..] the results.
# Removes the tasks from the processing list and, if they were there, pushes
# the results. Returns how many tasks were removed: 0 means the tasks had
# already been requeued (this consumer was presumed dead), so its results are
# dropped and the retry elsewhere produces them exactly once.
_ACK = f"""
local n = tonumber(ARGV[1])
local removed = 0
-- fast path: a consumer acks in the order it popped, so the tasks usually
-- are the head of its processing list and one LTRIM drops them all
local head = redis.call('LRANGE', KEYS[1], 0, n - 1)
local same = #head == n
for i = 1, #head do
  if not same then break end
  same = head[i] == ARGV[i + 1]
end
if same and n > 0 then
  redis.call('LTRIM', KEYS[1], n, -1)
  removed = n
else
  for i = 2, n + 1 do
    removed = removed + redis.call('LREM', KEYS[1], 1, ARGV[i])
  end
end
if removed > 0 or n == 0 then
  local last = #ARGV
  for i = n + 2, last, {LUA_UNPACK_CHUNK} do
    redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + {LUA_UNPACK_CHUNK - 1}, last)))
  end
end
return removed
"""

# KEYS[1] processing list, KEYS[2] result queue; ARGV[1] number of groups,
# then per group: task count t, result count r, the t tasks, the r results.
# Each group is one _ACK: its results are pushed only if its tasks were still
# there. Returns the tasks removed, per group.
_ACK_GROUPS = f"""
local groups = tonumber(ARGV[1])
local i = 2
local out = {{}}
for _ = 1, groups do
  local t, r = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  i = i + 2
  local removed = 0
  for j = i, i + t - 1 do
    removed = removed + redis.call('LREM', KEYS[1], 1, ARGV[j])
  end
  i = i + t
  if (removed > 0 or t == 0) and r > 0 then
    for j = i, i + r - 1, {LUA_UNPACK_CHUNK} do
      redis.call('RPUSH', KEYS[2], unpack(ARGV, j, math.min(j + {LUA_UNPACK_CHUNK - 1}, i + r - 1)))
    end
  end
  i = i + r
  out[#out + 1] = removed
end
return out
"""

# KEYS[1] processing list, KEYS[2] queue. Moves every message of the processing
# list back to the head of the queue, keeping their order. Returns the count.
_REQUEUE = """
local moved = 0
while redis.call('RPOPLPUSH', KEYS[1], KEYS[2]) do
  moved = moved + 1
end
return moved
"""

_PUSH_CHUNK = 1000


class WorkQueue:
    """One queue (``srq`` or ``nrq`` of a phase) and the processing lists of its consumers."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key
        self._pop = register_script(client, _POP)
        self._ack = register_script(client, _ACK)
        self._ack_groups = register_script(client, _ACK_GROUPS)
        self._requeue = register_script(client, _REQUEUE)
        self.left = 0
        """Messages the queue still held after this object's last :meth:`pop` (0 after a
        blocking pop that took the one that came): a consumer whose pop came back full
        tells a queue with more waiting from one it emptied."""

    def processing_key(self, consumer: str) -> str:
        return processing_key(self.key, consumer)

    def push(self, messages: Sequence[bytes], *, front: bool = False) -> int:
        """Append messages (or put them at the head) in one round trip."""
        if not messages:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for i in range(0, len(messages), _PUSH_CHUNK):
            chunk = messages[i : i + _PUSH_CHUNK]
            if front:
                pipe.lpush(self.key, *reversed(chunk))
            else:
                pipe.rpush(self.key, *chunk)
        pipe.execute()
        return len(messages)

    def pop(self, consumer: str, count: int, timeout: float = 0.0) -> list[bytes]:
        """Take up to ``count`` messages into ``consumer``'s processing list.

        With ``timeout`` > 0, blocks (BLMOVE) up to that many seconds for a
        message when the queue is empty, then takes the batch; no polling
        loop hammers Redis. A pop whose reply an outage lost, sent again, gets
        what it moved the first time (see ``_POP``).
        """
        items = self._take(consumer, count)
        if items or timeout <= 0:
            return items
        # wait for a message without taking it (the head goes back where it was): a
        # BLMOVE into the processing list whose reply an outage lost would leave its
        # message there, unknown to the consumer, for as long as the consumer lives
        if self.client.blmove(self.key, self.key, timeout, "LEFT", "LEFT") is None:
            return []
        return self._take(consumer, count)

    def _take(self, consumer: str, count: int) -> list[bytes]:
        # one token per pop, the same in every retry of it: see _POP
        token = os.urandom(8).hex()
        keys = [self.key, self.processing_key(consumer), last_pop_key(self.key, consumer)]
        items, self.left = self._pop(keys=keys, args=[count, token])
        return list(items)

    def ack(
        self,
        consumer: str,
        tasks: Sequence[bytes],
        results: Sequence[bytes] = (),
        result_queue: WorkQueue | None = None,
    ) -> bool:
        """Acknowledge ``tasks`` and push ``results`` to ``result_queue``, atomically.

        Returns False when the tasks were no longer this consumer's (they were
        requeued after its heartbeat lapsed): nothing was pushed.
        """
        if results and result_queue is None:
            raise ValueError("results need a result_queue")
        target = result_queue.key if result_queue is not None else self.key
        removed = self._ack(
            keys=[self.processing_key(consumer), target],
            args=[len(tasks), *tasks, *results],
        )
        return bool(removed) or not tasks

    def ack_groups(
        self,
        consumer: str,
        groups: Sequence[tuple[Sequence[bytes], Sequence[bytes]]],
        result_queue: WorkQueue,
    ) -> list[bool]:
        """:meth:`ack` for many (tasks, results) groups in one round trip.

        Each group is acknowledged on its own terms: its results are pushed
        only if its tasks were still this consumer's. Returns, per group,
        whether it was (a group of no tasks always is).
        """
        if not groups:
            return []
        args: list = [len(groups)]
        for tasks, results in groups:
            args += [len(tasks), len(results), *tasks, *results]
        removed = self._ack_groups(
            keys=[self.processing_key(consumer), result_queue.key], args=args
        )
        return [bool(n) or not tasks for n, (tasks, _) in zip(removed, groups, strict=True)]

    def requeue(self, consumer: str) -> int:
        """Return ``consumer``'s unacknowledged messages to the head of the queue."""
        return int(self._requeue(keys=[self.processing_key(consumer), self.key]))

    def pending(self, consumer: str) -> list[bytes]:
        """Messages ``consumer`` holds and has not acknowledged."""
        return list(self.client.lrange(self.processing_key(consumer), 0, -1))

    def __len__(self) -> int:
        return int(self.client.llen(self.key))

    def clear(self) -> None:
        """Drop every queued message (processing lists are left alone)."""
        self.client.delete(self.key)
