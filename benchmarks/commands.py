"""Command line of the benchmarks: ``srcrawl bench queue|parse|master|crawl|index|search|serve|
pagerank|startup|freshness|soak|outage``.

Each benchmark module is imported inside its command, so the CLI starts fast
and a benchmark's extras (scipy, Scrapy, matplotlib) are needed only by it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from srcrawl.benchmarks.scaling import (
    ScalingResult,
    check_outputs,
    parse_slave_counts,
    scaling_options,
)
from srcrawl.cli_options import DURATION, fetches_option
from srcrawl.config import Config
from srcrawl.defaults import BODY_STORES, DEFAULT_PAGERANK_ITERATIONS
from srcrawl.errors import ConfigError
from srcrawl.progress import ProgressLine


def _config(ctx: click.Context) -> Config:
    return ctx.find_root().obj


@click.group("bench")
def bench() -> None:
    """Throughput benchmarks (see docs/BENCHMARKS.md)."""


def _run_scaling(
    run: Callable[[ProgressLine], ScalingResult], *, json_path: str | None, plot_path: str | None
) -> None:
    """Run a scaling benchmark with the progress line, save its JSON/plot, print its table."""
    line = ProgressLine()
    try:
        result = run(line)
    finally:
        line.done()
    result.save(json_path=json_path, plot_path=plot_path)
    click.echo(result.render())


@bench.command("queue")
@click.option(
    "--messages",
    default=100_000,
    show_default=True,
    type=click.IntRange(1),
    help="Messages to push and pop.",
)
@click.option(
    "--batch",
    default=1000,
    show_default=True,
    type=click.IntRange(1),
    help="Messages per pop/ack round trip.",
)
@click.option(
    "--size", default=64, show_default=True, type=click.IntRange(1), help="Bytes per message."
)
@click.pass_context
def bench_queue(ctx: click.Context, messages: int, batch: int, size: int) -> None:
    """Push, reliably pop and ack small messages through the protocol."""
    from srcrawl.benchmarks.queue import run_queue_benchmark

    cfg = _config(ctx)
    result = run_queue_benchmark(cfg.redis(), messages=messages, batch=batch, size=size)
    click.echo(result.render())


@bench.command("parse")
@click.option(
    "--pages",
    default=2000,
    show_default=True,
    type=click.IntRange(1),
    help="Pages for decoding and each fast parse path.",
)
@click.option(
    "--bs4-pages",
    default=100,
    show_default=True,
    type=click.IntRange(0),
    help="Pages for BeautifulSoup (0: skip it).",
)
@click.option(
    "--size-kb",
    default=30,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Size of the generated page.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Parse every *.html file under DIR instead of the generated page (lxml and lexbor "
    "taking turns; --pages, --bs4-pages and --size-kb do not apply).",
)
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    type=click.IntRange(1),
    help="With --dir: times each parse path goes over all the pages.",
)
def bench_parse(
    pages: int, bs4_pages: int, size_kb: int, directory: Path | None, rounds: int
) -> None:
    """Pages/s of charset decoding and of each HTML parser, in this one process."""
    from srcrawl.benchmarks.parse import run_dir_benchmark, run_parse_benchmark

    if directory is not None:
        click.echo(run_dir_benchmark(directory, rounds=rounds).render())
        return
    click.echo(run_parse_benchmark(pages=pages, bs4_pages=bs4_pages, size_kb=size_kb).render())


@bench.command("failover")
@click.option(
    "--rounds",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Pairs of crawls (undisturbed, primary killed), each on a new cluster.",
)
@click.option(
    "--pages",
    default=40,
    show_default=True,
    type=click.IntRange(5, 2000),
    help="Pages per host of the 4-host test web.",
)
@click.option(
    "--after",
    "after_pages",
    default=20,
    show_default=True,
    type=click.IntRange(1),
    help="Stored pages before the primary is killed.",
)
@click.option(
    "--partitions",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Partitions of the crawl (the primary of partition 0 is killed).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write every run as JSON.",
)
def bench_failover(
    rounds: int, pages: int, after_pages: int, partitions: int, json_path: str | None
) -> None:
    """A crawl on a real Redis Cluster whose primary is SIGKILLed: pages lost, refetched, time."""
    from srcrawl.benchmarks.failover import as_json, render, run_failover_benchmark

    check_outputs(json_path=json_path, plot_path=None)
    line = ProgressLine()
    runs = run_failover_benchmark(
        rounds, pages, after_pages, say=line.update, partitions=partitions
    )
    line.done()
    click.echo(render(runs))
    if json_path:
        Path(json_path).write_text(json.dumps(as_json(runs), indent=2) + "\n")


@bench.command("exactness")
@click.option(
    "--runs",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="Crawls in a row, each of a new test web with late robots.txt hosts.",
)
@click.option(
    "--first",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Number of the first run (its web's seed, --depth and sitemaps).",
)
@click.option(
    "--partitions",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Frontier partitions of each crawl.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write every run as JSON.",
)
def bench_exactness(runs: int, first: int, partitions: int, json_path: str | None) -> None:
    """Crawls beside late hosts against a BFS of the test web: every URL, every depth."""
    from srcrawl.benchmarks.exactness import as_json, render, run_exactness_benchmark

    check_outputs(json_path=json_path, plot_path=None)
    line = ProgressLine()
    result = run_exactness_benchmark(runs, say=line.update, first=first, partitions=partitions)
    line.done()
    click.echo(render(result))
    if json_path:
        Path(json_path).write_text(json.dumps(as_json(result), indent=2) + "\n")
    if not all(r.exact for r in result):
        raise SystemExit(1)


@bench.command("outage")
@click.option(
    "--phase",
    "phases",
    type=click.Choice(["pagerank", "index"]),
    multiple=True,
    help="The command to run (repeat for both; default: both).",
)
@click.option(
    "--runs",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="Runs of each phase, each with its embedded Redis SIGKILLed mid-run.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Seed of the runs' webs, kill points and outages.",
)
@click.option(
    "--down-max",
    default=6.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Seconds the killed server may be kept from restarting (drawn per run).",
)
def bench_outage(phases: tuple[str, ...], runs: int, seed: int, down_max: float) -> None:
    """pagerank and index with the embedded Redis killed mid-run: exit 0 and exact, or exit 1."""
    from srcrawl.benchmarks.outage import OutageRun, render, run_outage_benchmark

    done: list = []
    line = ProgressLine()

    def said(r: OutageRun) -> None:  # each run's exit code as soon as it is known
        line.done()
        click.echo(
            f"{r.phase} run {r.run}: exit {r.exit_code}, {'ok' if r.ok else 'FAILED'} "
            f"(killed {r.killed}, restarted {r.restarted}, down {r.down:.1f} s, {r.detail})"
        )
        if r.stderr_tail:
            click.echo(r.stderr_tail)

    for phase in phases or ("pagerank", "index"):
        try:
            done += run_outage_benchmark(
                phase, runs, say=line.update, on_run=said, seed=seed, down_max=down_max
            )
        finally:
            line.done()
    click.echo(render(done))
    if not all(r.ok for r in done):
        raise SystemExit(1)


@bench.command("memory")
@click.option(
    "--urls",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1000),
    help="Distinct URLs run through the crawl master.",
)
@click.option("--hosts", default=10_000, show_default=True, type=click.IntRange(1))
@click.option(
    "--depth-record",
    is_flag=True,
    help="Instead: bytes per URL of the crawl's depth record, packed and as a hash field a URL.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the figures as JSON.",
)
def bench_memory(urls: int, hosts: int, depth_record: bool, json_path: str | None) -> None:
    """Bytes per queued URL in Redis and per seen URL in the Bloom filter (docs/SCALING.md)."""
    from srcrawl.benchmarks.memory import run_depth_record_benchmark, run_memory_benchmark

    check_outputs(json_path=json_path, plot_path=None)
    line = ProgressLine()
    figures = (
        run_depth_record_benchmark(urls, say=line.update)
        if depth_record
        else run_memory_benchmark(urls, hosts, say=line.update)
    )
    line.done()
    click.echo(figures.render())
    if json_path:
        Path(json_path).write_text(json.dumps(figures.as_json(), indent=2) + "\n")


@bench.command("master")
@click.option(
    "--urls",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1),
    help="Links in the stream.",
)
@click.option("--hosts", default=20, show_default=True, type=click.IntRange(1))
@click.option(
    "--partitions",
    default=None,
    metavar="P,P,…",
    help="Instead: master processes over a crawl of this many partitions each, every "
    "URL new (with --masters; --hosts defaults to 1000 then).",
)
@click.option(
    "--masters",
    default="1,2",
    show_default=True,
    metavar="M,M,…",
    help="Master processes sharing the partitions (with --partitions).",
)
@click.option("--rounds", default=1, show_default=True, type=click.IntRange(1))
@click.pass_context
def bench_master(
    ctx: click.Context,
    urls: int,
    hosts: int,
    partitions: str | None,
    masters: str,
    rounds: int,
) -> None:
    """URLs/s through the master: canonicalize + scope + seen test, then with Redis commits;
    or, with --partitions, master processes sharing a partitioned crawl."""
    if partitions is None:
        from srcrawl.benchmarks.master import run_master_benchmark

        click.echo(run_master_benchmark(_config(ctx), urls=urls, hosts=hosts).render())
        return
    from srcrawl.benchmarks.master_partitions import render, run_partition_benchmark

    line = ProgressLine()
    runs = run_partition_benchmark(
        _config(ctx),
        _counts(partitions, "--partitions"),
        _counts(masters, "--masters"),
        urls=min(urls, 2_000_000),
        hosts=hosts if hosts != 20 else 1000,
        rounds=rounds,
        say=line.update,
    )
    line.done()
    click.echo(render(runs))


def _counts(text: str, option: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise click.BadParameter(
            f"give whole numbers ≥ 1 separated by commas, not {text!r}", param_hint=option
        )
    return out


@bench.command("crawl")
@click.option(
    "--hosts",
    # many small hosts: with one request in flight per host, 8 slaves × 4
    # fetches need ≥ 32 hosts with work until the end of every depth level
    default=257,
    show_default=True,
    type=click.IntRange(2),
    help="Hosts of the synthetic web (host 0, the special pages, is not crawled).",
)
@click.option(
    "--pages",
    default=None,
    type=click.IntRange(1),
    help="Pages per host  [default: 20; 2000 with --single-site]",
)
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
    "each run reports its SQL store's and WARC files' size.",
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
    from srcrawl.benchmarks.crawl import run_crawl_benchmark

    counts = parse_slave_counts(slaves_text)
    per_host = parse_per_host(per_host_text)
    body_stores = [b.strip() for b in body_store_text.split(",") if b.strip()]
    if (
        not body_stores
        or len(set(body_stores)) != len(body_stores)
        or not set(body_stores) <= set(BODY_STORES)
    ):
        raise ConfigError(f"--body-store: expected distinct values of {', '.join(BODY_STORES)}")
    if single_site:
        hosts = 2
    pages = pages or (2000 if single_site else 20)
    depth = depth if depth is not None else 60 if single_site else 8
    check_outputs(json_path=json_path, plot_path=plot_path)
    if peer == "scrapy":
        from srcrawl.benchmarks.scrapy_peer import require_scrapy

        require_scrapy()
    cfg = _config(ctx)
    cfg.check()
    _run_scaling(
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


@bench.command("index")
@click.option(
    "--pages",
    type=click.IntRange(10, 10_000_000),
    default=5000,
    show_default=True,
    help="Generated pages (Chinese and English, ~2 KB of text each).",
)
@click.option("--seed", default=1, show_default=True, help="Corpus seed.")
@scaling_options(default_slaves="1,2,4", throughput="pages/s", rounds=True)
@click.pass_context
def bench_index(
    ctx: click.Context,
    pages: int,
    slaves_text: str,
    seed: int,
    rounds: int,
    json_path: str | None,
    plot_path: str | None,
) -> None:
    """Raw jieba vs the index phase with 1, 2, 4 slaves on the same generated pages."""
    from srcrawl.benchmarks.index import run_index_benchmark

    slaves = parse_slave_counts(slaves_text)
    check_outputs(json_path=json_path, plot_path=plot_path)
    cfg = _config(ctx)
    cfg.check()
    _run_scaling(
        lambda line: run_index_benchmark(
            cfg,
            pages=pages,
            slaves=slaves,
            seed=seed,
            rounds=rounds,
            say=line.say,
            progress=line.update,
        ),
        json_path=json_path,
        plot_path=plot_path,
    )


@bench.command("search")
@click.option(
    "--pages",
    type=click.IntRange(0, 10_000_000),
    default=50_000,
    show_default=True,
    help="Generated and indexed pages (built once, then reused); 0: no latency corpus.",
)
@click.option("--queries", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option(
    "--slaves",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Slaves that build the index when it is not there yet (with --corpus: that crawl, "
    "index and rank it).",
)
@click.option("--seed", default=1, show_default=True, help="Corpus and query seed.")
@click.option(
    "--ranking/--no-ranking",
    default=True,
    show_default=True,
    help="Also score known-item queries on the known-item test web (MRR, success@k).",
)
@click.option(
    "--base",
    "base_root",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Root of another srcrawl checkout whose ranking to score beside this one "
    "(e.g. a `git worktree add` of an older commit), on an index it builds itself.",
)
@click.option(
    "--known-hosts",
    default=2,
    show_default=True,
    type=click.IntRange(1, 16),
    help="Hosts of the known-item test web.",
)
@click.option(
    "--known-pages",
    default=60,
    show_default=True,
    type=click.IntRange(10, 5000),
    help="Regular pages per host of the known-item test web.",
)
@click.option(
    "--rounds",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Timed passes over the known-item queries per code, codes alternating.",
)
@click.option(
    "--corpus",
    "corpora",
    multiple=True,
    help="Instead: crawl, index and rank a real documentation corpus (django-en, "
    "debian-handbook-zh, or a directory of HTML with --query-file) and score its known-item "
    "queries, srcrawl beside plain BM25 (repeatable).",
)
@click.option(
    "--query-file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Known-item queries of a --corpus DIR (default: DIR/queries.tsv).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the ranking figures as JSON.",
)
@click.pass_context
def bench_search(
    ctx: click.Context,
    pages: int,
    queries: int,
    slaves: int,
    seed: int,
    ranking: bool,
    base_root: str | None,
    known_hosts: int,
    known_pages: int,
    rounds: int,
    corpora: tuple[str, ...],
    query_file: str | None,
    json_path: str | None,
) -> None:
    """Search latency p50/p95 over known-item queries, BM25 alone and blended with PageRank;
    then MRR and success@1/3/10 of known-item queries on the test web (with `--base`, the
    same for another checkout, side by side). With `--corpus`, only the real corpora."""
    from srcrawl.benchmarks.index import run_search_benchmark
    from srcrawl.benchmarks.ranking import run_ranking_benchmark
    from srcrawl.benchmarks.startup import code_at, this_code

    check_outputs(json_path=json_path, plot_path=None)
    cfg = _config(ctx)
    say = lambda s: click.echo(s, err=True)  # noqa: E731
    if corpora:
        _bench_corpora(cfg, corpora, query_file, slaves, json_path)
        return
    if pages >= 10:
        result = run_search_benchmark(
            cfg, pages=pages, queries=queries, slaves=slaves, seed=seed, say=say
        )
        click.echo(result.render())
    if ranking:
        codes = [this_code()] + ([code_at("base", base_root)] if base_root else [])
        scored = run_ranking_benchmark(
            cfg,
            codes=codes,
            hosts=known_hosts,
            pages=known_pages,
            seed=seed,
            rounds=rounds,
            say=say,
        )
        if json_path:
            Path(json_path).write_text(json.dumps(scored.as_json(), indent=2))
        click.echo(scored.render())


def _bench_corpora(
    cfg: Config,
    corpora: tuple[str, ...],
    query_file: str | None,
    slaves: int,
    json_path: str | None,
) -> None:
    """`bench search --corpus`: each corpus's table (and all of them as JSON)."""
    from srcrawl.benchmarks.known_queries import BUILTIN, builtin_query_file, read_query_file
    from srcrawl.benchmarks.real_corpora import run_corpus

    line = ProgressLine()
    runs = []
    for corpus in corpora:
        tree = None if corpus in BUILTIN else Path(corpus)
        if tree is not None and not tree.is_dir():
            raise click.BadParameter(
                f"{corpus!r} is neither {' nor '.join(BUILTIN)} nor a directory",
                param_hint="--corpus",
            )
        qpath = (
            builtin_query_file(corpus)
            if tree is None
            else (Path(query_file) if query_file else tree / "queries.tsv")
        )
        try:
            result = run_corpus(
                cfg,
                read_query_file(qpath),
                tree=tree,
                slaves=slaves,
                say=line.say,
                progress=line.update,
            )
        finally:
            line.done()
        click.echo(result.render())
        runs.append(result.as_json())
        if json_path:  # after each corpus: a later one failing keeps the earlier figures
            Path(json_path).write_text(json.dumps({"corpora": runs}, indent=2, ensure_ascii=False))


@bench.command("serve")
@click.option(
    "--pages",
    type=click.IntRange(10, 10_000_000),
    default=50_000,
    show_default=True,
    help="Generated and indexed pages (built once, then reused, as by bench search).",
)
@click.option(
    "--clients",
    default="1,10,50",
    show_default=True,
    help="Comma-separated numbers of concurrent clients.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(0.5),
    default=5.0,
    show_default=True,
    help="Seconds of load per (language, clients) cell (wrk takes whole seconds: a "
    "fraction is rounded up).",
)
@click.option("--rounds", type=click.IntRange(1), default=1, show_default=True)
@click.option(
    "--spawns",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="`srcrawl search` processes spawned per language and round.",
)
@click.option(
    "--threads",
    type=click.IntRange(0, 64),
    default=None,
    help="The portal's search threads (in each worker; 0: searches in its event loop) "
    "[default: srcrawl serve's for the benchmark's SQLite store, 0].",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="The portal's worker processes [default: srcrawl serve's, one a core].",
)
@click.option(
    "--client",
    type=click.Choice(["wrk", "python"]),
    default=None,
    help="The load client: wrk (C, little CPU) or this process (asyncio) "
    "[default: wrk when installed].",
)
@click.option(
    "--base",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Another source tree (e.g. a git worktree) whose srcrawl serve is measured beside.",
)
@click.option("--seed", default=1, show_default=True, help="Corpus and query seed.")
@click.pass_context
def bench_serve(
    ctx: click.Context,
    pages: int,
    clients: str,
    seconds: float,
    rounds: int,
    spawns: int,
    threads: int | None,
    workers: int | None,
    client: str | None,
    base: str | None,
    seed: int,
) -> None:
    """Portal latency p50/p95 and requests/s under load, beside spawning `srcrawl search`."""
    from srcrawl.benchmarks.serve import run_serve_benchmark

    try:
        counts = [int(part) for part in clients.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"--clients: expected counts like 1,10,50, not {clients!r}")
    result = run_serve_benchmark(
        _config(ctx),
        pages=pages,
        clients=counts,
        seconds=seconds,
        rounds=rounds,
        spawns=spawns,
        threads=threads,
        workers=workers,
        client=client,
        base=base,
        seed=seed,
        say=lambda s: click.echo(s, err=True),
    )
    click.echo(result.render())


@bench.command("pagerank")
@click.option("--nodes", type=click.IntRange(min=2), default=1_000_000, show_default=True)
@click.option("--edges", type=click.IntRange(min=0), default=10_000_000, show_default=True)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=DEFAULT_PAGERANK_ITERATIONS,
    show_default=True,
)
@click.option("--seed", default=1, show_default=True, help="Seed of the graph generator.")
@scaling_options(default_slaves="1,2,4", throughput="iterations/s")
@click.pass_context
def bench_pagerank(
    ctx: click.Context,
    nodes: int,
    edges: int,
    slaves_text: str,
    iterations: int,
    seed: int,
    json_path: str | None,
    plot_path: str | None,
) -> None:
    """Seconds per iteration per slave count on a synthetic power-law web, beside scipy."""
    from srcrawl.benchmarks.pagerank import run_pagerank_benchmark

    counts = parse_slave_counts(slaves_text)
    check_outputs(json_path=json_path, plot_path=plot_path)
    cfg = _config(ctx)
    cfg.check()
    _run_scaling(
        lambda line: run_pagerank_benchmark(
            cfg,
            nodes=nodes,
            edges=edges,
            slave_counts=counts,
            iterations=iterations,
            seed=seed,
            echo=line.say,
            progress=line.update,
        ),
        json_path=json_path,
        plot_path=plot_path,
    )


@bench.command("startup")
@click.option(
    "--rounds",
    default=20,
    show_default=True,
    type=click.IntRange(1),
    help="Runs of each command per code.",
)
@click.option(
    "--base",
    "base_root",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Root of another srcrawl checkout to run beside this one (e.g. a "
    "`git worktree add` of an older commit).",
)
@click.option(
    "--pages",
    default=200,
    show_default=True,
    type=click.IntRange(10, 100_000),
    help="Generated pages in the index searched.",
)
@click.option("--seed", default=1, show_default=True, help="Corpus seed.")
@click.option("--query-en", default=None, help="English query [default: two common corpus words].")
@click.option("--query-zh", default=None, help="Chinese query [default: two common corpus words].")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the figures and every wall time as JSON.",
)
@click.pass_context
def bench_startup(
    ctx: click.Context,
    rounds: int,
    base_root: str | None,
    pages: int,
    seed: int,
    query_en: str | None,
    query_zh: str | None,
    json_path: str | None,
) -> None:
    """Wall time of `srcrawl search` (English, Chinese) and `--version` as new processes."""
    from srcrawl.benchmarks.startup import (
        code_at,
        default_queries,
        run_startup_benchmark,
        this_code,
    )

    check_outputs(json_path=json_path, plot_path=None)
    codes = [this_code()] + ([code_at("base", base_root)] if base_root else [])
    english, chinese = default_queries(seed)
    line = ProgressLine()
    try:
        result = run_startup_benchmark(
            _config(ctx),
            codes=codes,
            rounds=rounds,
            pages=pages,
            seed=seed,
            queries=(query_en or english, query_zh or chinese),
            say=line.update,
        )
    finally:
        line.done()
    if json_path:
        Path(json_path).write_text(json.dumps(result.as_json(), indent=2, ensure_ascii=False))
    click.echo(result.render())


@bench.command("freshness")
@click.option(
    "--hosts",
    default=4,
    show_default=True,
    type=click.IntRange(2),
    help="Hosts of the changing test web (host 0, the special pages, is not crawled).",
)
@click.option(
    "--pages", default=15, show_default=True, type=click.IntRange(1), help="Regular pages per host."
)
@click.option(
    "--budget",
    default=4.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Fetches per second each crawl may make (enforced by politeness).",
)
@click.option(
    "--duration",
    default="4m",
    show_default=True,
    type=DURATION,
    help="How long freshness is sampled once the first crawls are over.",
)
@click.option("--seed", default=1, show_default=True, help="Seed of the web and its changes.")
@click.option(
    "--policy",
    type=click.Choice(("adaptive", "nutch")),
    default="adaptive",
    show_default=True,
    help="The revisit policy measured against uniform.",
)
@click.option(
    "--sitemaps",
    "sitemap_every",
    type=DURATION,
    default="0s",
    show_default=True,
    help="The measured crawl's hosts serve sitemaps with each page's lastmod, read "
    "again this often (--sitemap-every; its requests count against the budget); "
    "0s: no sitemaps.",
)
@click.pass_context
def bench_freshness(
    ctx: click.Context,
    hosts: int,
    pages: int,
    budget: float,
    duration: float,
    seed: int,
    policy: str,
    sitemap_every: float,
) -> None:
    """Freshness of the store and bytes sent: adaptive revisit against uniform, same budget."""
    from srcrawl.benchmarks.freshness import render, run_freshness_benchmark

    cfg = _config(ctx)
    cfg.check()
    line = ProgressLine()
    try:
        setup, runs = run_freshness_benchmark(
            cfg,
            hosts=hosts,
            pages=pages,
            budget=budget,
            duration=duration,
            seed=seed,
            say=line.update,
            policy=policy,
            sitemap_every=sitemap_every,
        )
    finally:
        line.done()
    click.echo(render(setup, runs))


@bench.command("soak")
@click.option(
    "--duration",
    default="30m",
    show_default=True,
    type=DURATION,
    help="How long the engine runs (30m, 2h).",
)
@click.option(
    "--every", default="30s", show_default=True, type=DURATION, help="Time between two samples."
)
@click.option(
    "--hosts",
    default=6,
    show_default=True,
    type=click.IntRange(2),
    help="Hosts of the changing test web (host 0, the special pages, is not crawled).",
)
@click.option(
    "--pages", default=40, show_default=True, type=click.IntRange(1), help="Regular pages per host."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    help="Write every sample and the growth figures to this file.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    help="Draw the samples into this PNG (matplotlib).",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    default=None,
    help="Run in this directory and keep it (logs, store, WARC files).",
)
@click.pass_context
def bench_soak(
    ctx: click.Context,
    duration: float,
    every: float,
    hosts: int,
    pages: int,
    json_path: str | None,
    plot_path: str | None,
    keep: str | None,
) -> None:
    """The always-on engine under search load: does memory, open files or disk per page grow?"""
    from srcrawl.benchmarks.soak import SoakSetup, render, run_soak, save

    cfg = _config(ctx)
    cfg.check()
    if every > duration / 4:
        raise click.BadParameter(
            "take at least 4 samples: --every at most --duration / 4", param_hint="--every"
        )
    setup = SoakSetup(duration=duration, every=every, hosts=hosts, pages=pages)
    line = ProgressLine()
    try:
        run = run_soak(cfg, setup, line.update, keep=Path(keep) if keep else None)
    finally:
        line.done()
    save(run, json_path, plot_path)
    click.echo(render(run))
