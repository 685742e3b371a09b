"""How the crawl master schedules, and what `srcrawl crawl` tells the user about it.

Real parts throughout: `srcrawl crawl` as a user runs it, a Redis server, the
SQLite store and the test web on loopback (its access log is the evidence).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pytest

from srcrawl.master.crawl_run import start_crawl
from srcrawl.queues import crawl_strategy as strategies
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.testweb.accesslog import gaps

from .conftest import cli_env as env_for
from .conftest import logged_requests
from .conftest import run_cli as srcrawl
from .conftest import stored_pages as stored


@pytest.fixture(scope="module")
def one_host(tmp_path_factory):
    log = tmp_path_factory.mktemp("web") / "access.jsonl"
    with TestWeb.generate(
        hosts=1, pages=30, seed=3, access_log=log, flush_interval=0.1, slow_seconds=0.5
    ) as tw:
        yield tw


@pytest.mark.slow
def test_a_host_is_released_when_its_politeness_wait_ends(one_host, redis_url, keys, tmp_path):
    # The wait between two requests to a host is the delay asked for, not the
    # delay plus a tick of the scheduler or of Redis' blocking timeout.
    env = env_for(redis_url, keys.job, tmp_path)
    t0 = time.monotonic()
    r = srcrawl(
        [
            "crawl",
            *one_host.seed_urls,
            "--depth",
            "2",
            "--slaves",
            "1",
            "--delay",
            "0.1",
            "--delay-factor",
            "0",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    entries = [e for e in logged_requests(one_host) if e["start_mono"] >= t0]
    [host_gaps] = gaps(entries).values()
    assert len(host_gaps) >= 15
    assert min(host_gaps) >= 0.1 - 0.005  # never sooner than asked
    # not later by a tick: the master's waits, on a clock of the test's own (a median of
    # these gaps against a margin of milliseconds fails on a busy machine), just below


@pytest.mark.parametrize("due_in_ms", [0, 1, 50, 99, 100, 101, 150, 250, 299, 300, 301, 5000])
def test_the_master_waits_for_a_due_host_no_later_than_its_due_time(monkeypatch, due_in_ms):
    # Redis ends a blocking timeout only on its timer tick (REDIS_TIMER_TICK, maybe a whole
    # tick late): a wait for nrq while a host is due soon blocks until a tick before the due
    # time, then polls in steps of DEFAULT_MASTER_POLL. The clock is injected: what is
    # checked is the waits asked for, each at its latest end, not how long they took.
    from srcrawl.core.defaults import (
        DEFAULT_MASTER_IDLE_WAIT,
        DEFAULT_MASTER_POLL,
        REDIS_TIMER_TICK,
    )
    from srcrawl.master.frontier import host_queues

    now = 1_000_000_000
    blocks: list[float] = []
    slept: list[float] = []
    frontier = host_queues.Frontier.__new__(host_queues.Frontier)
    monkeypatch.setattr(frontier, "take", lambda count, timeout=0.0: blocks.append(timeout) or [])
    monkeypatch.setattr(host_queues, "now_ms", lambda: now)
    monkeypatch.setattr(host_queues.time, "sleep", slept.append)
    assert frontier.take_until(10, now + due_in_ms) == []
    due_s = due_in_ms / 1000
    # a blocking wait, at its latest end (a tick late), is over by the due time
    assert all(b == 0 or b + REDIS_TIMER_TICK <= due_s + 1e-9 for b in blocks), blocks
    # a poll sleeps no longer than one step, nor past the due time
    assert all(z <= min(DEFAULT_MASTER_POLL, due_s) for z in slept), slept
    # and the master waits at all (no busy loop) unless the host is due now
    waited = max([*blocks, *slept, 0.0])
    assert waited > 0 or due_in_ms == 0, (blocks, slept)
    assert waited <= DEFAULT_MASTER_IDLE_WAIT + 1e-9  # never blocked past the idle wait


@pytest.mark.slow
def test_resume_applies_the_politeness_options_given(one_host, redis_url, keys, tmp_path):
    # An interrupted crawl that was started with a long delay; the resume asks for none.
    env = env_for(redis_url, keys.job, tmp_path)
    cfg = Config.load(env=env)
    start_crawl(cfg, one_host.seed_urls, CrawlStrategy(max_depth=1, delay=3.0, max_delay=3.0))
    want = one_host.web.expected_crawl(one_host.seed_urls, 1)
    assert len(want) >= 8  # at the old delay, half a minute at least
    t0 = time.monotonic()
    r = srcrawl(
        [
            "crawl",
            "--resume",
            "--slaves",
            "1",
            "--delay",
            "0",
            "--delay-factor",
            "0",
            "--fetch-timeout",
            "2",
        ],
        env,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p["url"]: p["depth"] for p in stored(env)} == want
    assert elapsed < 20, elapsed
    s = strategies.load(cfg.redis(), cfg.keys)
    assert (s.version, s.delay, s.delay_factor, s.fetch_timeout) == (2, 0.0, 0.0, 2.0)
    assert (s.max_delay, s.max_depth) == (3.0, 1)  # what was not given is kept
    cfg.close()


def test_resume_refuses_options_a_running_crawl_cannot_take(redis_url, keys, tmp_path):
    env = env_for(redis_url, keys.job, tmp_path)
    cfg = Config.load(env=env)
    start_crawl(cfg, ["http://127.0.0.1:9/"], CrawlStrategy(max_depth=1))
    r = srcrawl(
        ["crawl", "--resume", "--depth", "5", "--queue-policy", "hash", "--delay", "0"], env
    )
    assert r.returncode == 2
    [line] = r.stderr.strip().splitlines()
    assert "--depth, --queue-policy cannot change on --resume" in line
    s = strategies.load(cfg.redis(), cfg.keys)
    assert (s.version, s.max_depth, s.queue_policy, s.delay) == (1, 1, "host", 1.0)
    cfg.close()


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_dead_seed_is_reported_at_once_and_fails_the_crawl(redis_url, keys, tmp_path):
    port = free_port()
    env = env_for(redis_url, keys.job, tmp_path)
    t0 = time.monotonic()
    crawl = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "crawl",
            f"http://127.0.0.1:{port}/",
            "--slaves",
            "1",
            "--robots-defer",
            "3",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in crawl.stderr:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))
            if "try 1 of 2" in line:
                break
        told_at, told = lines[-1]
        head = f"127.0.0.1:{port}: robots.txt: could not connect; retrying in "
        assert re.fullmatch(re.escape(head) + r"[0-3] s \(try 1 of 2\)", told), told
        assert told_at < 3  # before the first retry, not at the end
        out, err = crawl.communicate(timeout=60)
    finally:
        if crawl.poll() is None:
            crawl.kill()
    assert crawl.returncode == 1, err
    assert json.loads(out).get("pages", 0) == 0
    last = err.strip().splitlines()[-1]
    # its next try was 3 s away: worth waiting for, not ending on
    assert last == (
        f"srcrawl: no seed could be fetched: 127.0.0.1:{port}: robots.txt: could not connect; "
        "gave up after 2 tries"
    )
    assert time.monotonic() - t0 < 30


@pytest.mark.slow
def test_the_crawl_says_when_politeness_holds_it_and_ends_on_its_own_line(
    one_host, redis_url, keys, tmp_path
):
    env = env_for(redis_url, keys.job, tmp_path)
    r = srcrawl(
        [
            "crawl",
            *one_host.seed_urls,
            "--depth",
            "2",
            "--slaves",
            "1",
            "--delay",
            "0.3",
            "--delay-factor",
            "0",
            "--fetch-tries",
            "1",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    notes = [ln for ln in lines if "waiting on politeness" in ln and "--delay 0.3 s" in ln]
    assert len(notes) == 1 and "--delay 0 --delay-factor 0" in notes[0], lines
    # (the special pages' broken responses are not retried here: a host backing off
    # after a failure waits like a polite one)
    # the result is a line of its own, the last one; the progress line came before it
    summary = json.loads(r.stdout)
    pages, scheduled = summary["pages"], summary["scheduled"]
    errors = summary["fetch_errors"]
    assert lines[-1].startswith(
        f"crawl complete: {pages} pages, {scheduled} URLs scheduled, {errors} fetch errors"
    )
    # the special pages' failures, each kind with its count
    kinds = ", ".join(f"{e} {n}" for e, n in summary["not_fetched"].items())
    assert f"; not fetched: {kinds} (" in lines[-1] if kinds else lines[-1].endswith("errors")
    assert lines[-2].startswith(f"pages {pages}  queued 0  in flight 0"), lines
    assert sum("crawl complete" in ln for ln in lines) == 1


@pytest.mark.slow
def test_the_crawl_does_not_blame_politeness_when_there_is_none(
    one_host, redis_url, keys, tmp_path
):
    env = env_for(redis_url, keys.job, tmp_path)
    r = srcrawl(
        [
            "crawl",
            *one_host.seed_urls,
            "--depth",
            "2",
            "--slaves",
            "1",
            "--delay",
            "0",
            "--delay-factor",
            "0",
            "--fetch-tries",
            "1",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "politeness" not in r.stderr


def test_requeued_tasks_of_dead_workers_are_told_in_sentences():
    from srcrawl.queues.workers import reaped_sentences

    assert reaped_sentences({"slave-3": {"q:srq": 12}, "slave-4": {}, "slave-5": {"a": 1}}) == [
        "requeued 12 tasks of dead worker slave-3",
        "worker slave-4 is dead (it held no task)",
        "requeued 1 task of dead worker slave-5",
    ]
