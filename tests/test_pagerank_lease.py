"""The PageRank master's lease: a master that lost it commits nothing more."""

from __future__ import annotations

import pytest

from srcrawl.core.errors import LeaseLost
from srcrawl.pagerank.graph import load_graph
from srcrawl.pagerank.master import RankMaster, RankParams
from srcrawl.pagerank.shards import cut_shards
from srcrawl.queues.protocol import PhaseQueues
from tests.test_pagerank import (
    l1,
    networkx_ranks,
    put_web,
    random_web,
    sqlite_cfg,
    thread_slaves,
)

pytestmark = pytest.mark.slow  # every test here runs for more than a second


def test_a_master_that_lost_its_lease_offers_and_closes_nothing(
    redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    pages, links = random_web(3_000, seed=5)
    put_web(cfg.store(), pages, links)
    graph = load_graph(cfg.store())
    shards = cut_shards(graph.src, graph.dst, graph.n, 4)
    params = RankParams(iterations=6)
    lease = keys.master_lease("pagerank")
    q = PhaseQueues(redis_client, keys, "pagerank")
    seen: dict = {}

    def taken_over(report) -> None:
        if report.iteration == 2:
            # as if this master had stalled past its TTL and a successor took over
            redis_client.set(lease, "successor", px=60_000)
            seen["tasks"] = len(q.srq)

    with thread_slaves(cfg, 2):
        stale = RankMaster(redis_client, keys, on_iteration=taken_over)
        with pytest.raises(LeaseLost, match="successor holds it now"):
            stale.run(graph, shards, params)
        # the third iteration was never offered, and the successor's queues and
        # lease were left alone
        assert len(q.srq) == seen["tasks"] == 0
        assert not redis_client.exists(keys.rank_unclaimed(1, 3))
        assert redis_client.get(lease) == b"successor"
        redis_client.delete(lease)
        result = RankMaster(redis_client, keys).run(graph, shards, RankParams(500, tol=1e-13))
    assert l1(result, networkx_ranks(pages, links)) <= 1e-6
    cfg.close()
