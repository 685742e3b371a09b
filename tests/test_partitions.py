"""A crawl partitioned by host hash (``--partitions``): keys, routing, masters sharing them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from srcrawl.core.keys import Keys
from srcrawl.queues.partitions import (
    host_hash,
    partition_keys,
    partition_of_host,
    partition_of_url,
    range_of,
)
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.testweb.accesslog import overlaps

from .conftest import logged_requests
from .test_crawl import POLITE, env_for, expected, srcrawl, stored

DEPTH = 4


def test_hosts_fall_in_the_range_of_their_partition() -> None:
    hosts = [f"h{i}.example:80{i % 10}" for i in range(2000)]
    for n in (1, 2, 3, 8, 1024):
        counts = [0] * n
        for h in hosts:
            p = partition_of_host(h, n)
            low, high = range_of(p, n)
            assert low <= host_hash(h) < high
            counts[p] += 1
        if n <= 8:  # a 64-bit hash spreads hosts evenly
            assert min(counts) > len(hosts) / n * 0.8
    assert range_of(0, 4)[0] == 0 and range_of(3, 4)[1] == 1 << 64
    # a URL belongs to its host's partition, whatever its path
    assert partition_of_url("http://a.example/x", 8) == partition_of_url("http://a.example/y", 8)


def test_partition_keys_carry_a_tag_each_and_share_the_job_keys() -> None:
    job = Keys("j")
    assert job.partition(0, 1) == job  # one partition: the job's own keys, as before
    parts = job.partitions(3)
    assert [k.crawl_ready for k in parts] == [f"srcrawl:{{j/{p}}}:crawl:ready" for p in range(3)]
    assert {k.nrq("crawl") for k in parts} == {f"srcrawl:{{j/{p}}}:crawl:nrq" for p in range(3)}
    for k in parts:  # what the whole job shares keeps the job's tag
        assert k.crawl_strategy == job.crawl_strategy
        assert k.workers == job.workers and k.robots("x") == job.robots("x")
    with pytest.raises(ValueError):
        job.partition(3, 3)


@pytest.fixture(scope="module")
def web8(tmp_path_factory):
    log = tmp_path_factory.mktemp("web8") / "access.jsonl"
    with TestWeb.generate(hosts=8, pages=15, seed=11, access_log=log, crawl_delay=0.1) as tw:
        yield tw


@pytest.mark.slow
def test_a_partitioned_crawl_fetches_exactly_the_reachable_set(web8, redis_url, keys, tmp_path):
    seeds = web8.seed_urls
    env = env_for(redis_url, keys.job, tmp_path)
    t0 = time.monotonic()
    r = srcrawl(
        ["crawl", *seeds, "--depth", str(DEPTH), "--slaves", "2", "--partitions", "4", *POLITE], env
    )
    assert r.returncode == 0, r.stderr[-3000:]
    pages = stored(env)
    urls = [p["url"] for p in pages]
    assert len(urls) == len(set(urls))
    assert {p["url"]: p["depth"] for p in pages} == expected(web8, seeds, DEPTH)
    summary = json.loads(r.stdout)
    assert summary["pages"] == len(pages) and summary["queued"] == 0
    cfg = Config.load(env=env)
    client = cfg.redis()
    parts = partition_keys(client, cfg.keys)
    assert len(parts) == 4
    # every partition did its hosts' share (which hosts a partition holds hangs on the
    # web's ports, drawn free for each run)
    per_part = [int(client.hget(k.stats("crawl"), "pages") or 0) for k in parts]
    owned = Counter(partition_of_url(p["url"], 4) for p in pages)
    assert per_part == [owned[i] for i in range(4)] and sum(1 for n in per_part if n) >= 2
    forwarded = sum(int(client.hget(k.stats("crawl"), "links_forwarded") or 0) for k in parts)
    assert forwarded == 0  # the slaves routed every page link to its owner themselves
    r = srcrawl(["status", "--json"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    snapshot = json.loads(r.stdout)
    assert [p["partition"] for p in snapshot["partitions"]] == [0, 1, 2, 3]
    assert snapshot["phases"]["crawl"]["counters"]["pages"] == len(pages)
    assert "crawl partitions: 4" in srcrawl(["status"], env).stdout
    entries = [e for e in logged_requests(web8) if e["start_mono"] >= t0 - 1]
    assert entries and overlaps(entries) == []  # still one request at a time per host
    cfg.close()


def _master(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "srcrawl.app.cli", "master", "start"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _slave(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "slave",
            "start",
            "--phases",
            "crawl",
            "--burst",
            "--threads",
            "4",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _leases_by_process(client, parts: list[Keys]) -> dict[str, int]:
    held: dict[str, int] = {}
    for k in parts:
        h = client.get(k.master_lease("crawl"))
        if h is not None:  # a lease names its holder's host and pid first
            process = ":".join(h.decode().split(":")[:2])
            held[process] = held.get(process, 0) + 1
    return held


def _split_in_two(cfg: Config, parts: list[Keys], partitions: int) -> bool:
    half = [partitions // 2] * 2
    recorded = cfg.redis().hgetall(cfg.keys.crawl_assignment)
    recorded.pop(b"version", None)
    return (
        sorted(_leases_by_process(cfg.redis(), parts).values()) == half
        and sorted(Counter(recorded.values()).values()) == half
    )


def crawl_shared_by_two_masters(
    tw: TestWeb, redis_url: str, keys: Keys, tmp_path, partitions: int
) -> tuple[dict[str, str], list[dict]]:
    """Two `master start` processes and four burst slaves crawl ``tw`` in ``partitions``;
    once the masters hold half each, the first is SIGKILLed. Returns the env and pages."""
    from srcrawl.master.commands import strategy_from
    from srcrawl.master.crawl_run import start_crawl

    env = {**env_for(redis_url, keys.job, tmp_path), "SRCRAWL_LEASE_TTL": "2"}
    cfg = Config.load(env=env)
    opts = {
        "max_depth": DEPTH,
        "delay": 0.05,
        "delay_factor": 0,
        "max_delay": 1,
        "fetch_timeout": 1,
        "robots_defer": 0.3,
        "partitions": partitions,
    }
    start_crawl(cfg, tw.seed_urls, strategy_from(opts))
    first, second = _master(env), _master(env)
    slaves = [_slave(env) for _ in range(4)]
    parts = keys.partitions(partitions)
    try:
        deadline = time.monotonic() + 30
        # half each, by lease and by recorded assignment (a master records a partition
        # just after taking its lease: killed between the two, one take goes unrecorded)
        while not _split_in_two(cfg, parts, partitions):
            assert time.monotonic() < deadline, _leases_by_process(cfg.redis(), parts)
            time.sleep(0.1)
        first.send_signal(signal.SIGKILL)  # its partitions wait out their lease, then move
        first.wait()
        _, err = second.communicate(timeout=150)
        assert second.returncode == 0, err[-3000:]
    finally:
        for p in (first, second, *slaves):
            if p.poll() is None:
                p.kill()
    cfg.close()
    return env, stored(env)


@pytest.mark.slow
def test_two_masters_share_partitions_and_one_killed_is_taken_over(web8, redis_url, keys, tmp_path):
    env, pages = crawl_shared_by_two_masters(web8, redis_url, keys, tmp_path, 6)
    assert len({p["url"] for p in pages}) == len(pages)
    snapshot = json.loads(srcrawl(["status", "--json"], env).stdout)
    # six takes at least, then the survivor's three: every partition is its now
    assert snapshot["assignment_version"] >= 9
    assert len({p["assigned_to"] for p in snapshot["partitions"]}) == 1
    assert {p["url"]: p["depth"] for p in pages} == expected(web8, web8.seed_urls, DEPTH)


def test_a_loaded_master_gives_the_split_share_to_the_least_loaded() -> None:
    from srcrawl.master.partitioned import share_to_give

    # K = 8000 / 1000 = 8: p = 1/2 - 1/16 = 0.4375 of 8000 = 3500 URLs move
    mine = {0: 3000, 1: 2500, 2: 1500, 3: 1000}
    give = share_to_give(mine, 1000, 2.0)
    assert give == [0]  # 3000 fits within 3500; adding 2500 would not
    moved = sum(mine[p] for p in give)
    assert abs((8000 - moved) - (1000 + moved)) < 8000 - 1000  # closer to even than before
    # within the threshold ratio nothing moves; one partition is never given away
    assert share_to_give({0: 1500, 1: 500}, 1000, 2.0) == []
    assert share_to_give({0: 9000}, 0, 2.0) == []
    # nothing fits the share: the smallest partition moves
    assert share_to_give({0: 5000, 1: 4000}, 100, 2.0) == [1]
    # an idle other (load 0) gets half
    assert share_to_give({0: 500, 1: 500, 2: 500, 3: 500}, 0, 2.0) == [0, 1]


def test_seeds_go_to_the_nrq_of_their_hosts_partitions(redis_url, keys, tmp_path) -> None:
    from srcrawl.master.crawl_run import add_seeds, start_crawl
    from srcrawl.queues.crawl_protocol import read_outcome
    from srcrawl.queues.crawl_strategy import CrawlStrategy

    cfg = Config.load(env=env_for(redis_url, keys.job, tmp_path))
    seeds = [f"http://h{i}.example:8080/" for i in range(12)]
    start_crawl(cfg, seeds[:6], CrawlStrategy(partitions=3))
    add_seeds(cfg, seeds[6:])
    client = cfg.redis()
    got: dict[int, set[str]] = {}
    for p, k in enumerate(keys.partitions(3)):
        for raw in client.lrange(k.nrq("crawl"), 0, -1):
            got.setdefault(p, set()).update(url for url, _ in read_outcome(raw).urls)
    assert set().union(*got.values()) == set(seeds)
    for p, urls in got.items():
        assert all(partition_of_url(u, 3) == p for u in urls)
    assert client.llen(keys.nrq("crawl")) == 0  # the job's own nrq is not a partition's
    cfg.close()


@pytest.mark.slow
def test_the_master_benchmark_times_masters_sharing_queued_urls(redis_url, keys, tmp_path):
    """`bench master --partitions --masters`, small: every URL is scheduled by masters
    that were stopped while the URLs were queued, and the crawl is reset after."""
    from srcrawl.benchmarks.master_partitions import render, run_partition_benchmark

    cfg = Config.load(env=env_for(redis_url, keys.job, tmp_path))
    runs = run_partition_benchmark(cfg, [2], [1, 2], urls=3000, hosts=40)
    assert [(r.partitions, r.masters, r.urls) for r in runs] == [(2, 1, 3000), (2, 2, 3000)]
    assert all(r.rate > 0 and r.cpu_s > 0 and r.redis_cpu_s >= 0 for r in runs)
    assert "× 1 master" in render(runs)
    assert not cfg.redis().keys("srcrawl:{bench-partitions-*")  # each run's crawl is reset
    cfg.close()
