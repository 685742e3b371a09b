"""``srcrawl bench memory``: bytes per queued URL in Redis and per seen URL in the Bloom filter.

A crawl's frontier is Redis memory and its seen test is the master's Bloom
filter (with its snapshot in Redis), so these two figures decide what a
crawl of N pages needs. The benchmark runs N distinct URLs over H hosts
through a real crawl master as fetched pages' links (50 a page, whole nrq
batches, the frontier's own scripts), on a Redis server of its own so
``INFO memory`` sees nothing else, and reads:

- Redis ``used_memory`` before and after, over the URLs left queued;
- the Bloom filter's bits in the master (pybloom-live's bit arrays) and the
  size of its snapshot in Redis (``MEMORY USAGE``), over the URLs seen.

The URLs come as links of a level the crawl reached with no lagging host (its
steady state: no depth record). ``--depth-record`` measures that record instead
(master/frontier/depth_record.py): N URLs recorded through the frontier's commit script,
beside the same N in the layout it replaced (a hash field a URL, the
fingerprint in decimal), each ``MEMORY USAGE`` over N.
"""

from __future__ import annotations

import random
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from srcrawl.core import embedded
from srcrawl.core.defaults import DEFAULT_BLOOM_ERROR_RATE
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.master.crawl_run import progress, start_crawl
from srcrawl.master.frontier import Batch
from srcrawl.queues.crawl_protocol import canonical_links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.envelope import encode
from srcrawl.settings.config import Config

LINKS_PER_PAGE = 50
BATCH_PAGES = 500


@dataclass
class MemoryFigures:
    urls: int
    hosts: int
    error_rate: float
    queued: int
    seconds: float
    redis_bytes: int
    bloom_bytes: int
    snapshot_bytes: int
    master_rss_mb: float

    @property
    def redis_per_queued(self) -> float:
        return self.redis_bytes / max(self.queued, 1)

    @property
    def bloom_per_seen(self) -> float:
        return self.bloom_bytes / max(self.urls, 1)

    def render(self) -> str:
        return "\n".join(
            [
                f"memory benchmark: {self.urls:,} distinct URLs over {self.hosts:,} hosts "
                f"through the crawl master in {self.seconds:.0f} s "
                f"({self.urls / self.seconds:,.0f} URLs/s); Bloom error rate {self.error_rate:g}",
                f"  Redis used_memory grew {self.redis_bytes / 2**20:,.1f} MiB for "
                f"{self.queued:,} queued URLs: {self.redis_per_queued:.1f} bytes a queued URL",
                f"  Bloom filter {self.bloom_bytes / 2**20:,.1f} MiB in the master: "
                f"{self.bloom_per_seen:.2f} bytes a seen URL; its snapshot in Redis "
                f"{self.snapshot_bytes / 2**20:,.1f} MiB",
                f"  master peak RSS {self.master_rss_mb:,.0f} MiB",
            ]
        )

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "redis_bytes_per_queued_url": self.redis_per_queued,
            "bloom_bytes_per_seen_url": self.bloom_per_seen,
        }


def _host(i: int) -> str:
    return f"h{i}.example.test"


def _batches(urls: int, hosts: int) -> Iterator[list[bytes]]:
    """Fetched-page outcomes carrying ``urls`` distinct links, BATCH_PAGES a batch."""
    batch: list[bytes] = []
    for start in range(0, urls, LINKS_PER_PAGE):
        links = [
            f"http://{_host(i % hosts)}/docs/{i}/page.html"
            for i in range(start, min(start + LINKS_PER_PAGE, urls))
        ]
        batch.append(
            encode(
                "fetched",
                {
                    "url": f"http://{_host(0)}/",
                    "fp": 1,
                    "q": _host(0),
                    "depth": 0,
                    "status": 200,
                    "fetch_ms": 5,
                    "links": list(canonical_links(links)[0].items()),
                },
            )
        )
        if len(batch) == BATCH_PAGES:
            yield batch
            batch = []
    if batch:
        yield batch


def _bloom_bytes(master: CrawlMaster) -> int:
    return sum(len(f.bitarray) // 8 for f in master.seen.bloom.filters)


def run_memory_benchmark(
    urls: int, hosts: int, say: Callable[[str], None], error_rate: float = DEFAULT_BLOOM_ERROR_RATE
) -> MemoryFigures:
    """Run the URLs through a master on a fresh Redis server of this benchmark's own."""
    with tempfile.TemporaryDirectory(prefix="srcrawl-memory-") as tmp:
        url, server = embedded.start_server(Path(tmp), appendonly=False, daemonize=False)
        try:
            return _measure(url, Path(tmp), urls, hosts, error_rate, say)
        finally:
            server.terminate()
            server.wait(timeout=30)


def _measure(
    url: str, home: Path, urls: int, hosts: int, error_rate: float, say: Callable[[str], None]
) -> MemoryFigures:
    cfg = Config.load(redis_url=url, db_url=f"sqlite:///{home}/m.db", job="memory", env={})
    client: redis.Redis = cfg.redis()
    strategy = CrawlStrategy(
        seed_hosts=tuple(_host(h) for h in range(hosts)), max_depth=100, bloom_error_rate=error_rate
    )
    start_crawl(cfg, [f"http://{_host(0)}/"], strategy)
    client.hset(cfg.keys.crawl_state, "strict", 0)  # the steady state (see the module doc)
    before = int(client.info("memory")["used_memory"])
    master = CrawlMaster.from_config(cfg)
    master.acquire(wait=False)
    t0 = time.perf_counter()
    done = 0
    for batch in _batches(urls, hosts):
        master.lease.keep()  # the master's own loop renews it; this one stands in for that loop
        master.queues.nrq.push(batch)
        master.process(master.queues.nrq.pop("master", len(batch)))
        done += len(batch) * LINKS_PER_PAGE
        say(f"{min(done, urls):,} of {urls:,} URLs")
    seconds = time.perf_counter() - t0
    master.seen.snapshot()
    snapshot = int(client.memory_usage(cfg.keys.seen_snapshot) or 0)
    after = int(client.info("memory")["used_memory"])
    queued = int(progress(cfg)["queued"])
    figures = MemoryFigures(
        urls=urls,
        hosts=hosts,
        error_rate=error_rate,
        queued=queued,
        seconds=seconds,
        redis_bytes=after - before - snapshot,
        bloom_bytes=_bloom_bytes(master),
        snapshot_bytes=snapshot,
        master_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    master.release()
    cfg.close()
    return figures


@dataclass
class DepthRecordFigures:
    urls: int
    packed_bytes: int
    decimal_bytes: int
    seconds: float

    def render(self) -> str:
        return "\n".join(
            [
                f"depth record: {self.urls:,} URLs recorded through the frontier's commit in "
                f"{self.seconds:.1f} s",
                f"  packed (4096 buckets of 9-byte entries): {self.packed_bytes / 2**20:,.2f} MiB, "
                f"{self.packed_bytes / self.urls:.1f} bytes a URL",
                f"  a hash field a URL (decimal fingerprint): "
                f"{self.decimal_bytes / 2**20:,.2f} MiB, "
                f"{self.decimal_bytes / self.urls:.1f} bytes a URL",
            ]
        )

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "packed_bytes_per_url": self.packed_bytes / self.urls,
            "decimal_bytes_per_url": self.decimal_bytes / self.urls,
        }


def run_depth_record_benchmark(urls: int, say: Callable[[str], None]) -> DepthRecordFigures:
    """Record ``urls`` depths both ways on a fresh Redis server of this benchmark's own."""
    with tempfile.TemporaryDirectory(prefix="srcrawl-memory-") as tmp:
        url, server = embedded.start_server(Path(tmp), appendonly=False, daemonize=False)
        try:
            cfg = Config.load(redis_url=url, db_url=f"sqlite:///{tmp}/m.db", job="memory", env={})
            start_crawl(cfg, [f"http://{_host(0)}/"], CrawlStrategy(seed_hosts=(_host(0),)))
            master = CrawlMaster.from_config(cfg)
            master.acquire(wait=False)
            client, record = cfg.redis(), cfg.keys.crawl_depths
            rng = random.Random(7)
            t0 = time.perf_counter()
            for start in range(0, urls, BATCH_PAGES * LINKS_PER_PAGE):
                n = min(BATCH_PAGES * LINKS_PER_PAGE, urls - start)
                depths = {rng.getrandbits(64) - 2**63: rng.randint(1, 12) for _ in range(n)}
                master.lease.keep()
                master.frontier.commit(Batch(depths=depths, recording=True), b"")
                client.hset("decimal", mapping={str(fp): d for fp, d in depths.items()})
                say(f"{start + n:,} of {urls:,} URLs")
            seconds = time.perf_counter() - t0
            packed = int(client.memory_usage(record, samples=0) or 0)
            decimal = int(client.memory_usage("decimal", samples=0) or 0)
            master.release()
            cfg.close()
            return DepthRecordFigures(urls, packed, decimal, seconds)
        finally:
            server.terminate()
            server.wait(timeout=30)
