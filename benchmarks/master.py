"""``srcrawl bench master``: URLs/s through canonicalize + scope + seen test.

The link stream imitates a crawl's: links drawn from a power law over the
pages of a few hosts, so most are repeats (as [URL caching] observes on real
crawls), some spelled non-canonically (upper-case host, a fragment, a dot
segment). The first figure is the master's per-URL pipeline alone; the
second runs whole nrq batches through the master, Redis commits included.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

import redis

from srcrawl.core.defaults import DEFAULT_SEEN_CACHE
from srcrawl.core.keys import Keys
from srcrawl.core.urls import InvalidURL, canonicalize, fingerprint
from srcrawl.master.crawl_master import CrawlMaster, reset_crawl
from srcrawl.master.crawl_run import start_crawl
from srcrawl.master.frontier.seen import SeenSet
from srcrawl.queues.crawl_protocol import canonical_links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.envelope import encode
from srcrawl.queues.link_cache import ClockCache
from srcrawl.queues.scope import Scope
from srcrawl.settings.config import Config


def link_stream(n: int, hosts: int, pages: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        h = rng.randrange(hosts)
        page = min(int(rng.paretovariate(0.6)), pages) - 1
        url = f"http://127.0.0.1:{20000 + h}/docs/p{page}.html"
        r = rng.random()
        if r < 0.03:
            url = url.replace("http://127.0.0.1", "HTTP://127.0.0.1") + "#top"
        elif r < 0.05:
            url = url.replace("/docs/", "/docs/./")
        out.append(url)
    return out


@dataclass
class MasterBenchmark:
    urls: int
    new: int
    pipeline_s: float
    end_to_end_urls: int
    end_to_end_s: float
    cache_hit_rate: float
    unique_urls: int
    unique_s: float

    def render(self) -> str:
        return "\n".join(
            [
                f"master benchmark: {self.urls} links, {self.new} new "
                f"({self.new / self.urls:.1%}), cache hit rate {self.cache_hit_rate:.1%}",
                f"  canonicalize + scope + seen test  {self.pipeline_s:7.2f} s  "
                f"{self.urls / self.pipeline_s:12,.0f} URLs/s",
                f"  whole nrq batches, Redis commits  {self.end_to_end_s:7.2f} s  "
                f"{self.end_to_end_urls / self.end_to_end_s:12,.0f} URLs/s",
                f"  worst case, every URL new ({self.unique_urls}): "
                f"{self.unique_urls / self.unique_s:,.0f} URLs/s (each one costs a Bloom insert)",
            ]
        )


def run_master_benchmark(
    cfg: Config, *, urls: int, hosts: int = 20, pages: int = 200_000
) -> MasterBenchmark:
    client: redis.Redis = cfg.redis()
    links = link_stream(urls, hosts, pages)
    host_names = tuple(f"127.0.0.1:{20000 + h}" for h in range(hosts))
    strategy = CrawlStrategy(seed_hosts=host_names, max_depth=100)
    scope = Scope(strategy)
    keys = Keys(f"bench-master-{os.getpid()}-{time.time_ns()}")
    seen = SeenSet(client, keys, error_rate=strategy.bloom_error_rate)
    recent = ClockCache(DEFAULT_SEEN_CACHE)
    t0 = time.perf_counter()
    new = _judge(links, recent, scope, seen)
    pipeline_s = time.perf_counter() - t0
    hit_rate = recent.hit_rate
    unique = [f"http://{host_names[i % hosts]}/u/{i}" for i in range(urls // 5)]
    t0 = time.perf_counter()
    _judge(unique, recent, scope, seen)
    unique_s = time.perf_counter() - t0
    # the same stream as outcomes of fetched pages, 50 links each, through the master
    job_cfg = cfg.with_job(keys.job)
    start_crawl(job_cfg, [f"http://{host_names[0]}/"], strategy)
    # links of a level reached with no lagging host: the steady state, no depth record
    job_cfg.redis().hset(job_cfg.keys.crawl_state, "strict", 0)
    master = CrawlMaster.from_config(job_cfg)
    master.acquire(wait=False)
    msgs = [
        encode(
            "fetched",
            {
                "url": "http://127.0.0.1:20000/",
                "fp": 1,
                "q": host_names[0],
                "depth": 0,
                "status": 200,
                "fetch_ms": 5,
                "links": list(canonical_links(links[i : i + 50])[0].items()),
            },
        )
        for i in range(0, len(links), 50)
    ]
    try:
        t1 = time.perf_counter()
        for i in range(0, len(msgs), 500):
            master.queues.nrq.push(msgs[i : i + 500])
            master.process(master.queues.nrq.pop("master", 500))
        end_to_end_s = time.perf_counter() - t1
    finally:
        master.release()
        reset_crawl(job_cfg)
        client.delete(keys.seen_snapshot, keys.seen_journal)
    return MasterBenchmark(
        urls, new, pipeline_s, len(links), end_to_end_s, hit_rate, len(unique), unique_s
    )


def _judge(links: list[str], recent: ClockCache, scope: Scope, seen: SeenSet) -> int:
    """The steps of Admission.candidate without the batch bookkeeping; the new ones."""
    new = 0
    for url in links:
        if url in recent:
            recent.seen_or_add(url)
            continue
        try:
            c = canonicalize(url)
        except InvalidURL:
            continue
        if scope.reject(c, 1) is None:
            new += seen.add(fingerprint(c))
            recent.seen_or_add(url)
    return new
