"""srcrawl on a real Redis Cluster (3 primaries, 3 replicas): crawl, index, PageRank, search."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from redis.cluster import RedisCluster

from srcrawl.core.errors import ConfigError
from srcrawl.core.redis_connect import connect
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb

from .test_crawl import (  # noqa: F401
    DEPTH,
    POLITE,
    background_crawl,
    env_for,
    expected,
    srcrawl,
    stored,
    web,
)


@pytest.mark.slow
def test_a_cluster_url_gives_a_cluster_client(redis_cluster) -> None:
    client = connect(redis_cluster.url)
    assert isinstance(client, RedisCluster)
    # a job's keys share a hash tag, so its transactions and scripts run on one node
    with client.pipeline(transaction=True) as pipe:
        pipe.set("srcrawl:{j}:a", 1).incr("srcrawl:{j}:b").execute()
    assert client.mget("srcrawl:{j}:a", "srcrawl:{j}:b") == [b"1", b"1"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+cluster://", "bad cluster node"),
        ("redis+cluster://a:1,b", "bad cluster node"),
        ("redis+cluster://a:1?ssl_ca_certs=x", "TLS option"),
    ],
)
def test_a_malformed_cluster_url_is_named(url, message) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.load(redis_url=url, env={})


def test_an_unreachable_cluster_is_a_clear_error(tmp_path) -> None:
    cfg = Config.load(redis_url="redis+cluster://127.0.0.1:1", env={}, home=str(tmp_path))
    with pytest.raises(ConfigError, match=r"cannot reach Redis at redis\+cluster://127\.0\.0\.1:1"):
        cfg.redis()


@pytest.mark.slow
def test_crawl_index_rank_and_search_on_a_cluster(web, redis_cluster, keys, tmp_path):  # noqa: F811
    env = env_for(redis_cluster.url, keys.job, tmp_path)
    seeds = web.seed_urls
    r = srcrawl(["crawl", *seeds, "--depth", str(DEPTH), "--slaves", "2", *POLITE], env)
    assert r.returncode == 0, r.stderr[-3000:]
    pages = stored(env)
    assert {p["url"]: p["depth"] for p in pages} == expected(web, seeds, DEPTH)
    assert len({p["url"] for p in pages}) == len(pages)
    r = srcrawl(["index", "--slaves", "2", "--json"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["indexed"] > 0
    r = srcrawl(["pagerank", "--iterations", "10", "--slaves", "2"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    r = srcrawl(["status", "--json"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    # the whole job lives in its hash tag's slot: one primary holds every key
    held = redis_cluster.keys_by_primary(f"srcrawl:{{{keys.job}}}*")
    assert sorted(held.values())[:2] == [0, 0] and max(held.values()) > 0


@contextlib.contextmanager
def redis_cluster_stopped(cluster):
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.slow
def test_the_crawl_survives_the_death_of_its_primary(keys, tmp_path) -> None:
    from srcrawl.lab.testcluster import RedisClusterProcesses

    redis_cluster = RedisClusterProcesses(tmp_path / "cluster").start()  # its own: one dies
    with (
        redis_cluster_stopped(redis_cluster),
        TestWeb.generate(hosts=3, pages=20, seed=13, latency_ms=30) as tw,
    ):
        seeds = tw.seed_urls
        env = env_for(redis_cluster.url, keys.job, tmp_path)
        crawl = background_crawl(seeds, env)
        try:
            victim = redis_cluster.primary_of(keys.crawl_state)
            client = Config.load(env=env).redis()
            deadline = time.monotonic() + 60
            while int(client.hget(keys.stats("crawl"), "pages") or 0) < 10:
                assert time.monotonic() < deadline and crawl.poll() is None, crawl.stderr.read()
                time.sleep(0.05)
            redis_cluster.kill(victim)
            _, err = crawl.communicate(timeout=240)
        finally:
            if crawl.poll() is None:
                crawl.kill()
        assert crawl.returncode == 0, err[-3000:]
        assert redis_cluster.primary_of(keys.crawl_state) != victim  # its replica took over
        pages = stored(env)
        assert {p["url"]: p["depth"] for p in pages} == expected(tw, seeds, DEPTH)
        assert len({p["url"] for p in pages}) == len(pages)


@pytest.mark.slow
def test_a_crawl_of_eight_partitions_spreads_over_the_primaries(redis_cluster, keys, tmp_path):
    from .test_partitions import DEPTH as PARTITIONED_DEPTH
    from .test_partitions import crawl_shared_by_two_masters

    with TestWeb.generate(hosts=8, pages=15, seed=11) as tw:
        # two masters share the 8 partitions; one is SIGKILLed and the other takes its four
        _, pages = crawl_shared_by_two_masters(tw, redis_cluster.url, keys, tmp_path, 8)
        want = expected(tw, tw.seed_urls, PARTITIONED_DEPTH)
        assert {p["url"]: p["depth"] for p in pages} == want
        assert len({p["url"] for p in pages}) == len(pages)
        # each partition's keys carry its own tag: the job's crawl is on every primary
        held = redis_cluster.keys_by_primary(f"srcrawl:{{{keys.job}/*")
        assert len(held) == 3 and min(held.values()) > 0, held
