"""``srcrawl bench pagerank``: a synthetic power-law web, ranked over Redis.

The graph goes through the normal store path (``put_pages``/``put_links``
in bulk-load mode, then ``load_graph``), and each slave count is timed
beside an in-process scipy.sparse baseline of the same iterations on the
same graph. scipy is imported here only (the ``bench`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from srcrawl.app.local import LocalSlaves
from srcrawl.app.runner import PhaseRun
from srcrawl.benchmarks.scaling import Column, Row, ScalingResult
from srcrawl.pagerank.errors import PageRankError
from srcrawl.pagerank.graph import Graph, GraphBuilder, distinct_sorted, load_graph
from srcrawl.pagerank.job import rank_graph
from srcrawl.pagerank.master import PHASE, RankParams, RankResult
from srcrawl.queues.workers import workers
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page
from srcrawl.sql.store import Store
from srcrawl.testweb.loadgen import process_cpu_seconds

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


def _wait_for_slaves(cfg: Config, n: int, timeout: float = 60.0) -> None:
    srq = cfg.keys.srq(PHASE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = sum(w.alive and srq in w.queues for w in workers(cfg.redis(), cfg.keys))
        if live >= n:
            return
        time.sleep(0.1)
    raise PageRankError(f"{n} local slaves did not come up within {timeout:.0f} s")


def _cpu_of(slaves: LocalSlaves | None) -> float | None:
    """CPU seconds this process and its slave processes used so far (None without /proc)."""
    total = time.process_time()
    for proc in slaves.procs if slaves is not None else []:
        cpu = process_cpu_seconds(proc.pid)
        if cpu is None:
            return None
        total += cpu
    return total


def run_pagerank_benchmark(
    cfg: Config,
    *,
    nodes: int,
    edges: int,
    slave_counts: Sequence[int],
    iterations: int,
    seed: int = 1,
    echo: Callable[[str], None] = lambda line: None,
    progress: Callable[[str], None] = lambda line: None,
) -> ScalingResult:
    """Generate, store and load a synthetic web, then time the iterations per slave count.

    The store must hold no pages: the synthetic web stays in it afterwards.
    ``echo`` gets the steps, ``progress`` one line per iteration.
    """
    store = cfg.store()
    held = store.count("pages")
    if held:
        raise PageRankError(
            f"the store holds {held} pages; the benchmark writes its own web into an empty "
            "store (use --home or --db-url to point at a scratch one)"
        )
    graph, steps = _stored_graph(store, nodes, edges, seed, echo)
    params = RankParams(iterations=iterations)
    scipy_run = ScipyBaseline(graph)
    baseline_cpu0 = time.process_time()
    baseline_ranks, baseline = scipy_run.run(params)
    baseline_cpu = time.process_time() - baseline_cpu0
    base = sum(baseline) / len(baseline)
    echo(f"scipy baseline {base:.4f} s/iteration")
    parameters = {
        "nodes": nodes,
        "edges": edges,
        "slaves": list(slave_counts),
        "iterations": iterations,
        "seed": seed,
    }
    result = _pagerank_table(graph, steps, len(baseline), parameters)
    result.rows.append(
        Row(
            None,
            len(baseline),
            sum(baseline),
            baseline_cpu,
            label="scipy",
            extra=_iteration_columns(baseline, base),
        )
    )
    for count in slave_counts:
        run, cpu = _rank_with_slaves(cfg, graph, params, count, progress)
        row = _slaves_row(count, run, cpu, base, baseline_ranks)
        result.rows.append(row)
        echo(
            f"{count} slaves: {row.extra['s_per_iteration']:.4f} s/iteration"
            + (f" after a {run.load.seconds:.3f} s shard load" if run.load else "")
        )
    return result


def _stored_graph(
    store: Store, nodes: int, edges: int, seed: int, echo: Callable[[str], None]
) -> tuple[Graph, tuple[float, float, float]]:
    """The synthetic web generated, written to the store and loaded back as a graph.

    Also the seconds of the three steps: generate, store write, graph load.
    """
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
    return graph, (t1 - t0, t2 - t1, t3 - t2)


def _rank_with_slaves(
    cfg: Config, graph: Graph, params: RankParams, count: int, progress: Callable[[str], None]
) -> tuple[RankResult, float | None]:
    """Rank ``graph`` with ``count`` local slaves; the run and the CPU seconds it took."""
    with PhaseRun(cfg, "pagerank", count) as phase_run:
        slaves = phase_run.slaves if count > 0 else None
        _wait_for_slaves(cfg, count)
        cpu0 = _cpu_of(slaves)

        def line(text: str) -> None:
            if text.startswith("iteration"):
                progress(f"{count} slave(s): {text}")

        run = rank_graph(cfg, graph, params, slaves=slaves, echo=line)
        cpu1 = _cpu_of(slaves)
    return run, cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None


def _slaves_row(
    count: int, run: RankResult, cpu: float | None, base: float, baseline_ranks: np.ndarray
) -> Row:
    """The row of a run with ``count`` slaves, beside the baseline's seconds and ranks."""
    seconds = [r.seconds for r in run.reports]
    extra = _iteration_columns(seconds, base)
    extra["l1_vs_baseline"] = float(np.abs(run.ranks - baseline_ranks).sum())
    if run.load is not None:
        extra["publish_s"] = run.load.publish_seconds
        extra["shard_load_s"] = run.load.seconds
        extra["shards_loaded"] = run.load.loaded
    return Row(count, len(seconds), sum(seconds), cpu, extra=extra)


def _pagerank_table(
    graph: Graph, steps: tuple[float, float, float], iterations_run: int, parameters: dict
) -> ScalingResult:
    """The table of a PageRank benchmark: title, parameters, the preparation's steps, columns."""
    generate_s, write_s, load_s = steps
    dangling = int((graph.outdeg == 0).sum())
    return ScalingResult(
        bench="pagerank",
        title=f"pagerank benchmark: {graph.n:,} pages, {graph.m:,} links "
        f"({dangling:,} pages without out-links), {iterations_run} iterations",
        unit="iterations",
        per="iteration",
        parameters={
            **parameters,
            "dangling": dangling,
            "generate_s": generate_s,
            "store_write_s": write_s,
            "load_s": load_s,
        },
        head=[
            f"  generate graph       {generate_s:8.2f} s",
            f"  store write          {write_s:8.2f} s  (put_pages + put_links)",
            f"  graph load           {load_s:8.2f} s  (store -> compact ids -> CSR)",
        ],
        columns=[
            Column("publish_s", "publish s", ".2f"),
            Column("shard_load_s", "shard load s", ".3f"),
            Column("s_per_iteration", "s/iteration", ".4f"),
            Column("x_baseline", "× baseline", ".2f"),
            Column("median_s", "median s", ".4f"),
            Column("first_s", "first s", ".3f"),
            Column("l1_vs_baseline", "L1 vs baseline", ".2e"),
        ],
        notes=[
            "  once per run, before the first iteration: publish (the master writes the "
            "shards to Redis), shard load (the slaves read them: the load round)",
            "  seconds: the iterations' sum; CPU: this process (the master, or scipy) and "
            "the slave processes over the whole run, publish and shard load included",
        ],
    )


def _iteration_columns(seconds: list[float], base: float) -> dict[str, float]:
    mean = sum(seconds) / len(seconds)
    return {
        "x_baseline": mean / base if base else 0.0,
        "median_s": float(np.median(seconds)),
        "first_s": seconds[0],
        "s_per_iteration": mean,
    }


def graph_of(web: SyntheticWeb) -> Graph:
    """The graph of a synthetic web without the store (for timing the iterations alone)."""
    builder = GraphBuilder(web.fps)
    builder.add(np.stack([web.fps[web.src], web.fps[web.dst]], axis=1))
    return builder.build()
