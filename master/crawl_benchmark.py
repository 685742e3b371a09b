"""``srcrawl bench crawl``: pages/s against the number of slaves [seed 002 §4.1].

Each slave count crawls the same synthetic web, served by another process
on loopback with a fixed per-response latency, as a fresh job into a fresh
SQLite store, with the same threads per slave: only the slave count changes.
Politeness is off (it is our own site), but there is still one request in
flight per host, so the web has many hosts.
"""

from __future__ import annotations

import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from srcrawl.config import Config, DatabaseURL
from srcrawl.master.crawl_run import run_local_crawl, start_crawl
from srcrawl.master.strategy import CrawlStrategy
from srcrawl.testweb import TestWeb


@dataclass
class CrawlRun:
    slaves: int
    pages: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.pages / self.seconds if self.seconds else 0.0


def _children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def run_crawl_benchmark(
    cfg: Config,
    *,
    slave_counts: list[int],
    hosts: int,
    pages: int,
    latency_ms: float,
    threads: int,
    depth: int,
    progress=None,
) -> list[CrawlRun]:
    runs: list[CrawlRun] = []
    with tempfile.TemporaryDirectory(prefix="srcrawl-bench-") as tmp, TestWeb.generate(
        hosts=hosts, pages=pages, seed=1, latency_ms=latency_ms, slow_seconds=2,
        robots_failures=0, crawl_delay=0, large_bytes=200_000,
    ) as web:  # fmt: skip
        for n in slave_counts:
            job_cfg = Config(
                redis_url=cfg.resolved_redis_url(),
                db=DatabaseURL(kind="sqlite", path=str(Path(tmp) / f"bench-{n}.db")),
                job=f"bench-crawl-{n}-{time.time_ns()}",
                home=cfg.home,
            )
            strategy = CrawlStrategy(max_depth=depth, delay=0, delay_factor=0, max_delay=0,
                                     fetch_timeout=1, robots_defer=0.5)  # fmt: skip
            # host 0 carries the special pages (timeouts, traps, huge pages):
            # they measure robustness, not throughput, so the benchmark leaves it out
            seeds = web.seed_urls[1:] if len(web.seed_urls) > 1 else web.seed_urls
            start_crawl(job_cfg, seeds, strategy)
            cpu0 = _children_cpu()
            t0 = time.monotonic()
            final = run_local_crawl(
                job_cfg, slaves=n, slave_args=["--threads", str(threads)],
                report=(lambda p, e, n=n: progress(n, p, e)) if progress else None,
            )  # fmt: skip
            seconds = time.monotonic() - t0
            runs.append(CrawlRun(n, final.get("pages", 0), seconds, _children_cpu() - cpu0))
            job_cfg.close()
    return runs


def render(runs: list[CrawlRun], *, latency_ms: float, threads: int, hosts: int) -> str:
    base = runs[0].rate / runs[0].slaves if runs and runs[0].rate else 0.0
    lines = [
        f"crawl benchmark: {hosts} hosts, latency {latency_ms:g} ms, {threads} threads per slave",
        f"{'slaves':>6} {'pages':>7} {'seconds':>8} {'pages/s':>9} {'speedup':>8} "
        f"{'efficiency':>10} {'CPU ms/page':>12}",
    ]
    for r in runs:
        speedup = r.rate / base if base else 0.0
        lines.append(
            f"{r.slaves:>6} {r.pages:>7} {r.seconds:>8.1f} {r.rate:>9.1f} {speedup:>8.2f} "
            f"{speedup / r.slaves:>10.0%} {1000 * r.cpu_s / max(1, r.pages):>12.1f}"
        )
    return "\n".join(lines)
