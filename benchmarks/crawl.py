"""``srcrawl bench crawl``: pages/s against the number of slaves [Redis engine §4.1].

Each slave count crawls the same synthetic web, served by another process
on loopback with a fixed per-response latency, as a fresh job into a fresh
SQLite store, with the same fetches in flight per slave: only the slave count changes.
Politeness is off (it is our own site), but there is still one request in
flight per host, so the web has many hosts — or, in single-site mode, one
host crawled with ``--per-host`` requests in flight (each ``--per-host``
value given is a series of its own, run beside the others in every round).

Beside pages/s, each run reports what the master and the slaves saw:

- master URLs/s: links the master judged (canonicalize, scope and trap
  filters, seen test) per second of the crawl, from the crawl's counters:
  the load the slaves put on it, not its ceiling (``bench master``);
- link cache hit rate: the slaves' CLOCK caches of links they already
  emitted, from their heartbeats (sampled while the crawl runs: a slave's
  heartbeat leaves with it), each slave weighted by its pages.

- slots busy (single site only): the requests in flight at the web on
  average, from the test web's access log (from the run's first request's
  start to its last one's end), as a fraction of ``--per-host``: 100 % is
  every slot the host allows in use all the time. It tells a crawl held
  back by its own round trips (a slot idle between a response and the
  next request) from one held back by the web.

With ``peer="scrapy"`` a plain Scrapy spider (:mod:`srcrawl.benchmarks.scrapy_peer`)
crawls the same web after each srcrawl run, at the same total concurrency and
the same requests in flight per host (``CONCURRENT_REQUESTS_PER_DOMAIN``).
"""

from __future__ import annotations

import contextlib
import resource
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from srcrawl.app.runner import run_local_crawl
from srcrawl.benchmarks.scaling import Column, Row, ScalingResult, median_of_rounds, round_orders
from srcrawl.core.defaults import DEFAULT_TESTWEB_LOG_FLUSH
from srcrawl.master.crawl_run import start_crawl
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import DENIED, OUT_OF_SCOPE, TOO_DEEP, TOO_LONG, TRAP
from srcrawl.queues.workers import workers
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.testweb import TestWeb
from srcrawl.testweb.accesslog import mean_in_flight

JUDGED = ("scheduled", "duplicates", "host_cap", OUT_OF_SCOPE, DENIED, TOO_LONG, TRAP, TOO_DEEP)
"""Crawl counters that each count one link the master judged."""
FETCH_TIMEOUT = 1.0
"""Seconds a fetch may wait for bytes (the web answers within --latency-ms)."""
SAMPLE_INTERVAL = 1.0
"""Seconds between two reads of the slaves' heartbeats during a run."""
LOG_SETTLE = DEFAULT_TESTWEB_LOG_FLUSH * 1.5
"""Seconds to wait after a run for the test web's access log to hold all its requests."""

Progress = Callable[[str], None]


def _children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


class SlaveSampler:
    """The latest heartbeat stats of every crawl slave of a job."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.latest: dict[str, dict] = {}
        self._last = 0.0

    def sample(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < SAMPLE_INTERVAL:
            return
        self._last = now
        for w in workers(self.cfg.redis(), self.cfg.keys):
            if w.alive and "crawl_pages" in w.stats:
                self.latest[w.id] = w.stats

    def cache_hit_rate(self) -> float | None:
        """The slaves' link cache hit rates, weighted by their pages."""
        weighted = [
            (float(s.get("crawl_cache_hit_rate", 0.0)), float(s.get("crawl_pages", 0)))
            for s in self.latest.values()
        ]
        pages = sum(p for _r, p in weighted)
        return sum(r * p for r, p in weighted) / pages if pages else None


def run_crawl_benchmark(
    cfg: Config,
    *,
    slave_counts: list[int],
    hosts: int,
    pages: int,
    latency_ms: float,
    fetches: int,
    depth: int,
    peer: str | None = None,
    rounds: int = 1,
    per_host: Sequence[int] = (1,),
    body_stores: Sequence[str] = ("warc",),
    progress: Progress | None = None,
) -> ScalingResult:
    """Crawl the synthetic web once per slave count and ``per_host`` value (and with the
    peer, if asked).

    With ``rounds`` > 1, once per slave count a round (see
    :func:`~srcrawl.benchmarks.scaling.round_orders`); each count's row, and its peer's,
    is its median run. The first ``per_host`` value is the scaling series.
    """
    if rounds < 1:
        raise ValueError("rounds must be positive")
    result = _crawl_table(slave_counts, hosts, pages, latency_ms, fetches, depth, peer, rounds)
    result.parameters["per_host"] = list(per_host)
    result.parameters["body_stores"] = list(body_stores)
    result.columns.append(Column("store_mb", "SQL store MB", ",.2f"))
    result.columns.append(Column("pages_mb", "pages MB", ",.2f"))
    result.columns.append(Column("links_mb", "links MB", ",.2f"))
    result.columns.append(Column("warc_mb", "WARC MB", ",.2f"))
    series = [(p, b) for p in per_host for b in body_stores]
    single = _hosts_crawled(hosts) == "1 host"
    if single:
        result.columns.append(Column("slots_busy", "slots busy", ".0%"))
        result.columns.append(Column("web_rate", "pages/s at the web", ",.1f"))
    runs = _CrawlRuns(
        cfg,
        fetches=fetches,
        depth=depth,
        peer=peer,
        per_host=series,
        progress=progress or (lambda text: None),
    )
    if OBJECT_STORE in body_stores:
        result.columns.append(Column("warc_objects", "WARC objects", ",d"))
        result.columns.append(Column("warc_bytes_per_page", "WARC bytes/page", ",.0f"))
    with (
        tempfile.TemporaryDirectory(prefix="srcrawl-bench-") as tmp,
        _bench_web(hosts, pages, latency_ms, Path(tmp) / "access.jsonl" if single else None) as web,
        _object_store(Path(tmp) / "weed", OBJECT_STORE in body_stores),
    ):
        runs.web = web if single else None
        # host 0 carries the special pages (timeouts, traps, huge pages):
        # they measure robustness, not throughput, so the benchmark leaves it out
        seeds = web.seed_urls[1:] if len(web.seed_urls) > 1 else web.seed_urls
        for r, order in enumerate(round_orders(slave_counts, rounds)):
            runs.round(Path(tmp), seeds, r, rounds, order)
    _add_crawl_rows(result, runs, slave_counts, rounds)
    return result


def _crawl_table(
    slave_counts: list[int],
    hosts: int,
    pages: int,
    latency_ms: float,
    fetches: int,
    depth: int,
    peer: str | None,
    rounds: int,
) -> ScalingResult:
    """The empty table of a crawl benchmark: its title, parameters and columns."""
    result = ScalingResult(
        bench="crawl",
        title=f"crawl benchmark: {_hosts_crawled(hosts)} crawled, "
        f"latency {latency_ms:g} ms, {fetches} fetches in flight per slave, depth {depth}",
        unit="pages",
        per="page",
        parameters={
            "slaves": slave_counts,
            "hosts": hosts,
            "pages_per_host": pages,
            "latency_ms": latency_ms,
            "threads": fetches,  # the key earlier results (docs/bench/*.json) use
            "depth": depth,
            "peer": peer,
            "rounds": rounds,
            "fetch_timeout": FETCH_TIMEOUT,
        },
        columns=[
            Column("master_urls_per_s", "master URLs/s", ",.0f"),
            Column("link_cache_hit_rate", "link cache hits", ".1%"),
        ],
    )
    if peer:
        result.columns.append(Column("vs_peer", f"× {peer}", ".2f"))
    return result


def _hosts_crawled(hosts: int) -> str:
    """How many hosts a crawl of a web of ``hosts`` crawls (host 0 is left out)."""
    n = hosts - 1 if hosts > 1 else hosts
    return f"{n} host{'s' if n > 1 else ''}"


def _bench_web(hosts: int, pages: int, latency_ms: float, access_log: Path | None) -> TestWeb:
    """The synthetic web the benchmark crawls (a context manager that serves it), keeping
    ``access_log`` if given (single site: what the slots-busy column reads)."""
    return TestWeb.generate(
        hosts=hosts,
        pages=pages,
        seed=1,
        latency_ms=latency_ms,
        slow_seconds=2,
        robots_failures=0,
        crawl_delay=0,
        large_bytes=200_000,
        # every page is rendered before the crawl starts: rendering is the
        # remote sites' CPU, which here would come out of the crawl's cores
        prerender=True,
        access_log=access_log,
    )


class _CrawlRuns:
    """The runs of every round: ours and the peer's, per ``--per-host`` and slave count."""

    def __init__(
        self,
        cfg: Config,
        *,
        fetches: int,
        depth: int,
        peer: str | None,
        per_host: list[tuple[int, str]],
        progress: Progress,
    ) -> None:
        self.cfg, self.fetches, self.depth, self.peer = cfg, fetches, depth, peer
        self.per_host = per_host
        """(--per-host, --body-store) of each series."""
        self.progress = progress
        self.ours: dict[tuple[int, str], list[dict[int, Row]]] = {p: [] for p in per_host}
        self.theirs: dict[tuple[int, str], list[dict[int, Row]]] = {p: [] for p in per_host}
        self.web: TestWeb | None = None
        """The web, when its access log measures how busy the host's slots were."""

    def round(self, tmp: Path, seeds: list[str], r: int, rounds: int, order: list[int]) -> None:
        """Round ``r``: one crawl per slave count in ``order`` and ``--per-host`` value (in
        the order of round ``r`` too), each into a fresh store, the peer's right after."""
        step = f"round {r + 1}/{rounds}: " if rounds > 1 else ""

        def say(text: str) -> None:
            self.progress(step + text)

        for p in self.per_host:
            self.ours[p].append({})
            self.theirs[p].append({})
        for n in order:
            for p in round_orders(self.per_host, r + 1)[r]:
                run = _Run(n, self.fetches, self.depth, p[0], p[1])
                since = time.monotonic()
                row = _crawl_once(self.cfg, tmp / f"{r}-{n}-{p[0]}-{p[1]}.db", seeds, run, say)
                if self.web is not None:
                    row.extra.update(_at_the_web(self.web, since, run.per_host, row.items))
                self.ours[p][-1][n] = row
                if self.peer == "scrapy" and p[1] == self.per_host[0][1]:
                    since = time.monotonic()
                    peer = _scrapy_once(seeds, run, say)
                    if self.web is not None:
                        peer.extra.update(_at_the_web(self.web, since, run.per_host, peer.items))
                    self.theirs[p][-1][n] = peer


def _add_crawl_rows(
    result: ScalingResult, runs: _CrawlRuns, slave_counts: list[int], rounds: int
) -> None:
    """Each count's median row per ``--per-host``, its peer's after it, and how they compare.

    The first ``--per-host`` value is the scaling series; the others are series of their own.
    """
    if rounds > 1:
        result.columns.append(Column("speedups", "speedup per round"))
        result.head.append(
            f"  {rounds} rounds, the order of slave counts reversed every other round; each "
            "count's row (and its peer's) is its run of median pages/s"
        )
    if len(runs.per_host) > 1:
        first = runs.per_host[0]
        result.columns.append(Column("vs_first", f"× {_series_name(first)}, per round (median)"))
    for i, p in enumerate(runs.per_host):
        mine = {row.slaves: row for row in median_of_rounds(runs.ours[p])}
        if i > 0:
            _ratios_to_first(mine, runs.ours[p], runs.ours[runs.per_host[0]])
        theirs = runs.theirs[p] if all(runs.theirs[p]) else []
        peers = {row.slaves: row for row in median_of_rounds(theirs)} if theirs else {}
        for row in peers.values():  # the peer's own scaling is not what the column shows
            row.extra.pop("speedups", None)
            row.extra.pop("round_speedups", None)
        for n in slave_counts:
            row = mine[n]
            if i > 0:
                name = _series_name(p)
                row.series, row.label = f"srcrawl {name}", f"{n} ({name})"
            result.rows.append(row)
            peer_row = peers.get(n)
            if peer_row is not None:
                result.rows.append(peer_row)
                if peer_row.throughput:
                    row.extra["vs_peer"] = row.throughput / peer_row.throughput


def _series_name(p: tuple[int, str]) -> str:
    return f"--per-host {p[0]} --body-store {p[1]}"


def _ratios_to_first(
    rows: dict[int, Row], mine: list[dict[int, Row]], first: list[dict[int, Row]]
) -> None:
    """Each row's pages/s over the first series' in the same round and slave count, and
    their median: runs a minute apart, where the medians of two series over all the
    rounds compare runs further apart (the machine's speed drifts meanwhile)."""
    for n, row in rows.items():
        ratios = [
            r[n].throughput / f[n].throughput
            for r, f in zip(mine, first, strict=True)
            if f[n].throughput
        ]
        if ratios:
            med = statistics.median(ratios)
            row.extra["vs_first"] = " ".join(f"{x:.2f}" for x in ratios) + f" ({med:.2f})"


@dataclass(frozen=True)
class _Run:
    """What one crawl of a round runs with."""

    slaves: int
    fetches: int
    depth: int
    per_host: int
    body_store: str = "warc"

    @property
    def name(self) -> str:
        per_host = f", --per-host {self.per_host}" if self.per_host > 1 else ""
        bodies = f", bodies in {self.body_store}" if self.body_store != "warc" else ""
        return f"{self.slaves} slave(s){per_host}{bodies}"


def _at_the_web(web: TestWeb, since: float, per_host: int, pages: int) -> dict[str, float]:
    """What the one host crawled since ``since`` (monotonic) saw, once the web's access log
    holds it all: the mean requests in flight as a fraction of ``per_host`` (slots busy),
    and ``pages`` over the time from the first request's start to the last one's end
    (pages/s at the web: the crawl's rate without its processes' start and end)."""
    time.sleep(LOG_SETTLE)
    entries = [e for e in web.log_entries() if e["start_mono"] >= since]
    if not entries:
        return {"slots_busy": 0.0, "web_rate": 0.0}
    span = max(e["end_mono"] for e in entries) - min(e["start_mono"] for e in entries)
    return {
        "slots_busy": mean_in_flight(entries) / per_host,
        "web_rate": pages / span if span > 0 else 0.0,
    }


def _job_config(cfg: Config, db: Path, slaves: int, objects: bool) -> Config:
    """A run's own job and SQLite store, its WARC files beside the store (or, with
    ``objects``, spooled there and published to the benchmark's object store)."""
    job = f"bench-crawl-{slaves}-{time.time_ns()}"
    return Config(
        redis_url=cfg.resolved_redis_url(),
        db=DatabaseURL(kind="sqlite", path=str(db)),
        job=job,
        home=cfg.home,
        warc_dir=db.parent / "warc",  # beside the run's store, removed with it
        warc_url=f"s3://{OBJECT_BUCKET}/{job}" if objects else None,
    )


def _crawl_once(cfg: Config, db: Path, seeds: list[str], run: _Run, say: Progress) -> Row:
    n, fetches = run.slaves, run.fetches
    objects = run.body_store == OBJECT_STORE
    job_cfg = _job_config(cfg, db, n, objects)
    try:
        strategy = CrawlStrategy(
            max_depth=run.depth,
            delay=0,
            delay_factor=0,
            max_delay=0,
            fetch_timeout=FETCH_TIMEOUT,
            robots_defer=0.5,
            per_host=run.per_host,
            body_store="warc" if objects else run.body_store,
        )
        start_crawl(job_cfg, seeds, strategy)
        sampler = SlaveSampler(job_cfg)

        def report(p: dict[str, int], elapsed: float) -> None:
            sampler.sample()
            rate = p.get("pages", 0) / elapsed if elapsed > 0 else 0.0
            say(
                f"{run.name}: {p.get('pages', 0)} pages, {p.get('queued', 0)} queued, "
                f"{rate:.1f} pages/s, {elapsed:.0f} s"
            )

        cpu0 = _children_cpu()
        t0 = time.monotonic()
        final = run_local_crawl(job_cfg, slaves=n, threads=fetches, report=report)
        seconds = time.monotonic() - t0
        cpu = _children_cpu() - cpu0
        sizes = _sizes(job_cfg)
        if objects:
            sizes.update(_object_sizes(job_cfg, final.get("pages", 0)))
    finally:
        _drop_job(job_cfg)
        job_cfg.close()
    judged = sum(final.get(k, 0) for k in JUDGED)
    return Row(
        slaves=n,
        items=final.get("pages", 0),
        seconds=seconds,
        cpu_s=cpu,
        extra={
            "master_urls_per_s": judged / seconds if seconds else 0.0,
            "links_judged": judged,
            "link_cache_hit_rate": sampler.cache_hit_rate(),
            "fetch_errors": final.get("fetch_errors", 0),
            "per_host": run.per_host,
            "body_store": run.body_store,
            **sizes,
        },
    )


_TABLE_OF = {
    "pages_host": "pages",
    "pages_indexed": "pages",
    "links_to": "links",
    "warc_files": "pages",
    "sqlite_autoindex_warc_files_1": "pages",
}
"""The table each secondary index of the schema belongs to (its bytes count with it); the
WARC file names the pages rows point at count with pages, which held them before schema 7."""


def _sizes(cfg: Config) -> dict[str, float]:
    """MB of the run's SQL store (checkpointed: its WAL folded in), of its pages and links
    tables with their indexes (SQLite's dbstat), and of its WARC files."""
    db = Path(cfg.db.path)
    with contextlib.closing(sqlite3.connect(db)) as conn:  # the WAL folded into the file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    tables: dict[str, int] = {}
    for name, size in rows:
        table = _TABLE_OF.get(name, name)
        tables[table] = tables.get(table, 0) + int(size)
    warc = cfg.warc_root / cfg.job
    warc_bytes = sum(f.stat().st_size for f in warc.glob("*")) if warc.is_dir() else 0
    return {
        "store_mb": db.stat().st_size / 2**20,
        "pages_mb": tables.get("pages", 0) / 2**20,
        "links_mb": tables.get("links", 0) / 2**20,
        "warc_mb": warc_bytes / 2**20,
    }


OBJECT_STORE = "s3"
"""The crawl benchmark's ``--body-store`` for WARC files published to an S3 object store
(a SeaweedFS the benchmark starts on loopback), beside the crawl's own values."""
OBJECT_BUCKET = "bench-warc"


@contextlib.contextmanager
def _object_store(directory: Path, wanted: bool) -> Iterator[None]:
    """A SeaweedFS on loopback while the benchmark runs, if ``wanted``: its endpoint and
    keys in this process's environment, which the slaves it starts inherit."""
    if not wanted:
        yield
        return
    from srcrawl.lab.seaweedfs import SeaweedFS

    with SeaweedFS(directory).running():
        yield


def _object_sizes(cfg: Config, pages: int) -> dict[str, float]:
    """The objects the run published and their bytes: a page's share of the store."""
    import obstore

    storage = cfg.warc_storage()
    metas = [m for batch in obstore.list(storage.store, cfg.job) for m in batch]
    total = sum(int(m["size"]) for m in metas)
    return {
        "warc_mb": total / 2**20,
        "warc_objects": len(metas),
        "warc_bytes_per_page": total / pages if pages else 0.0,
    }


def _scrapy_once(seeds: list[str], run: _Run, say: Progress) -> Row:
    from srcrawl.benchmarks.scrapy_peer import run_scrapy_peer

    n, p = run.slaves, run.per_host
    per_host = f", {p} per host" if p > 1 else ""
    say(f"scrapy, {n * run.fetches} concurrent requests{per_host} …")
    peer = run_scrapy_peer(
        seeds, depth=run.depth, concurrency=n * run.fetches, timeout=FETCH_TIMEOUT, per_host=p
    )
    return Row(
        slaves=n,
        items=peer.pages,
        seconds=peer.seconds,
        cpu_s=peer.cpu_s,
        label=f"scrapy ({peer.concurrency} concurrent{per_host})",
        series="scrapy" if p == 1 else f"scrapy {p} per host",
        extra={"concurrency": peer.concurrency, "disallowed": peer.disallowed, "per_host": p},
    )


def _drop_job(cfg: Config) -> None:
    """Remove a finished run's keys: later runs share the Redis."""
    client = cfg.redis()
    doomed = list(client.scan_iter(match=f"{cfg.keys.prefix}:*", count=1000))
    for i in range(0, len(doomed), 1000):
        client.delete(*doomed[i : i + 1000])
