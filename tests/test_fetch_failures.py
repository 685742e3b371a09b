"""Fetches that fail part way, against a hostile server of our own on loopback.

A failed or cut-off response is recorded as such, never as a good page; a
passing failure is retried; a page slow to parse, or a driver busy
elsewhere, costs no other fetch its page.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from srcrawl.config import Config, DatabaseURL
from srcrawl.master.crawl_master import fetch_task
from srcrawl.master.strategy import CrawlStrategy, publish
from srcrawl.queues.envelope import decode
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

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from hostile_web import HostileWeb


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


def _handler(redis_url: str, keys, tmp_path) -> CrawlHandler:
    db = DatabaseURL(kind="sqlite", path=str(tmp_path / "s.db"))
    cfg = Config(redis_url=redis_url, db=db, job=keys.job, home=tmp_path)
    cfg.store().init_schema()
    return CrawlHandler(cfg, threads=4)


def test_a_page_slow_to_parse_holds_up_no_other_page(hostile, redis_url, keys, tmp_path) -> None:
    handler = _handler(redis_url, keys, tmp_path)
    tasks = {name: fetch_task(hostile.url(name), i, 1, name).encode()
             for i, name in enumerate(("heavy", "slow"))}  # fmt: skip
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


def test_a_passing_failure_is_retried_and_the_last_try_is_stored_failed(
    hostile, redis_url, keys, tmp_path
) -> None:
    handler = _handler(redis_url, keys, tmp_path)
    publish(handler.cfg.redis(), keys, CrawlStrategy(fetch_tries=2))
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
        assert decode(first.get("task")).get("url") == url
        handler.flush()
        assert handler.writer.store.get_pages([1]) == []  # not stored while tries remain
        last = run(fetch_task(url, 1, 0, "q", failed=1).encode())
        assert (last.kind, last.get("status"), last.get("error")) == (
            "fetched", 200, ERROR_TRUNCATED)  # fmt: skip
        handler.flush()
        [page] = handler.writer.store.get_pages([1])
        assert (page.status, page.error, page.body_state) == (200, ERROR_TRUNCATED, BODY_INCOMPLETE)
        assert page.text == ""  # a cut-off body is not taken for the page's text
    finally:
        handler.close()
