"""Command line of the benchmarks: `srcrawl bench NAME`, one module a command here.

Each benchmark module is imported inside its command, so the CLI starts fast
and a benchmark's extras (scipy, Scrapy, matplotlib) are needed only by it.
"""

from __future__ import annotations

import click

from srcrawl.benchmarks.commands.crawl import bench_crawl
from srcrawl.benchmarks.commands.exactness import bench_exactness
from srcrawl.benchmarks.commands.failover import bench_failover
from srcrawl.benchmarks.commands.freshness import bench_freshness
from srcrawl.benchmarks.commands.index import bench_index
from srcrawl.benchmarks.commands.isolation import bench_isolation
from srcrawl.benchmarks.commands.loco import bench_loco
from srcrawl.benchmarks.commands.master import bench_master
from srcrawl.benchmarks.commands.memory import bench_memory
from srcrawl.benchmarks.commands.outage import bench_outage
from srcrawl.benchmarks.commands.pagerank import bench_pagerank
from srcrawl.benchmarks.commands.parse import bench_parse
from srcrawl.benchmarks.commands.queue import bench_queue
from srcrawl.benchmarks.commands.search import bench_search
from srcrawl.benchmarks.commands.serve import bench_serve
from srcrawl.benchmarks.commands.soak import bench_soak
from srcrawl.benchmarks.commands.startup import bench_startup


@click.group("bench")
def bench() -> None:
    """Throughput benchmarks (see docs/BENCHMARKS.md)."""


for _command in (
    bench_crawl,
    bench_exactness,
    bench_failover,
    bench_freshness,
    bench_index,
    bench_isolation,
    bench_loco,
    bench_master,
    bench_memory,
    bench_outage,
    bench_pagerank,
    bench_parse,
    bench_queue,
    bench_search,
    bench_serve,
    bench_soak,
    bench_startup,
):
    bench.add_command(_command)
