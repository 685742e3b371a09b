"""One partition's depth levels: the next level released into the host queues, and the
depth record dropped when the crawl is strict again (see the package doc). Across the
partitions of a crawl, barrier.py decides when a level is over."""

from __future__ import annotations

import redis

from srcrawl.core.keys import Keys
from srcrawl.master.frontier.barrier import LevelBarrier
from srcrawl.master.frontier.batch import Batch, BatchWork
from srcrawl.master.frontier.host_queues import Frontier


class Levels:
    """Moves this partition's frontier from one depth level to the next."""

    def __init__(self, frontier: Frontier, keys: Keys, barrier: LevelBarrier) -> None:
        self.frontier = frontier
        self.client = frontier.client
        self.keys = keys
        self.barrier = barrier

    def start_batch(self, acks: int, value: int) -> BatchWork:
        """A new batch of ``acks`` messages at the crawl's level (a partition that waited
        catches up to it first); ``value``: what a fetch is worth (Batch.value)."""
        batch = Batch(acks=acks, value=value)
        level, strict, record = self.client.hmget(
            self.barrier.job_keys.crawl_state, ["level", "strict", "record"]
        )
        partitioned = len(self.barrier.partitions) > 1
        if partitioned and int(level or 0) > self.partition_level():
            self.catch_up(int(level or 0))  # the crawl moved on while this partition waited
        if partitioned:
            record = self.client.hget(self.keys.crawl_state, "record")
        batch.recording = strict is None or int(strict) != int(level or 0)
        # without a depth record no path can be found shorter: links are judged as usual
        recorded = batch.recording or record is not None
        return BatchWork(batch, level=int(level or 0), recorded=recorded)

    def partition_level(self) -> int:
        return int(self.client.hget(self.keys.crawl_state, "level") or 0)

    def advance(self, *, lagging: bool, overlap: bool = False) -> None:
        """Release the next level. ``overlap``: the current level's tail is still in flight
        (nothing of it queued, nothing of an earlier level out)."""
        # scheduling pauses while a level is released, so no task of the new
        # level runs before all of it is queued (see the package doc)
        state = self.keys.crawl_state
        level = self.client.hget(state, "level") or b"0"

        def next_level(pipe: redis.client.Pipeline) -> None:
            if not lagging:  # nothing is behind: no path scheduled so far can be shortened
                if not overlap:  # nor any to come: the crawl is strict (see the package doc)
                    pipe.hset(state, "strict", int(level) + 1)
                self.frontier.drop_record(pipe)
            if overlap:
                pipe.hincrby(self.keys.stats("crawl"), "levels_overlapped", 1)
            pipe.hincrby(state, "level", 1)

        self.frontier.transaction(next_level)
        while self.frontier.advance() > 0:
            pass

    def catch_up(self, target: int | None = None) -> bool:
        """Release this partition's next-level tasks up to the crawl's level (``target``,
        read when not given), then record that it did (in that order: a master killed
        between releases the rest again). True if it released a level."""
        target = self.barrier.level() if target is None else target
        strict = self.barrier.strict_level()
        level = start = self.partition_level()
        while level < target:
            while self.frontier.advance() > 0:
                pass
            level += 1

            def record_level(pipe: redis.client.Pipeline, lv: int = level) -> None:
                pipe.hset(self.keys.crawl_state, "level", lv)
                if lv == strict:  # reached with nothing lagging anywhere (LevelBarrier)
                    self.frontier.drop_record(pipe)

            self.frontier.transaction(record_level)
        return level > start
