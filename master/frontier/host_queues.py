"""The frontier's state in Redis: host queues, politeness and depth levels, changed only
by the Lua scripts of this package (see the package doc and lua.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis

from srcrawl.core.defaults import (
    DEFAULT_DEFERRED_END_WAIT,
    DEFAULT_LAG_AFTER,
    DEFAULT_MASTER_IDLE_WAIT,
    DEFAULT_MASTER_POLL,
    REDIS_TIMER_TICK,
)
from srcrawl.core.keys import Keys
from srcrawl.core.redis_script import register_script
from srcrawl.core.urls import host_of, origin
from srcrawl.master.frontier import lua
from srcrawl.master.frontier.batch import Batch, now_ms
from srcrawl.master.frontier.depth_record import packed_entries, packed_fp, unpacked_depths
from srcrawl.queues.crawl_protocol import FetchTask
from srcrawl.queues.lease import FencedScript, MasterLease


def script_keys(keys: Keys, srq_key: str, nrq_key: str, in_hand: str) -> dict[str, str]:
    """The keys of one partition's frontier by the names its scripts give them (lua.py)."""
    k = keys
    return {
        "ready": k.crawl_ready,
        "inflight": k.crawl_inflight,
        "qnext": k.crawl_queue_next,
        "next_level": k.crawl_next_level,
        "srq": srq_key,
        "nrq": nrq_key,
        "in_hand": in_hand,
        "seen_journal": k.seen_journal,
        "stats": k.stats("crawl"),
        "state": k.crawl_state,
        "host_pages": k.crawl_host_pages,
        "host_errors": k.crawl_host_errors,
        "host_inflight": k.crawl_host_inflight,
        "host_limit": k.crawl_host_limit,
        "host_next": k.crawl_host_next,
        "lagging": k.crawl_lagging,
        "slow": k.crawl_slow,
        "flying": k.crawl_flying,
        "depths": k.crawl_depths,
        "improved": k.crawl_improved,
        "due": k.crawl_due,
        "due_tasks": k.crawl_due_tasks,
        "sitemap_hosts": k.crawl_sitemap_hosts,
        "backoff": k.crawl_backoff,
        "backoff_queues": k.crawl_backoff_queues,
        "held": k.crawl_held,
    }


class Frontier:
    """Host queues, politeness and depth levels of one crawl job."""

    def __init__(
        self, lease: MasterLease, keys: Keys, srq_key: str, nrq_key: str, nrq_processing: str
    ) -> None:
        self.client = lease.client
        self.lease = lease
        self.keys = keys
        self.srq_key = srq_key
        self.nrq_key = nrq_key
        self.nrq_processing = nrq_processing
        self.named = script_keys(keys, srq_key, nrq_key, nrq_processing)
        # every script that writes is fenced: a master that lost its lease changes nothing
        self._scripts: dict[str, FencedScript] = {
            s.name: lease.script(s.source()) for s in lua.FENCED
        }
        self._depths_of = register_script(self.client, lua.DEPTHS_OF.source())  # reads only

    def _run(self, script: lua.LuaScript, rest: Iterable[Any] = (), **args: Any) -> Any:
        """Run one fenced script, its KEYS and ARGV taken by name."""
        return self._scripts[script.name](
            keys=script.keys_of(self.named), args=script.args_of(args, rest)
        )

    def take_over(self) -> None:
        """Take the crawl over: requeue a previous master's batch in hand, mark it running."""
        self._run(lua.TAKE_OVER, now=time.time())

    def take(self, count: int, timeout: float = 0.0) -> list[bytes]:
        """Up to ``count`` nrq messages, moved into the master's batch in hand.

        With ``timeout`` > 0, waits up to that long for the first one. The wait
        (BLMOVE of nrq onto itself, head to head) takes nothing: only the
        fenced script does, so a master that lost its lease takes nothing.
        """
        items = self._run(lua.TAKE, count=count)
        if items or timeout <= 0:
            return list(items)
        if self.client.blmove(self.nrq_key, self.nrq_key, timeout, "LEFT", "LEFT") is None:
            return []
        return list(self._run(lua.TAKE, count=count))

    def take_until(self, count: int, due_ms: int) -> list[bytes]:
        """Up to ``count`` nrq messages, waiting for them until ``due_ms`` (-1: no host is due
        before one comes).

        An outcome wakes the blocking wait at once, but Redis ends a blocking
        timeout only on its timer tick: the wait ends a tick before the due
        time and the rest is polled, so a host is released on time.
        """
        if due_ms < 0:
            return self.take(count, timeout=DEFAULT_MASTER_IDLE_WAIT)
        wait = min(DEFAULT_MASTER_IDLE_WAIT + REDIS_TIMER_TICK, (due_ms - now_ms()) / 1000)
        if wait > REDIS_TIMER_TICK:
            return self.take(count, timeout=wait - REDIS_TIMER_TICK)
        msgs = self.take(count)
        if not msgs and wait > 0:
            time.sleep(min(wait, DEFAULT_MASTER_POLL))
        return msgs

    def transaction(self, write: Callable[[redis.client.Pipeline], object]) -> list:
        """Run the commands ``write`` queues as one transaction fenced by the lease."""
        while True:
            with self.client.pipeline(transaction=True) as pipe:
                self.lease.guard(pipe)  # LeaseLost if the lease is not ours
                write(pipe)
                try:
                    return pipe.execute()
                except redis.WatchError:  # the lease key moved: guard() says if still ours
                    continue

    def schedule(self, limit: int = 1000, backlog: int = 0) -> tuple[int, int]:
        """Release due tasks into srq; return (released, earliest next ready ms or -1).

        ``backlog`` bounds the tasks waiting in srq (0: no bound). srq is
        first come, first served, so the choice of which host goes next is
        only made here: kept short (a little more than the slaves' fetch
        threads), srq always gets the hosts with the most URLs left, and a
        depth level does not end with a few long hosts fetched one URL at
        a time while every other thread idles.
        """
        k = self.keys
        released, nxt = self._run(
            lua.SCHEDULE,
            now=now_ms(),
            prefix=k.crawl_queue_prefix,
            limit=limit,
            backlog=backlog,
            parked_prefix=k.crawl_parked_prefix,
            cooling_prefix=k.crawl_cooling_prefix,
        )
        return int(released), int(nxt)

    def commit(self, batch: Batch, journal: bytes) -> None:
        """Apply a processed batch of nrq messages, ack them and journal the fingerprints
        ``journal`` packs, in one fenced script (commit.lua)."""
        k = self.keys
        self._run(
            lua.COMMIT,
            # the next level's tasks as arguments of their own, not strings in the JSON:
            # most new URLs are, and Lua's JSON decoder would read each one character by
            # character (escaped quotes and all) only to push it as it came
            (t.encode() for t in batch.next),
            now=now_ms(),
            prefix=k.crawl_queue_prefix,
            doc=batch.document(),
            journal=journal,
            parked_prefix=k.crawl_parked_prefix,
            cooling_prefix=k.crawl_cooling_prefix,
            new_depths=packed_entries(batch.depths),
            improved_depths=packed_entries({fp: m.task.depth for fp, m in batch.improved.items()}),
            recording=int(batch.recording),
            lag_after=batch.lag_after,
        )

    def release_due(self, limit: int) -> tuple[int, int]:
        """Move up to ``limit`` stored pages whose time has come into their host queues;
        return (moved, earliest due time in ms or -1). See _RELEASE_DUE."""
        moved, nxt = self._run(
            lua.RELEASE_DUE, now=now_ms(), prefix=self.keys.crawl_queue_prefix, limit=limit
        )
        return int(moved), int(nxt)

    def due(self) -> int:
        """Stored pages on the recrawl schedule."""
        return int(self.client.zcard(self.keys.crawl_due))

    def advance(self, chunk: int = 5000) -> int:
        """Release a chunk of the next level; return how many remain."""
        prefix = self.keys.crawl_queue_prefix
        return int(self._run(lua.ADVANCE, now=now_ms(), prefix=prefix, chunk=chunk))

    def level_state(self, nrq_key: str, lag_after: float = DEFAULT_LAG_AFTER) -> LevelState:
        """What the current depth level still waits for, in one round trip; first marks
        lagging the queues whose task has been in flight ``lag_after`` seconds or longer."""
        script = self._scripts[lua.LEVEL.name]
        keys = lua.LEVEL.keys_of({**self.named, "nrq": nrq_key})
        args = lua.LEVEL.args_of(
            {
                "prefix": self.keys.crawl_queue_prefix,
                "now": now_ms(),
                "lag_after": int(lag_after * 1000),
            }
        )
        return LevelState(*(int(n) for n in script(keys=keys, args=args)))

    def host_limits(self) -> dict[str, int]:
        """Hosts spread over several queues whose limit is known → that limit."""
        raw = self.client.hgetall(self.keys.crawl_host_limit)
        return {h.decode(): int(n) for h, n in raw.items()}

    def lagging(self) -> set[str]:
        return {q.decode() for q in self.client.smembers(self.keys.crawl_lagging)}

    def _lagging_heads(self) -> list[FetchTask]:
        pipe = self.client.pipeline(transaction=False)
        for q in sorted(self.lagging()):
            pipe.lindex(self.keys.crawl_queue_prefix + q, 0)
        return [FetchTask.decode(raw) for raw in pipe.execute() if raw]

    def deferred_hosts(self) -> list[str] | None:
        """The hosts (host:port) of the lagging queues' head tasks, sorted; None while a
        task of a lagging queue is in flight (its outcome may be the host's answer) or
        due within DEFAULT_DEFERRED_END_WAIT (a short deferral is worth waiting out), or
        while a queue lags only because its host is slow or a URL backs off (their pages
        are still to be fetched, and soon enough)."""
        # the slow set forgets a queue with its work (level.lua); a URL's back-off is bounded
        if self.client.scard(self.keys.crawl_slow) or self.client.zcard(self.keys.crawl_backoff):
            return None
        lagging = sorted(self.lagging())
        pipe = self.client.pipeline(transaction=False)
        for q in lagging:
            pipe.hexists(self.keys.crawl_inflight, q)
            pipe.zscore(self.keys.crawl_ready, q)
        answers = pipe.execute()
        soon = now_ms() + int(DEFAULT_DEFERRED_END_WAIT * 1000)
        for flying, due in zip(answers[::2], answers[1::2], strict=True):
            if flying or (due is not None and due < soon):
                return None
        return sorted({host_of(t.url) for t in self._lagging_heads()})

    def retry_lagging(self) -> None:
        """Make every lagging queue due now, forget its host's robots.txt deferral (so the
        next task asks again) and the deferred hosts of the crawl state: a crawl that
        ended with them is taken up again."""
        now = now_ms()
        origins = {origin(t.url) for t in self._lagging_heads()}

        def due_now(pipe: redis.client.Pipeline) -> None:
            for q in self.lagging():
                pipe.zadd(self.keys.crawl_ready, {q: now}, xx=True)
            for o in origins:
                pipe.delete(self.keys.robots(o))
            pipe.hdel(self.keys.crawl_state, "deferred")

        self.transaction(due_now)

    def recorded_depths(self, fps: list[int]) -> list[int | None]:
        """The depths recorded for ``fps`` (None: not recorded)."""
        if not fps:
            return []
        packed = b"".join(packed_fp(fp) for fp in fps)
        keys = lua.DEPTHS_OF.keys_of(self.named)
        raw = self._depths_of(keys=keys, args=lua.DEPTHS_OF.args_of({"fps": packed}))
        return unpacked_depths(raw, len(fps))

    def drop_record(self, pipe: redis.client.Pipeline) -> None:
        """Queue the commands that forget the depth record: the crawl is strict again."""
        pipe.delete(self.keys.crawl_depths)
        pipe.hdel(self.keys.crawl_state, "record")

    def improved_depths(self) -> list[tuple[int, int]]:
        raw = self.client.hgetall(self.keys.crawl_improved)
        return [(int(fp), int(d)) for fp, d in raw.items()]


@dataclass(frozen=True)
class LevelState:
    """Queues ready and tasks in flight (lagging queues apart), lagging queues with work,
    next-level tasks, nrq messages; when the level may be left with its tail in flight,
    the tasks queued behind the ones in flight and those in flight from before the
    level (else -1)."""

    ready: int
    inflight: int
    lagging: int
    next: int
    nrq: int
    queued: int = -1
    behind: int = -1

    @property
    def level_done(self) -> bool:
        return self.ready == 0 and self.inflight == 0 and self.nrq == 0

    @property
    def tail_only(self) -> bool:
        """Every task of the level is out (in flight, none queued, no outcome unread), none
        from an earlier level is, and a next level waits: the next level may start
        beside this one's tail (see the module doc)."""
        return self.queued == 0 and self.behind == 0
