"""``/metrics``: the cluster's counters and the portal's search latency, for Prometheus.

The cluster's numbers are read from Redis and the store at scrape time (a
custom collector), so a scrape shows what ``srcrawl status`` would show then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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


def _crawl_metrics(counters: dict[str, Any]) -> Iterator[Metric]:
    fetched = CounterMetricFamily(
        "srcrawl_crawl_pages_fetched", "Pages fetched by the crawl, by HTTP status class",
        labels=["status_class"],
    )  # fmt: skip
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


class PortalMetrics:
    """The portal's own registry: the cluster collector and the search latency histogram."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(ClusterCollector(snapshot))
        self.search_seconds = Histogram(
            "srcrawl_search_seconds", "Time one search took in the portal",
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip

    def observe_search(self, seconds: float) -> None:
        self.search_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
