"""Operating a crawl: the cluster's metrics on the portal's ``/metrics``, and the guards
that pause it on low disk or high Redis memory and resume it with nothing lost.

Real parts throughout: `srcrawl crawl` in its own process, a Redis server, the SQLite
store, the test web on loopback, the portal served
by uvicorn.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from srcrawl.core.keys import Keys
from srcrawl.core.telemetry import Telemetry
from srcrawl.core.urls import host_of
from srcrawl.portal.server import build_portal, serving_in_thread
from srcrawl.queues import crawl_strategy
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.warc.storage import WARC_SUFFIX

from .conftest import cli_env, run_cli, stored_pages

DEPTH = 3
FAST = [
    "--delay",
    "0.05",
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    "1",
    "--robots-defer",
    "0.3",
    "--retry-backoff",
    "0.1",
]


@pytest.fixture(scope="module")
def web():
    with TestWeb.generate(hosts=3, pages=25, seed=11, slow_seconds=3) as tw:
        yield tw


def expected(tw: TestWeb, seeds: list[str], depth: int) -> dict[str, int]:
    scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=depth))
    return tw.web.expected_crawl(seeds, depth, lambda url: scope.reject(url, 0) is None)


def scrape(url: str) -> dict[str, float]:
    """``/metrics`` as {name{labels}: value} (histogram buckets keep their ``le``)."""
    r = requests.get(url.rstrip("/") + "/metrics", timeout=30)
    assert r.status_code == 200
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


# -- the counters a process publishes ------------------------------------------------
@pytest.mark.slow
def test_counts_reach_redis_and_a_failed_flush_keeps_them(redis_client, keys) -> None:
    t = Telemetry()
    t.fetched(200, 1000, 0.03, None)
    t.fetched(503, 10, 0.2, "server_error")
    t.fetched(0, 0, 40.0, "timeout")
    t.flush(redis_client, keys)
    got = {k.decode(): v.decode() for k, v in redis_client.hgetall(keys.metrics).items()}
    assert got["fetches:2xx"] == "1" and got["fetches:5xx"] == "1" and got["fetches:none"] == "1"
    assert got["fetch_bytes:2xx"] == "1000" and got["fetch_errors:timeout"] == "1"
    assert got["fetch_seconds_bucket:0.05"] == "1" and got["fetch_seconds_bucket:0.25"] == "1"
    assert got["fetch_seconds_bucket:+Inf"] == "1" and got["fetch_seconds_count"] == "3"
    assert float(got["fetch_seconds_sum"]) == pytest.approx(40.23)
    t.fetched(200, 5, 0.01, None)
    dead = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens there
    with pytest.raises(redis.ConnectionError):
        t.flush(dead, keys)
    t.flush(redis_client, keys)  # what the failed flush took goes with this one
    assert redis_client.hget(keys.metrics, "fetches:2xx") == b"2"
    assert redis_client.hget(keys.metrics, "fetch_bytes:2xx") == b"1005"


def test_every_kind_of_failed_fetch_is_shown_from_the_start() -> None:
    from srcrawl.core.telemetry import FETCH_ERROR_KINDS
    from srcrawl.queues import crawl_protocol
    from srcrawl.slave import fetch

    kinds = {v for k, v in vars(fetch).items() if k.startswith("ERROR_")}
    assert kinds | {crawl_protocol.ERROR_ADDRESS_REFUSED} == set(FETCH_ERROR_KINDS)


@pytest.mark.slow
def test_metrics_of_a_real_crawl_add_up(web, redis_url, keys, tmp_path) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    r = run_cli(["crawl", *web.seed_urls, "--depth", str(DEPTH), "--slaves", "2", *FAST], env)
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = Config.load(env=env)
    with serving_in_thread(build_portal(cfg, threads=1, admin_token="")) as url:
        m = scrape(url)
    counters = {
        k.decode(): int(v)
        for k, v in redis.Redis.from_url(redis_url).hgetall(keys.stats("crawl")).items()
    }
    classes = ("2xx", "3xx", "4xx", "5xx", "none")
    fetches = sum(m.get(f'srcrawl_fetches_total{{status_class="{c}"}}', 0) for c in classes)
    # every page fetch, each retry too: at least the pages, exactly the histogram's count
    assert fetches >= counters["pages"] == len(expected(web, web.seed_urls, DEPTH))
    assert m["srcrawl_fetch_seconds_count"] == fetches
    assert m['srcrawl_fetch_seconds_bucket{le="+Inf"}'] == fetches
    assert m['srcrawl_fetch_seconds_bucket{le="0.01"}'] <= m['srcrawl_fetch_seconds_bucket{le="5"}']
    assert m['srcrawl_fetches_total{status_class="4xx"}'] >= 1  # the web's 404 page
    assert m['srcrawl_fetch_bytes_total{status_class="2xx"}'] > 10_000
    files = sorted((cfg.warc_root / keys.job).glob(f"*{WARC_SUFFIX}"))
    assert m["srcrawl_warc_files_total"] == len(files) >= 1
    assert m["srcrawl_warc_bytes_total"] == sum(f.stat().st_size for f in files)
    assert m['srcrawl_robots_cache_lookups_total{result="hit"}'] >= counters["pages"] - 10
    assert m["srcrawl_redis_used_memory_bytes"] > 100_000
    assert m["srcrawl_store_size_bytes"] > 0 and m["srcrawl_store_pages"] == counters["pages"]
    assert m['srcrawl_crawl_paused{guard="disk"}'] == 0
    # the portal itself, and the crawl master until a heartbeat TTL after it stopped
    processes = [k for k in m if k.startswith("srcrawl_process_resident_memory_bytes")]
    assert any('process="portal@' in k for k in processes)
    assert any('process="crawl-master-0@' in k for k in processes)
    assert all(m[k] > 10 * 2**20 for k in processes)
    assert m['srcrawl_frontier_queues{state="ready"}'] == 0  # the crawl is over
    assert m["srcrawl_hosts_active"] == 0


# -- the guards ------------------------------------------------------------------------
def _crawl(
    seeds: list[str], env: dict[str, str], *extra: str, depth: int = DEPTH
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "crawl",
            *seeds,
            "--depth",
            str(depth),
            "--slaves",
            "1",
            *FAST,
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _guard(client: redis.Redis, keys: Keys, name: str) -> dict:
    raw = client.hget(keys.guards, name)
    return json.loads(raw) if raw else {}


def _wait(what, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout
    while not what():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the crawl ended: {proc.stderr.read()[-3000:]}")
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def _stats(client: redis.Redis, keys: Keys) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall(keys.stats("crawl")).items()}


@pytest.mark.slow
def test_low_disk_pauses_the_crawl_and_space_back_resumes_it_with_nothing_lost(
    web, redis_url, keys, tmp_path
) -> None:
    """The floor is set above what the volume has free; once it is lowered (as space
    freed would do) the crawl resumes and ends with the whole reachable set."""
    env = cli_env(redis_url, keys.job, tmp_path)
    floor = shutil.disk_usage(tmp_path).free + 2**30
    client = redis.Redis.from_url(redis_url)
    proc = _crawl(web.seed_urls, env, "--min-free-disk", str(floor))
    try:
        _wait(lambda: _guard(client, keys, "disk").get("paused"), proc=proc)
        time.sleep(3)  # several of the master's looks: still nothing handed out
        assert _stats(client, keys).get("pages", 0) == 0
        free = _guard(client, keys, "disk")["free"]
        assert set(free) == {"warc", "store"} and max(free.values()) < floor
        status = run_cli(["status"], env)
        assert "PAUSED: low disk" in status.stdout, status.stdout
        with serving_in_thread(
            build_portal(Config.load(env=env), threads=1, admin_token="")
        ) as url:
            m = scrape(url)
        assert m['srcrawl_crawl_paused{guard="disk"}'] == 1
        # the master looks again every few seconds: what it saw then, near enough
        assert m['srcrawl_disk_free_bytes{volume="warc"}'] == pytest.approx(free["warc"], rel=0.01)
        current = crawl_strategy.load(client, keys)
        crawl_strategy.publish(client, keys, replace(current, min_free_disk=2**20))
        _out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "crawl paused" in err and "crawl resumed" in err
    pages = {p["url"]: p["depth"] for p in stored_pages(env)}
    assert pages == expected(web, web.seed_urls, DEPTH)
    assert not _guard(client, keys, "disk")["paused"]


@pytest.mark.slow
def test_high_redis_memory_holds_admission_but_not_fetching_and_loses_nothing(
    web, redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    client = redis.Redis.from_url(redis_url)
    # slow enough that a level's queued URLs are still there when admission stops
    proc = _crawl(web.seed_urls, env, "--delay", "1", "--max-delay", "1", depth=2)
    try:
        _wait(lambda: _stats(client, keys).get("pages", 0) >= 4, proc=proc)
        current = crawl_strategy.load(client, keys)
        crawl_strategy.publish(client, keys, replace(current, max_redis_memory=1))
        # the master records the state after it changed, before its next batch
        _wait(lambda: _guard(client, keys, "redis_memory").get("paused"), proc=proc)
        before = _stats(client, keys)
        _wait(lambda: _stats(client, keys).get("held_links", 0) > 0, proc=proc)
        time.sleep(4)
        during = _stats(client, keys)
        assert during["scheduled"] == before["scheduled"]  # nothing admitted
        assert during["pages"] > before["pages"]  # queued URLs fetched on
        assert "PAUSED: Redis uses" in run_cli(["status"], env).stdout
        current = crawl_strategy.load(client, keys)
        crawl_strategy.publish(client, keys, replace(current, max_redis_memory=0))
        _out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "URL admission paused" in err and "URL admission resumed" in err
    pages = {p["url"]: p["depth"] for p in stored_pages(env)}
    assert pages == expected(web, web.seed_urls, 2)
    assert client.llen(keys.crawl_held) == 0


@pytest.mark.mysql
def test_a_mariadb_stores_disk_is_watched_or_said_once_to_be_unwatched(
    mysql_db, redis_client, keys, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    from disks_plugin import disks_plugin, disks_plugin_installed

    from srcrawl.master.guards import CrawlGuards

    cfg = Config(redis_url=None, db=mysql_db, job=keys.job, home=tmp_path / "home")
    guards = CrawlGuards(cfg, redis_client, keys)
    try:
        if not disks_plugin_installed(mysql_db):
            with caplog.at_level("WARNING", logger="srcrawl.master.guards"):
                assert "store" not in guards.check(0, 0).free  # the WARC volume only
                assert "store" not in guards.check(0, 0).free
            assert caplog.text.count("the store's disk is not watched") == 1
        with disks_plugin(mysql_db):
            state = guards.check(2**60, 0)  # a floor no disk reaches
        assert state.free["store"] > 0 and state.disk_paused
        assert "store" in _guard(redis_client, keys, "disk")["free"]
    finally:
        cfg.store().close()


def test_a_size_option_reads_units_and_refuses_nonsense(redis_url, keys, tmp_path) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    r = run_cli(["crawl", "http://127.0.0.1:9/", "--min-free-disk", "lots"], env)
    assert r.returncode == 2 and "'lots' is no size" in r.stderr
    env["SRCRAWL_MIN_FREE_DISK"] = "-1G"
    r = run_cli(["crawl", "http://127.0.0.1:9/"], env)
    assert r.returncode == 2 and "is negative" in r.stderr
    assert os.environ.get("SRCRAWL_MIN_FREE_DISK") is None


@pytest.mark.slow
def test_redis_memory_of_a_cluster_is_its_fullest_node(redis_cluster, redis_url) -> None:
    from srcrawl.core.redis_connect import connect
    from srcrawl.core.telemetry import redis_memory

    single = redis.Redis.from_url(redis_url)
    used, _max = redis_memory(single)
    assert used == pytest.approx(int(single.info("memory")["used_memory"]), rel=0.2)
    client = connect(redis_cluster.url)
    before = max(
        redis_memory(connect(f"redis://127.0.0.1:{p}"))[0] for p in redis_cluster.primary_ports()
    )
    client.set("{big}x", b"x" * 2_000_000)
    used, _max = redis_memory(client)  # the node holding it, whichever it is
    assert used > before + 1_500_000
    client.delete("{big}x")
