"""Fetches that fail part way, against a hostile server of our own on loopback.

A failed or cut-off response is recorded as such, never as a good page; a
passing failure is retried; a page slow to parse, or a driver busy
elsewhere, costs no other fetch its page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srcrawl.core.urls import host_of, origin
from srcrawl.master.frontier.politeness import retry_ms
from srcrawl.queues.crawl_protocol import fetch_task
from srcrawl.queues.crawl_strategy import CrawlStrategy, publish
from srcrawl.queues.envelope import decode
from srcrawl.queues.scope import Scope
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.slave.crawl import CrawlHandler
from srcrawl.slave.fetch import (
    BODY_CAPPED,
    BODY_COMPLETE,
    BODY_INCOMPLETE,
    ERROR_TIMEOUT,
    ERROR_TRUNCATED,
    Fetcher,
    FetchMulti,
)
from srcrawl.testweb import TestWeb

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from hostile_web import PAGES, HostileWeb


@pytest.fixture
def hostile():
    with HostileWeb(slow=0.5) as web:
        yield web


@pytest.mark.parametrize(
    ("name", "error"),
    [("drip", ERROR_TIMEOUT), ("headers", ERROR_TIMEOUT), ("short", ERROR_TRUNCATED)],
)
def test_a_cut_off_response_is_an_incomplete_failure(hostile, name, error) -> None:
    fetcher = Fetcher(read_timeout=0.5)
    try:
        r = fetcher.fetch(hostile.url(name))
    finally:
        fetcher.close()
    assert (r.status, r.error, r.body_state) == (200, error, BODY_INCOMPLETE)
    assert r.transient and not r.ok


def test_a_body_cut_at_our_cap_is_usable_and_told_apart(hostile) -> None:
    fetcher = Fetcher(max_bytes=20)
    try:
        capped = fetcher.fetch(hostile.url("any"))
        whole = Fetcher().fetch(hostile.url("any"))
    finally:
        fetcher.close()
    assert (capped.error, capped.truncated, capped.body_state) == (None, True, BODY_CAPPED)
    assert (whole.error, whole.body_state) == (None, BODY_COMPLETE)


def test_a_503_asks_for_a_retry_with_its_retry_after(hostile) -> None:
    fetcher = Fetcher()
    try:
        first, second = fetcher.fetch(hostile.url("flaky")), fetcher.fetch(hostile.url("flaky"))
    finally:
        fetcher.close()
    assert (first.status, first.transient, first.retry_after) == (503, True, 1.0)
    assert (second.status, second.transient, second.error) == (200, False, None)


@pytest.mark.slow
def test_a_driver_that_was_away_does_not_blame_the_server(hostile) -> None:
    # the server answers in 0.5 s; the thread driving the fetch is busy for
    # 2 s meanwhile (parsing, say), past every timeout: the answer waits in the socket
    fetcher = Fetcher(connect_timeout=0.5, read_timeout=0.5, deadline=1.0)
    multi = FetchMulti(share=None)
    try:
        multi.add(fetcher, hostile.url("slow"), "slow")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.2:
            assert multi.wait(0.05) == []
        time.sleep(2.0)
        done = []
        while not done and time.monotonic() - t0 < 10:
            done = multi.wait(0.1)
        [(tag, r)] = done
        assert (tag, r.status, r.error, r.body_state) == ("slow", 200, None, BODY_COMPLETE)
    finally:
        multi.close()
        fetcher.close()


def test_a_server_that_is_slow_is_still_timed_out(hostile) -> None:
    fetcher = Fetcher(connect_timeout=0.5, read_timeout=0.5, deadline=1.0)
    try:
        t0 = time.monotonic()
        r = fetcher.fetch(hostile.url("drip"))
    finally:
        fetcher.close()
    assert r.error == ERROR_TIMEOUT and time.monotonic() - t0 < 5


def _handler(redis_url: str, keys, tmp_path, hostile: HostileWeb, **strategy) -> CrawlHandler:
    """A crawl handler whose crawl has the hostile host as its one seed."""
    db = DatabaseURL(kind="sqlite", path=str(tmp_path / "s.db"))
    cfg = Config(redis_url=redis_url, db=db, job=keys.job, home=tmp_path)
    cfg.store().init_schema()
    seed = hostile.origin + "/"
    seeded = CrawlStrategy(seed_hosts=(host_of(seed),), seed_origins=(origin(seed),), **strategy)
    publish(cfg.redis(), keys, seeded)
    return CrawlHandler.from_config(cfg, threads=4)


@pytest.mark.slow
def test_a_page_slow_to_parse_holds_up_no_other_page(hostile, redis_url, keys, tmp_path) -> None:
    handler = _handler(redis_url, keys, tmp_path, hostile)
    tasks = {
        name: fetch_task(hostile.url(name), i, 1, name).encode()
        for i, name in enumerate(("heavy", "slow"))
    }
    order: list[str] = []
    try:
        for raw in tasks.values():
            assert handler.start(raw) is None
        deadline = time.monotonic() + 120
        while len(order) < 2 and time.monotonic() < deadline:
            for raw, result in handler.poll(0.2, -1):
                msg = decode(result)
                if msg.kind == "robots":  # the host's robots.txt came first: now the page
                    assert handler.start(raw) is None
                    continue
                assert msg.kind == "fetched" and msg.get("status") == 200, msg.fields
                order.append(msg.get("q"))
        # the slow page arrives 0.5 s after the heavy one, which takes longer to parse
        assert order == ["slow", "heavy"]
    finally:
        handler.close()


@pytest.mark.slow
def test_a_passing_failure_is_retried_and_the_last_try_is_stored_failed(
    hostile, redis_url, keys, tmp_path
) -> None:
    handler = _handler(redis_url, keys, tmp_path, hostile, fetch_tries=2)
    url = hostile.url("short")

    def run(raw: bytes):
        assert handler.start(raw) is None
        while True:
            [(_, result)] = handler.poll(0.2, -1) or [(None, None)]
            if result is None:
                continue
            msg = decode(result)
            if msg.kind != "robots":
                return msg
            assert handler.start(raw) is None

    try:
        first = run(fetch_task(url, 1, 0, "q").encode())
        assert (first.kind, first.get("error")) == ("retry", ERROR_TRUNCATED)
        assert first.get("url") == url
        handler.flush()
        assert handler.writer.store.get_pages([1]) == []  # not stored while tries remain
        last = run(fetch_task(url, 1, 0, "q", failed=1).encode())
        assert (last.kind, last.get("status"), last.get("error")) == (
            "fetched",
            200,
            ERROR_TRUNCATED,
        )
        handler.flush()
        [page] = handler.writer.store.get_pages([1])
        assert (page.status, page.error, page.body_state) == (200, ERROR_TRUNCATED, BODY_INCOMPLETE)
        assert page.text == ""  # a cut-off body is not taken for the page's text
    finally:
        handler.close()


def _srcrawl(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _cli_env(redis_url: str, keys, tmp_path: Path) -> dict[str, str]:
    """A `srcrawl` process's environment: the test's Redis and job, a SQLite store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    env.update(
        SRCRAWL_REDIS_URL=redis_url,
        SRCRAWL_JOB=keys.job,
        SRCRAWL_HOME=str(tmp_path / "home"),
        SRCRAWL_DB_URL=f"sqlite:///{tmp_path}/crawl.db",
    )
    return env


# depth 2 with no politeness wait; short timeouts, deferrals and back-off
_QUICK_CRAWL = [
    *("--depth", "2", "--slaves", "2", "--threads", "8"),
    *("--delay", "0", "--delay-factor", "0"),
    *("--fetch-timeout", "0.5", "--robots-defer", "0.3", "--retry-backoff", "0.2"),
]


@pytest.mark.slow
def test_a_crawl_beside_a_hostile_host_loses_no_good_page(redis_url, keys, tmp_path) -> None:
    pages = (*PAGES, "heavy")
    with (
        HostileWeb(pages=pages) as bad,
        TestWeb.generate(hosts=3, pages=20, seed=4, latency_ms=30) as tw,
    ):
        good_seeds = tw.seed_urls[1:]  # host 0's special pages fail on purpose
        env = _cli_env(redis_url, keys, tmp_path)
        r = _srcrawl(["crawl", bad.origin + "/", *good_seeds, *_QUICK_CRAWL], env)
        assert r.returncode == 0, r.stderr[-3000:]
        summary = json.loads(r.stdout)
        out = _srcrawl(["export", "pages"], env)
        stored = {p["url"]: p for p in map(json.loads, out.stdout.splitlines())}
        scope = Scope(
            CrawlStrategy(seed_hosts=tuple({host_of(s) for s in good_seeds}), max_depth=2)
        )
        want = tw.web.expected_crawl(good_seeds, 2, lambda url: scope.reject(url, 0) is None)
        # every good page is stored, whole, its links followed
        good = {u: p for u, p in stored.items() if not u.startswith(bad.origin)}
        assert set(good) == set(want)
        assert all(p["error"] is None for p in good.values() if p["status"] == 200)
        # failed and cut-off responses say so, after every try
        outcome = {
            n: (
                stored[bad.url(n)]["status"],
                stored[bad.url(n)]["error"],
                stored[bad.url(n)]["body_state"],
            )
            for n in pages
        }
        assert outcome == {
            "drip": (200, "timeout", "incomplete"),
            "headers": (200, "timeout", "incomplete"),
            "short": (200, "truncated", "incomplete"),
            "flaky": (200, None, "complete"),
            "heavy": (200, None, "capped"),  # 2.8 MB, cut at --max-page-bytes
        }
        assert bad.url("flaky-child") in stored  # retried, then followed
        tries = {n: bad.requests[f"/{n}.html"] for n in pages}
        assert tries == {"drip": 3, "headers": 3, "short": 3, "flaky": 2, "heavy": 1}
    assert summary["error_timeout"] == 2 and summary["error_truncated"] == 1
    assert summary["fetch_retries"] == 7 and summary["fetch_errors"] == 3
    ok = [p for p in stored.values() if 200 <= p["status"] < 300 and p["error"] is None]
    assert summary["status_2xx"] == len(ok)


def test_the_retry_back_off_doubles_honours_retry_after_and_is_capped() -> None:
    s = CrawlStrategy(retry_backoff=2.0)
    assert [retry_ms(s, n, None) for n in (1, 2, 3)] == [2000, 4000, 8000]
    assert retry_ms(s, 10, None) == retry_ms(s, 1, 10**6) == 60_000
    assert retry_ms(s, 1, 30.0) == 30_000


def test_status_lists_the_failed_fetches_by_kind() -> None:
    from srcrawl.app.status import render

    counters = {
        "pages": 9,
        "status_2xx": 6,
        "error_timeout": 2,
        "error_truncated": 1,
        "fetch_retries": 7,
    }
    crawl = {"srq": 0, "nrq": 0, "in_flight": 0, "counters": counters}
    snapshot = {"job": "j", "workers": [], "phases": {"crawl": crawl}}
    assert "failed fetches: timeout 2, truncated 1 (retried 7)" in render(snapshot)
