"""The whole crawl — master, slaves, robots, politeness, store — over the synthetic web.

Everything is real: `srcrawl crawl` as a user runs it, a Redis server, the
SQLite store, and the test web served by another process on loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from srcrawl.core.urls import host_of
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.testweb.accesslog import gaps, overlaps

from .conftest import cli_env as env_for
from .conftest import logged_requests
from .conftest import run_cli as srcrawl
from .conftest import stored_pages as stored

pytestmark = pytest.mark.slow  # every test here runs for more than a second

DEPTH = 3
DELAY = 0.05
POLITE = [
    "--delay",
    str(DELAY),
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    "1",
    "--robots-defer",
    "0.3",
    "--threads",
    "4",
    "--retry-backoff",
    "0.1",
]


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    log = tmp_path_factory.mktemp("web") / "access.jsonl"
    with TestWeb.generate(
        hosts=4,
        pages=25,
        seed=5,
        slow_seconds=3,
        crawl_delay=0.1,
        large_bytes=3_000_000,
        access_log=log,
    ) as tw:
        yield tw


def expected(tw: TestWeb, seeds: list[str], depth: int) -> dict[str, int]:
    scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=depth))
    return tw.web.expected_crawl(seeds, depth, lambda url: scope.reject(url, 0) is None)


def background_crawl(seeds: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`srcrawl crawl` with 2 slaves, running; in its own process group, as a terminal gives it."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "crawl",
            *seeds,
            "--depth",
            str(DEPTH),
            "--slaves",
            "2",
            *POLITE,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("slaves", [1, 4])
def test_crawl_fetches_exactly_the_reachable_set(web, redis_url, keys, tmp_path, slaves) -> None:
    seeds = web.seed_urls
    env = env_for(redis_url, keys.job, tmp_path)
    t0 = time.monotonic()
    r = srcrawl(["crawl", *seeds, "--depth", str(DEPTH), "--slaves", str(slaves), *POLITE], env)
    assert r.returncode == 0, r.stderr[-3000:]
    started = t0
    summary = json.loads(r.stdout)
    pages = stored(env)
    urls = [p["url"] for p in pages]
    assert len(urls) == len(set(urls))  # each stored once
    want = expected(web, seeds, DEPTH)
    assert {p["url"]: p["depth"] for p in pages} == want
    assert summary["pages"] == len(want) and summary["queued"] == 0

    by_url = {p["url"]: p for p in pages}
    special = web.special
    assert by_url[special["not_found"]]["status"] == 404
    assert by_url[special["server_error"]]["status"] == 500
    assert by_url[special["redirect_301"]]["status"] == 301
    if special["timeout_headers"] in by_url:
        assert by_url[special["timeout_headers"]]["status"] == 0  # recorded as failed
    assert by_url[special["png"]]["content_type"].startswith("image/png")
    # javascript:, mailto:, data:, http://[::1/ …: dropped; only the good link is stored
    links = srcrawl(["export", "links"], env).stdout.splitlines()
    bad_page_links = {
        ln.split("\t")[1] for ln in links if ln.startswith(special["bad_links"] + "\t")
    }
    assert bad_page_links == {link.target for link in web.web.page(special["bad_links"]).links}

    # the server saw the crawl: nothing disallowed, one request at a time per
    # host, never a shorter pause than the delay
    entries = [e for e in logged_requests(web) if e["start_mono"] >= started - 1]
    assert entries
    for e in entries:
        assert e["path"] == "/robots.txt" or web.web.robots_allows(e["url"]), e["url"]
    assert overlaps(entries) == []
    for host_index, host_gaps in gaps(entries).items():
        assert min(host_gaps) >= DELAY - 0.005, host_index
        crawl_delay = web.web.hosts[host_index].crawl_delay
        if crawl_delay:
            assert min(host_gaps) >= crawl_delay - 0.005


@pytest.mark.slow
def test_gbk_and_big5_pages_are_stored_as_correct_text(web, redis_url, keys, tmp_path) -> None:
    special = web.special
    names = ["gbk_header", "gbk_meta", "gbk_undeclared", "big5_header", "big5_meta"]
    env = env_for(redis_url, keys.job, tmp_path)
    r = srcrawl(
        ["crawl", *(special[n] for n in names), "--depth", "0", "--slaves", "1", *POLITE], env
    )
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = Config.load(env=env)
    from srcrawl.core.urls import fingerprint

    for name in names:
        page = web.web.page(special[name])
        [row] = cfg.store().get_pages([fingerprint(special[name])])
        text = cfg.store().page_text(row)  # in the WARC, a conversion record
        zh_term = page.terms[1]
        assert zh_term in text, (name, text[:200])
        assert "\ufffd" not in text
    cfg.close()


def _slave_mid_work(client, keys, *, need_slots: bool) -> tuple[list, list]:
    """Wait until a slave holds tasks mid-crawl (and host slots, if ``need_slots``), at
    least 3 pages stored: its processing lists and the slot keys. Fails rather than
    let a kill of an idle slave test nothing."""
    processing = f"{keys.srq('crawl')}:processing:*"
    pages = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        held = [k for k in client.scan_iter(match=processing) if client.llen(k)]
        slots = list(client.scan_iter(match=keys.crawl_host_slots("*")))
        pages = int(client.hget(keys.stats("crawl"), "pages") or 0)
        if held and pages >= 3 and (slots or not need_slots):
            return held, slots
        time.sleep(0.02)
    raise AssertionError(f"the slave never held work mid-crawl ({pages} pages)")


@pytest.mark.slow
@pytest.mark.parametrize("per_host", [1, 4])
def test_slave_killed_mid_fetch_loses_no_url(redis_url, keys, tmp_path, per_host) -> None:
    # slow pages keep every slave busy mid-fetch when it is killed; with --per-host 4 it
    # dies holding host slots, which lapse (the rescuer crawls on with the others meanwhile)
    with TestWeb.generate(hosts=3, pages=15, seed=9, latency_ms=150) as tw:
        seeds = tw.seed_urls
        env = env_for(redis_url, keys.job, tmp_path)
        cfg = Config.load(env=env)
        from srcrawl.master.crawl_run import start_crawl

        start_crawl(
            cfg,
            seeds,
            CrawlStrategy(
                max_depth=2,
                delay=0,
                delay_factor=0,
                max_delay=0,
                fetch_timeout=2,
                robots_defer=0.3,
                per_host=per_host,
            ),
        )
        short_ttl = {**env}
        cmd = [sys.executable, "-m", "srcrawl.app.cli"]
        master = subprocess.Popen([*cmd, "master", "start"], env=short_ttl)
        victim = subprocess.Popen(
            [*cmd, "slave", "start", "--phases", "crawl", "--threads", "3", "--heartbeat-ttl", "1"],
            env=short_ttl,
        )
        try:
            client = cfg.redis()
            held, slots = _slave_mid_work(client, cfg.keys, need_slots=per_host > 1)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            # it died holding tasks (the master reaps them only once its heartbeat
            # lapses, a second from now): the rescue below has work to recover
            assert sum(client.llen(k) for k in held) > 0, "the slave held nothing when killed"
            rescuer = subprocess.Popen([*cmd, "slave", "start", "--phases", "crawl"], env=env)
            assert master.wait(timeout=180) == 0
            rescuer.send_signal(signal.SIGTERM)
            rescuer.wait(timeout=30)
        finally:
            for p in (master, victim):
                if p.poll() is None:
                    p.kill()
        assert per_host == 1 or slots  # the victim died holding host slots
        pages = stored(env)
        want = expected(tw, seeds, 2)
        assert {p["url"]: p["depth"] for p in pages} == want
        assert len(pages) == len(want)
        cfg.close()


@pytest.mark.slow
def test_master_killed_mid_crawl_is_restarted_and_finishes_exactly(
    web, redis_url, keys, tmp_path
) -> None:
    seeds = web.seed_urls
    env = env_for(redis_url, keys.job, tmp_path)
    crawl = background_crawl(seeds, env)
    cfg = Config.load(env=env)
    client = cfg.redis()
    killed = 0
    deadline = time.monotonic() + 120
    while killed < 2 and time.monotonic() < deadline and crawl.poll() is None:
        pages = int(client.hget(cfg.keys.stats("crawl"), "pages") or 0)
        holder = client.get(cfg.keys.master_lease("crawl"))
        if holder and pages >= 20 * (killed + 1):
            os.kill(int(holder.decode().split(":")[1]), signal.SIGKILL)
            killed += 1
            while client.get(cfg.keys.master_lease("crawl")) == holder:
                time.sleep(0.01)
        time.sleep(0.01)
    _, err = crawl.communicate(timeout=300)
    assert crawl.returncode == 0, err[-3000:]
    assert killed == 2
    pages = stored(env)
    assert len(pages) == len({p["url"] for p in pages})
    assert {p["url"]: p["depth"] for p in pages} == expected(web, seeds, DEPTH)
    cfg.close()


@pytest.mark.slow
def test_ctrl_c_stops_everything_and_resume_finishes_exactly(
    web, redis_url, keys, tmp_path
) -> None:
    seeds = web.seed_urls
    env = env_for(redis_url, keys.job, tmp_path)
    crawl = background_crawl(seeds, env)
    cfg = Config.load(env=env)
    client = cfg.redis()
    deadline = time.monotonic() + 60
    while int(client.hget(cfg.keys.stats("crawl"), "pages") or 0) < 30:
        assert time.monotonic() < deadline and crawl.poll() is None
        time.sleep(0.02)
    os.killpg(crawl.pid, signal.SIGINT)  # what Ctrl-C does
    _, err = crawl.communicate(timeout=60)
    assert crawl.returncode == 130, err[-2000:]
    assert "--resume" in err
    # nothing of the crawl is left running: no live worker, no master lock
    from srcrawl.queues.workers import workers

    assert [w.id for w in workers(client, cfg.keys) if w.alive] == []
    assert client.get(cfg.keys.master_lease("crawl")) is None
    assert int(client.hget(cfg.keys.stats("crawl"), "pages") or 0) < len(
        expected(web, seeds, DEPTH)
    )
    r = srcrawl(["crawl", "--resume", "--slaves", "2", "--threads", "4"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    pages = stored(env)
    assert len(pages) == len({p["url"] for p in pages})
    assert {p["url"]: p["depth"] for p in pages} == expected(web, seeds, DEPTH)
    cfg.close()


def test_a_local_crawl_whose_slaves_all_died_fails_instead_of_waiting(
    web, redis_url, keys, tmp_path
) -> None:
    # With no slave left nothing would ever fetch the frontier: `srcrawl
    # crawl` says so and where the slaves' logs are, and exits.
    env = env_for(redis_url, keys.job, tmp_path)
    crawl = background_crawl(web.seed_urls, env)
    cfg = Config.load(env=env)
    client = cfg.redis()
    try:
        deadline = time.monotonic() + 60
        pids: list[int] = []
        while len(pids) < 2 and time.monotonic() < deadline:
            records = [json.loads(r) for r in client.hgetall(cfg.keys.workers).values()]
            pids = [r["pid"] for r in records if r["role"] == "slave"]
            time.sleep(0.05)
        assert len(pids) == 2, "the slaves never registered"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        _, err = crawl.communicate(timeout=60)
    finally:
        if crawl.poll() is None:
            os.killpg(crawl.pid, signal.SIGKILL)
            crawl.wait()
    logs = tmp_path / "home" / "logs" / keys.job / "crawl"
    assert crawl.returncode == 2, err[-2000:]  # how every expected failure ends
    assert f"every local crawl slave exited; see {logs}" in err
    assert sorted(p.name for p in logs.iterdir()) == ["slave-1.log", "slave-2.log"]
    cfg.close()
