"""The whole pagerank phase of a job: store → graph → iterations → store."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from srcrawl.core.defaults import DEFAULT_PAGERANK_SHARD_EDGES
from srcrawl.pagerank.errors import PageRankError
from srcrawl.pagerank.graph import Graph, load_graph
from srcrawl.pagerank.master import (
    PHASE,
    IterationReport,
    LoadReport,
    RankMaster,
    RankParams,
    RankResult,
)
from srcrawl.pagerank.shards import cut_shards, shard_count
from srcrawl.settings.config import Config


class SlaveProcesses(Protocol):
    """Slave processes this run started (see ``srcrawl.app.runner.PhaseRun``)."""

    def alive(self) -> int:
        """How many are still running."""
        ...


@dataclass(frozen=True)
class RankOptions:
    """What ``srcrawl pagerank`` was asked for, beside the iteration parameters."""

    skip_internal: bool = False
    """Ignore links between two pages of one host."""
    shards: int | None = None
    """Number of shards; None: about DEFAULT_PAGERANK_SHARD_EDGES edges each."""


def rank_graph(
    cfg: Config,
    graph: Graph,
    params: RankParams,
    *,
    shards: int | None = None,
    slaves: SlaveProcesses | None = None,
    echo: Callable[[str], None] = lambda line: None,
    stopping: threading.Event | None = None,
) -> RankResult:
    """Iterate ``graph`` over the job's queues; with ``slaves``, give up if they all exit;
    with ``stopping`` set, stop waiting out a Redis outage (RankMaster)."""
    count = shards or shard_count(graph.m, graph.n, DEFAULT_PAGERANK_SHARD_EDGES)
    cut = cut_shards(graph.src, graph.dst, graph.n, count)

    def report(r: IterationReport) -> None:
        echo(f"iteration {r.iteration:3d}  L1 change {r.delta:.6e}  {r.seconds:7.3f} s")

    def loaded(r: LoadReport) -> None:
        rest = "" if r.loaded == r.shards else f" (the other {r.shards - r.loaded} as claimed)"
        echo(
            f"shard load: {r.shards} shard{'s' if r.shards != 1 else ''} to Redis in "
            f"{r.publish_seconds:.2f} s, "
            f"{r.loaded} loaded by the slaves in {r.seconds:.2f} s{rest}"
        )

    master = RankMaster(
        cfg.redis(),
        cfg.keys,
        lease_ttl=cfg.lease_ttl,
        on_iteration=report,
        on_load=loaded,
        on_wait=echo,
        slaves_alive=(lambda: slaves.alive() > 0) if slaves else None,
        stopping=stopping,
    )
    return master.run(graph, cut, params)


def rank_job(
    cfg: Config,
    params: RankParams,
    options: RankOptions,
    *,
    slaves: SlaveProcesses | None = None,
    echo: Callable[[str], None] = lambda line: None,
    stopping: threading.Event | None = None,
) -> RankResult:
    """Rank every stored page and replace the store's ranks with the result.

    With ``slaves`` (local slave processes, started before the graph is
    read so that they are up when it is), give up once they have all exited.
    """
    store = cfg.store()
    store.set_job(cfg.job, PHASE, "running", started_at=time.time())
    try:
        t0 = time.perf_counter()
        graph = load_graph(store, skip_internal=options.skip_internal)
        if graph.n == 0:
            raise PageRankError("the store holds no pages: crawl some first")
        dangling = int((graph.outdeg == 0).sum())
        echo(
            f"graph: {graph.n} pages, {graph.m} links, {dangling} without out-links "
            f"(read in {time.perf_counter() - t0:.2f} s)"
        )
        result = rank_graph(
            cfg,
            graph,
            params,
            shards=options.shards,
            slaves=slaves,
            echo=echo,
            stopping=stopping,
        )
        t1 = time.perf_counter()
        written = store.replace_ranks(zip(result.fps.tolist(), result.ranks.tolist(), strict=True))
        echo(f"ranks of {written} pages written to the store in {time.perf_counter() - t1:.2f} s")
    except BaseException:
        with contextlib.suppress(Exception):  # the failure itself matters more
            store.set_job(cfg.job, PHASE, "failed", finished_at=time.time())
        raise
    last = result.reports[-1]
    stats = {
        "pages": graph.n,
        "links": graph.m,
        "iterations": last.iteration,
        "l1_change": last.delta,
        "converged": result.converged,
        "requeued": result.requeued,
    }
    store.set_job(cfg.job, PHASE, "complete", stats, finished_at=time.time())
    return result
