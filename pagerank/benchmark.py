"""``srcrawl bench pagerank``: a synthetic power-law web, ranked over Redis.

The graph goes through the normal store path (``put_pages``/``put_links``
in bulk-load mode, then ``load_graph``), and each slave count is timed
beside an in-process scipy.sparse baseline of the same iterations on the
same graph. scipy is imported here only (the ``bench`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from srcrawl.config import Config
from srcrawl.pagerank.errors import PageRankError
from srcrawl.pagerank.graph import Graph, GraphBuilder, distinct_sorted, load_graph
from srcrawl.pagerank.job import local_slaves, rank_graph
from srcrawl.pagerank.master import PHASE, RankParams
from srcrawl.queues.workers import workers
from srcrawl.sql.store import Page, Store

IN_DEGREE_SKEW = 0.9
"""Zipf exponent of link targets: in-degrees follow a power law of tail ~2.1 (web-like)."""
OUT_DEGREE_SKEW = 0.6
"""Zipf exponent of link sources: out-degrees with a tail of ~2.7; some pages link nowhere."""
PAGES_PER_HOST = 1000
"""Synthetic pages per host name."""


@dataclass(frozen=True)
class SyntheticWeb:
    """Pages (fingerprint, host) and links (source id, destination id) of a made-up web."""

    fps: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    @property
    def n(self) -> int:
        return len(self.fps)

    def host(self, i: int) -> str:
        return f"h{i // PAGES_PER_HOST}.bench.test"

    def pages(self, fetched_at: float) -> Iterator[Page]:
        """Every page, in fingerprint order (the store's key order) so inserts append."""
        for i in np.argsort(self.fps).tolist():
            fp, host = int(self.fps[i]), self.host(i)
            yield Page(
                fp=fp, url=f"http://{host}/p{i}", host=host, status=200, fetched_at=fetched_at
            )

    def links(self) -> Iterator[tuple[int, int]]:
        """(source fp, destination fp), in the store's key order so inserts append."""
        s, d = self.fps[self.src], self.fps[self.dst]
        order = np.lexsort((d, s))
        return zip(s[order].tolist(), d[order].tolist(), strict=True)


class _ZipfNodes:
    """Draws nodes with P(node of popularity rank k) ∝ k^-skew (0 < skew < 1).

    Inverse-CDF sampling of the continuous approximation: one power per draw,
    where numpy's choice(p=...) needs a binary search per draw.
    """

    def __init__(self, n: int, skew: float, rng: np.random.Generator) -> None:
        self.n, self.rng, self.a = n, rng, 1.0 - skew
        self.top = (n + 1.0) ** self.a
        self.node_of_rank = rng.permutation(n)  # popularity is unrelated to the id

    def draw(self, size: int) -> np.ndarray:
        u = self.rng.random(size)
        ranks = ((1.0 + u * (self.top - 1.0)) ** (1.0 / self.a)).astype(np.int64) - 1
        return self.node_of_rank[np.minimum(ranks, self.n - 1)]


def synthetic_web(nodes: int, edges: int, *, seed: int = 1) -> SyntheticWeb:
    """``nodes`` pages and ``edges`` distinct links (no self-links) with power-law degrees."""
    if nodes < 2 or edges < 0 or edges > nodes * (nodes - 1) // 4:
        raise PageRankError(
            f"{edges} distinct links between {nodes} pages: use at most a quarter of all pairs"
        )
    rng = np.random.default_rng(seed)
    fps = distinct_sorted(
        np.sort(rng.integers(-(2**63), 2**63 - 1, size=nodes + nodes // 100 + 10))
    )
    fps = rng.permutation(fps)[:nodes]
    sources = _ZipfNodes(nodes, OUT_DEGREE_SKEW, rng)
    targets = _ZipfNodes(nodes, IN_DEGREE_SKEW, rng)
    keys = np.empty(0, dtype=np.int64)
    while len(keys) < edges:
        want = int((edges - len(keys)) * 1.2) + 16
        s, d = sources.draw(want), targets.draw(want)
        keys = distinct_sorted(np.sort(np.concatenate([keys, s[s != d] * nodes + d[s != d]])))
    # drop a random surplus; what stays is still sorted by (source, destination)
    keys = np.delete(keys, rng.choice(len(keys), len(keys) - edges, replace=False))
    return SyntheticWeb(fps, (keys // nodes).astype(np.int32), (keys % nodes).astype(np.int32))


def write_web(store: Store, web: SyntheticWeb) -> None:
    """Store the pages and links through the normal write path, in bulk-load mode."""
    with store.bulk_load():
        store.put_pages(web.pages(time.time()))
        store.put_links(web.links())


class ScipyBaseline:
    """The same iterations in one process with scipy.sparse: the figure to beat."""

    def __init__(self, graph: Graph) -> None:
        from scipy import sparse  # the bench extra; the product needs numpy only

        n = graph.n
        inv_out = np.zeros(n)
        np.divide(1.0, graph.outdeg, out=inv_out, where=graph.outdeg > 0)
        self.n = n
        self.dangling = np.flatnonzero(graph.outdeg == 0)
        self.matrix = sparse.csr_matrix((inv_out[graph.src], (graph.dst, graph.src)), shape=(n, n))

    def run(self, params: RankParams) -> tuple[np.ndarray, list[float]]:
        """(ranks, seconds of each iteration)."""
        d, n = params.damping, self.n
        rank = np.full(n, 1.0 / n)
        seconds = []
        for _ in range(params.iterations):
            t0 = time.perf_counter()
            new = d * (self.matrix @ rank) + (d * rank[self.dangling].sum() + 1.0 - d) / n
            delta = float(np.abs(new - rank).sum())
            rank = new
            seconds.append(time.perf_counter() - t0)
            if delta < params.tol:
                break
        return rank, seconds


@dataclass
class SlaveRun:
    slaves: int
    seconds: list[float]
    l1_vs_baseline: float

    @property
    def per_iteration(self) -> float:
        return sum(self.seconds) / len(self.seconds)


@dataclass
class PageRankBenchmark:
    nodes: int
    edges: int
    dangling: int
    generate_s: float
    store_write_s: float
    load_s: float
    baseline: list[float]
    runs: list[SlaveRun] = field(default_factory=list)

    def render(self) -> str:
        base = sum(self.baseline) / len(self.baseline)
        lines = [
            f"pagerank benchmark: {self.nodes:,} pages, {self.edges:,} links "
            f"({self.dangling:,} pages without out-links), {len(self.baseline)} iterations",
            f"  generate graph       {self.generate_s:8.2f} s",
            f"  store write          {self.store_write_s:8.2f} s  (put_pages + put_links)",
            f"  graph load           {self.load_s:8.2f} s  (store -> compact ids -> CSR)",
            f"  {'slaves':>6} {'s/iteration':>12} {'× baseline':>11} {'median':>8} "
            f"{'first':>7} {'total':>7} {'L1 vs baseline':>15}",
            _row("scipy", self.baseline, base, "-"),
        ]
        lines += [
            _row(str(r.slaves), r.seconds, base, f"{r.l1_vs_baseline:.2e}") for r in self.runs
        ]
        return "\n".join(lines)


def _row(name: str, seconds: list[float], base: float, l1: str) -> str:
    mean = sum(seconds) / len(seconds)
    return (
        f"  {name:>6} {mean:12.4f} {mean / base:11.2f} {float(np.median(seconds)):8.4f} "
        f"{seconds[0]:7.3f} {sum(seconds):7.2f} {l1:>15}"
    )


def _wait_for_slaves(cfg: Config, n: int, timeout: float = 60.0) -> None:
    srq = cfg.keys.srq(PHASE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = sum(w.alive and srq in w.queues for w in workers(cfg.redis(), cfg.keys))
        if live >= n:
            return
        time.sleep(0.1)
    raise PageRankError(f"{n} local slaves did not come up within {timeout:.0f} s")


def run_pagerank_benchmark(
    cfg: Config,
    *,
    nodes: int,
    edges: int,
    slave_counts: Sequence[int],
    iterations: int,
    seed: int = 1,
    echo: Callable[[str], None] = lambda line: None,
) -> PageRankBenchmark:
    """Generate, store and load a synthetic web, then time the iterations per slave count.

    The store must hold no pages: the synthetic web stays in it afterwards.
    """
    store = cfg.store()
    held = store.count("pages")
    if held:
        raise PageRankError(
            f"the store holds {held} pages; the benchmark writes its own web into an empty "
            "store (use --home or --db-url to point at a scratch one)"
        )
    t0 = time.perf_counter()
    web = synthetic_web(nodes, edges, seed=seed)
    t1 = time.perf_counter()
    echo(f"generated {web.n:,} pages, {len(web.src):,} links in {t1 - t0:.2f} s")
    write_web(store, web)
    t2 = time.perf_counter()
    echo(f"store write {t2 - t1:.2f} s")
    graph = load_graph(store)
    t3 = time.perf_counter()
    echo(f"graph load {t3 - t2:.2f} s")
    params = RankParams(iterations=iterations)
    baseline_ranks, baseline = ScipyBaseline(graph).run(params)
    echo(f"scipy baseline {sum(baseline) / len(baseline):.4f} s/iteration")
    result = PageRankBenchmark(
        nodes=graph.n,
        edges=graph.m,
        dangling=int((graph.outdeg == 0).sum()),
        generate_s=t1 - t0,
        store_write_s=t2 - t1,
        load_s=t3 - t2,
        baseline=baseline,
    )
    for count in slave_counts:
        with local_slaves(cfg, count) as slaves:
            _wait_for_slaves(cfg, count)
            run = rank_graph(cfg, graph, params, slaves=slaves)
        seconds = [r.seconds for r in run.reports]
        l1 = float(np.abs(run.ranks - baseline_ranks).sum())
        result.runs.append(SlaveRun(count, seconds, l1))
        echo(f"{count} slaves: {sum(seconds) / len(seconds):.4f} s/iteration")
    return result


def graph_of(web: SyntheticWeb) -> Graph:
    """The graph of a synthetic web without the store (for timing the iterations alone)."""
    builder = GraphBuilder(web.fps)
    builder.add(np.stack([web.fps[web.src], web.fps[web.dst]], axis=1))
    return builder.build()
