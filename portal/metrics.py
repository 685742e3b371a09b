"""``/metrics``: the cluster's counters and the portal's search latency, for Prometheus.

The cluster's numbers are read from Redis and the store at scrape time (a
custom collector), so a scrape shows what ``srcrawl status`` would show then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from srcrawl.core.defaults import FETCH_SECONDS_BUCKETS
from srcrawl.core.telemetry import FETCH_ERROR_KINDS, ROBOTS_LOOKUPS, STATUS_CLASSES

# search latency buckets: the goal is 25 ms at the 95th percentile
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ClusterCollector(Collector):
    """Queues, workers, crawl counters and index/rank progress of one job, read per scrape."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("srcrawl_cluster_up", "1 if Redis and the store could be read")
        try:
            snap = self._snapshot()
        except Exception:  # Redis or the store away: the scrape still answers, saying so
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _crawl_metrics(snap["phases"].get("crawl", {}).get("counters", {}))
        yield from _queue_metrics(snap["phases"])
        alive = GaugeMetricFamily("srcrawl_workers_alive", "Workers with a live heartbeat")
        alive.add_metric([], sum(1 for w in snap["workers"] if w["alive"]))
        yield alive
        yield from _store_metrics(snap["store"])
        yield from _index_metrics(snap["phases"].get("index", {}).get("counters", {}))
        ops = snap.get("operations")
        others = ops.get("processes", {}) if ops is not None else {}
        yield from _process_metrics(snap["workers"], others)
        if ops is not None:
            yield from operation_metrics(ops)


def _crawl_metrics(counters: dict[str, Any]) -> Iterator[Metric]:
    fetched = CounterMetricFamily(
        "srcrawl_crawl_pages_fetched",
        "Pages fetched by the crawl, by HTTP status class",
        labels=["status_class"],
    )
    errors = CounterMetricFamily(
        "srcrawl_crawl_fetch_errors", "Failed fetches of the crawl, by kind", labels=["kind"]
    )
    for name, value in sorted(counters.items()):
        if not isinstance(value, (int, float)):
            continue
        if name.startswith("status_"):
            fetched.add_metric([name[len("status_") :]], value)
        elif name.startswith("error_"):
            errors.add_metric([name[len("error_") :]], value)
    retries = CounterMetricFamily("srcrawl_crawl_fetch_retries", "Fetches tried again")
    retries.add_metric([], counters.get("fetch_retries", 0))
    yield from (fetched, errors, retries)


def _queue_metrics(phases: dict[str, Any]) -> Iterator[Metric]:
    length = GaugeMetricFamily(
        "srcrawl_queue_length", "Messages waiting in a phase's queue", labels=["phase", "queue"]
    )
    in_flight = GaugeMetricFamily(
        "srcrawl_tasks_in_flight", "Tasks taken by workers and not yet answered", labels=["phase"]
    )
    for phase, p in phases.items():
        length.add_metric([phase, "srq"], p["srq"])
        length.add_metric([phase, "nrq"], p["nrq"])
        in_flight.add_metric([phase], p["in_flight"])
    yield from (length, in_flight)


def _store_metrics(store: dict[str, Any]) -> Iterator[Metric]:
    for name, key, text in (
        ("srcrawl_store_pages", "pages", "Pages in the store"),
        ("srcrawl_store_links", "links", "Links in the store"),
        ("srcrawl_store_size_bytes", "size_bytes", "Bytes the store takes"),
        ("srcrawl_index_pages", "indexed", "Pages in the search index"),
        ("srcrawl_rank_pages", "ranked", "Pages with a PageRank score"),
    ):
        g = GaugeMetricFamily(name, text)
        g.add_metric([], store[key])
        yield g
    pages = store["pages"]
    for name, key, text in (
        ("srcrawl_index_progress", "indexed", "Share of the stored pages in the index"),
        ("srcrawl_rank_progress", "ranked", "Share of the stored pages with a PageRank score"),
    ):
        g = GaugeMetricFamily(name, text)
        g.add_metric([], min(1.0, store[key] / pages) if pages else 0.0)
        yield g


def _index_metrics(counters: dict[str, Any]) -> Iterator[Metric]:
    """What the index master records while it follows the crawl (``index --follow``)."""
    docs = GaugeMetricFamily("srcrawl_index_documents", "Documents the index master indexed")
    docs.add_metric([], counters.get("indexed", 0))
    delay = GaugeMetricFamily(
        "srcrawl_index_delay_seconds",
        "Time from a page's fetch to its being searchable",
        labels=["quantile"],
    )
    for q, name in (("0.5", "delay_p50_s"), ("0.95", "delay_p95_s")):
        if isinstance(counters.get(name), (int, float)):
            delay.add_metric([q], counters[name])
    yield from (docs, delay)


def _process_metrics(
    workers: list[dict[str, Any]], others: dict[str, dict[str, Any]]
) -> Iterator[Metric]:
    """Memory, open files and CPU of every live process: those with a worker heartbeat, the
    crawl master and this portal (one series per process: bounded by the processes
    running, gone when one stops)."""
    rss = GaugeMetricFamily(
        "srcrawl_process_resident_memory_bytes", "Resident memory", labels=["process"]
    )
    files = GaugeMetricFamily(
        "srcrawl_process_open_files", "Open file descriptors", labels=["process"]
    )
    cpu = CounterMetricFamily("srcrawl_process_cpu_seconds", "CPU time used", labels=["process"])
    in_flight = GaugeMetricFamily("srcrawl_pages_in_flight", "Fetches a slave has under way")
    pages = 0
    live = [(w["id"], w["stats"]) for w in workers if w["alive"]] + list(others.items())
    for name, s in live:
        rss.add_metric([name], float(s.get("rss_mb", 0)) * 2**20)
        files.add_metric([name], s.get("open_files", 0))
        cpu.add_metric([name], s.get("cpu_s", 0))
        pages += s.get("crawl_in_flight", 0)
    in_flight.add_metric([], pages)
    yield from (rss, files, cpu, in_flight)


def operation_metrics(ops: dict[str, Any]) -> Iterator[Metric]:
    """The counters the processes publish, the frontier by state, Redis and the guards."""
    counted = ops["metrics"]
    yield from _published(counted)
    queues = GaugeMetricFamily(
        "srcrawl_frontier_queues", "Frontier queues (hosts) by state", labels=["state"]
    )
    for state in ("ready", "politeness", "backing_off", "robots_deferred", "in_flight"):
        queues.add_metric([state], ops["frontier"][state])
    hosts = GaugeMetricFamily("srcrawl_hosts_active", "Frontier queues with URLs to fetch")
    f = ops["frontier"]
    hosts.add_metric([], f["ready"] + f["politeness"] + f["backing_off"] + f["in_flight"])
    due = GaugeMetricFamily("srcrawl_recrawl_scheduled_pages", "Stored pages due again")
    due.add_metric([], f["recrawl_scheduled"])
    nxt = GaugeMetricFamily("srcrawl_next_level_urls", "URLs waiting for the next depth level")
    nxt.add_metric([], f["next_level"])
    yield from (queues, hosts, due, nxt)
    yield from _redis_and_guards(ops)


def _family(
    counted: dict[str, float],
    prefix: str,
    name: str,
    text: str,
    label: str,
    known: tuple[str, ...],
) -> CounterMetricFamily:
    """A counter by ``label`` from the fields ``prefix<value>``; the ``known`` values are
    there at 0 before they are first counted (Prometheus's advice for labelled counters)."""
    fam = CounterMetricFamily(name, text, labels=[label])
    values = dict.fromkeys(known, 0.0)
    for k, v in counted.items():
        if k.startswith(prefix):
            values[k[len(prefix) :]] = v
    for value, n in sorted(values.items()):
        fam.add_metric([value], n)
    return fam


def _published(counted: dict[str, float]) -> Iterator[Metric]:
    yield _family(
        counted,
        "fetches:",
        "srcrawl_fetches",
        "HTTP fetches (each try), by status class ('none': no response)",
        "status_class",
        STATUS_CLASSES,
    )
    yield _family(
        counted,
        "fetch_bytes:",
        "srcrawl_fetch_bytes",
        "Body bytes fetched",
        "status_class",
        STATUS_CLASSES,
    )
    yield _family(
        counted,
        "fetch_errors:",
        "srcrawl_fetch_errors",
        "Failed tries, by kind",
        "kind",
        FETCH_ERROR_KINDS,
    )
    yield _family(
        counted,
        "robots_cache:",
        "srcrawl_robots_cache_lookups",
        "robots.txt cache lookups by the slaves",
        "result",
        ROBOTS_LOOKUPS,
    )
    buckets, total = [], 0.0
    for le in (*(f"{b:g}" for b in FETCH_SECONDS_BUCKETS), "+Inf"):
        total += counted.get(f"fetch_seconds_bucket:{le}", 0)
        buckets.append((le, total))
    hist = HistogramMetricFamily("srcrawl_fetch_seconds", "Time one fetch took")
    hist.add_metric([], buckets, counted.get("fetch_seconds_sum", 0.0))
    yield hist
    for name, key, text in (
        ("srcrawl_warc_bytes", "warc_bytes", "Bytes written to WARC files"),
        ("srcrawl_warc_files", "warc_files", "WARC files opened"),
        ("srcrawl_pagerank_runs", "pagerank_runs", "PageRank runs finished"),
        ("srcrawl_pagerank_failed_runs", "pagerank_failed", "PageRank runs that failed"),
    ):
        c = CounterMetricFamily(name, text)
        c.add_metric([], counted.get(key, 0))
        yield c
    last = GaugeMetricFamily("srcrawl_pagerank_last_run_seconds", "How long the last run took")
    last.add_metric([], counted.get("pagerank_last_seconds", 0.0))
    yield last


def _redis_and_guards(ops: dict[str, Any]) -> Iterator[Metric]:
    used = GaugeMetricFamily("srcrawl_redis_used_memory_bytes", "Redis used_memory")
    used.add_metric([], ops["redis"]["used_memory"])
    limit = GaugeMetricFamily("srcrawl_redis_max_memory_bytes", "Redis maxmemory (0: none)")
    limit.add_metric([], ops["redis"]["maxmemory"])
    paused = GaugeMetricFamily(
        "srcrawl_crawl_paused", "1 while a guard holds the crawl", labels=["guard"]
    )
    free = GaugeMetricFamily(
        "srcrawl_disk_free_bytes",
        "Free bytes of a volume the crawl writes to, as the crawl master saw it",
        labels=["volume"],
    )
    for guard in ("disk", "redis_memory"):
        state = ops["guards"].get(guard, {})
        paused.add_metric([guard], 1 if state.get("paused") else 0)
    for volume, n in sorted(ops["guards"].get("disk", {}).get("free", {}).items()):
        free.add_metric([volume], n)
    yield from (used, limit, paused, free)


class PortalMetrics:
    """The portal's own registry: the cluster collector and the search latency histogram."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(ClusterCollector(snapshot))
        self.search_seconds = Histogram(
            "srcrawl_search_seconds",
            "Time one search took in the portal",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe_search(self, seconds: float) -> None:
        self.search_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
