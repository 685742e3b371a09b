"""`srcrawl bench crawl`."""

from __future__ import annotations

import click

from srcrawl.app.cli_options import fetches_option
from srcrawl.benchmarks.commands.common import config_of, hosts_option, pages_option, run_scaling
from srcrawl.benchmarks.scaling import (
    check_outputs,
    parse_slave_counts,
    scaling_options,
)
from srcrawl.core.defaults import BODY_STORES
from srcrawl.core.errors import ConfigError


def parse_per_host(text: str) -> list[int]:
    """``"1,16"`` → ``[1, 16]``: distinct --per-host values of at least 1, in the order given."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise ConfigError(
            f"--per-host: expected distinct values like 1,16 (at least 1), not {text!r}"
        )
    return values


@click.command("crawl")
@hosts_option(257, "Hosts of the synthetic web (host 0, the special pages, is not crawled).", low=2)
@pages_option(None, "Pages per host  [default: 20; 2000 with --single-site]")
@click.option(
    "--single-site",
    is_flag=True,
    help="Crawl one host of --pages pages (--hosts 2: host 0 is not crawled) to a depth "
    "that covers it, as the first crawl of one's own site is; see --per-host.",
)
@click.option(
    "--per-host",
    "per_host_text",
    default="1",
    show_default=True,
    help="Comma-separated --per-host values (requests in flight per host), one run each, "
    "side by side; the Scrapy peer runs at CONCURRENT_REQUESTS_PER_DOMAIN = the same.",
)
@click.option(
    "--latency-ms",
    default=200.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Per-response latency (0: the machine's ceiling).",
)
@fetches_option(4, "Fetches each slave keeps in flight (one thread drives them).")
@click.option(
    "--body-store",
    "body_store_text",
    default="warc",
    show_default=True,
    help="Comma-separated --body-store values (warc, sql), one run each, side by side; "
    "s3: WARC files published to a SeaweedFS the benchmark starts on loopback. "
    "Each run reports its SQL store's and WARC files' size.",
)
@click.option(
    "--depth",
    default=None,
    type=click.IntRange(0),
    help="Link hops from the seeds  [default: 8; 60 with --single-site]",
)
@click.option(
    "--peer",
    type=click.Choice(["scrapy"]),
    default=None,
    help="Also crawl the same web with a plain Scrapy spider at the same concurrency.",
)
@scaling_options(default_slaves="1,2,4,8", throughput="pages/s", rounds=True)
@click.pass_context
def bench_crawl(
    ctx: click.Context,
    slaves_text: str,
    rounds: int,
    hosts: int,
    pages: int | None,
    single_site: bool,
    per_host_text: str,
    latency_ms: float,
    body_store_text: str,
    fetches: int,
    depth: int | None,
    peer: str | None,
    json_path: str | None,
    plot_path: str | None,
) -> None:
    """Pages/s crawling the synthetic web with 1, 2, 4 … slaves (politeness off: our own site)."""
    from srcrawl.benchmarks.crawl import OBJECT_STORE, run_crawl_benchmark

    counts = parse_slave_counts(slaves_text)
    per_host = parse_per_host(per_host_text)
    body_stores = [b.strip() for b in body_store_text.split(",") if b.strip()]
    if (
        not body_stores
        or len(set(body_stores)) != len(body_stores)
        or not set(body_stores) <= {*BODY_STORES, OBJECT_STORE}
    ):
        choices = ", ".join((*BODY_STORES, OBJECT_STORE))
        raise ConfigError(f"--body-store: expected distinct values of {choices}")
    if single_site:
        hosts = 2
    pages = pages or (2000 if single_site else 20)
    depth = depth if depth is not None else 60 if single_site else 8
    check_outputs(json_path=json_path, plot_path=plot_path)
    if peer == "scrapy":
        from srcrawl.benchmarks.scrapy_peer import require_scrapy

        require_scrapy()
    cfg = config_of(ctx)
    cfg.check()
    run_scaling(
        lambda line: run_crawl_benchmark(
            cfg,
            slave_counts=counts,
            hosts=hosts,
            pages=pages,
            latency_ms=latency_ms,
            fetches=fetches,
            depth=depth,
            peer=peer,
            rounds=rounds,
            per_host=per_host,
            body_stores=body_stores,
            progress=line.update,
        ),
        json_path=json_path,
        plot_path=plot_path,
    )
