"""A late host gets every try --robots-defer allows it, and a host given up is said so.

First the real master with a handler that answers from a shortcut web (a long host,
late hosts holding shortcuts into it): each late host's task meets, after each failed
robots.txt request, its deferral still in the cache once (the race of a task released
in the deferral's last moment, or of another of the host's tasks), as a slave answers
it. Then `srcrawl crawl` beside a host whose robots.txt answers 500 for ever.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from broken_host import Failing

from srcrawl.core.defaults import DEFAULT_ROBOTS_TRIES
from srcrawl.core.urls import origin
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.master.crawl_run import start_crawl
from srcrawl.queues.crawl_protocol import Deferred, Fetched, FetchTask, canonical_links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.settings.config import Config
from srcrawl.slave.runtime import Slave
from srcrawl.testweb import TestWeb
from srcrawl.testweb.shortcuts import shortcut_web

from .conftest import cli_env, stored_pages

DEFER = 0.3
"""Seconds of each deferral: above --lag-after (0.1 below), so the late hosts lag."""


class ShortcutHandler:
    """Pages of ``web``; a late host's robots.txt fails as many times as the web says,
    and each failure is followed by one task that finds the deferral in the cache."""

    phase = "crawl"
    batch_size = 1
    threads = 4

    def __init__(self, web) -> None:
        self.web = web
        self.failures = {h.origin: h.robots_failures for h in web.hosts}
        self.cached: dict[str, float] = {}
        """Origin → the end of its deferral, for the next task of the host to meet."""
        self.fetched: dict[str, int] = {}

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        return [self._one(FetchTask.decode(raw)) for raw in tasks]

    def _one(self, task: FetchTask) -> bytes:
        site = origin(task.url)
        until = self.cached.pop(site, None)
        if until is not None:  # what the slave sends for a deferral it finds in the cache
            return Deferred(task, until).encode()
        if self.failures.get(site, 0) > 0:
            self.failures[site] -= 1
            self.cached[site] = until = time.time() + DEFER
            return Deferred(task, until, "HTTP 500").encode()
        self.fetched.setdefault(task.url, task.depth)
        page = self.web.page(task.url)
        links, _ = canonical_links([ln.target for ln in page.links] if page else [])
        return Fetched(task, 200, 1, links=list(links.items())).encode()

    def stats(self) -> dict[str, float]:
        return {}


@pytest.mark.slow
def test_a_late_host_that_answers_within_its_tries_is_crawled(redis_url, keys, tmp_path):
    # every late host fails three times, each failure followed by a deferral met in the
    # cache: six deferrals, three of them tries (five allowed)
    ports = [9200 + i for i in range(5)]
    web = shortcut_web(ports, seed=4, pages=60, min_failures=3, max_failures=3)
    seed = web.hosts[0].root
    want = web.expected_crawl([seed], 3)
    cfg = Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": keys.job,
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        }
    )
    strategy = CrawlStrategy(
        max_depth=3,
        delay=0,
        delay_factor=0,
        max_delay=0,
        robots_defer=DEFER,
        lag_after=0.1,
        allow_domains=("127.0.0.1",),
    )
    start_crawl(cfg, [seed], strategy)
    handler = ShortcutHandler(web)
    slave = Slave.from_config(cfg, [handler], block_timeout=0.05)
    t = threading.Thread(target=slave.run, daemon=True)
    t.start()
    try:
        assert CrawlMaster.from_config(cfg).run() is True
    finally:
        slave.stopping.set()
        t.join(timeout=10)
    stats = {k.decode(): int(v) for k, v in cfg.redis().hgetall(cfg.keys.stats("crawl")).items()}
    reached = [h.origin for h in web.hosts[1:] if h.root in want]
    late = len(reached)
    assert late >= 2 and all(handler.failures[o] == 0 for o in reached), (
        stats,
        handler.failures,
        reached,
    )
    assert stats.get("robots_gave_up", 0) == 0
    assert stats["robots_deferred"] == 3 * late and stats["robots_waited"] == 3 * late
    assert set(handler.fetched) == set(want)
    cfg.close()


@pytest.mark.slow
def test_a_host_whose_robots_txt_never_answers_is_given_up_and_said_so(
    broken_host, redis_url, keys, tmp_path
):
    Failing.requests.clear()
    env = cli_env(redis_url, keys.job, tmp_path)
    with TestWeb.generate(hosts=1, pages=4, seed=3, slow_seconds=0.5) as good:
        r = _crawl([*good.seed_urls, broken_host], env)
        want = good.web.expected_crawl(good.seed_urls, 3)
    # the host was asked for robots.txt once per try, and for nothing else
    assert Failing.requests == ["/robots.txt"] * DEFAULT_ROBOTS_TRIES
    summary = json.loads(r.stdout)
    assert summary["robots_gave_up"] == 1
    # the good host's special pages fail too (timeouts, cut-off bodies): each kind counted
    errors = [p["error"] for p in stored_pages(env) if p["error"]]
    assert summary["not_fetched"] == {e: errors.count(e) for e in set(errors)}
    assert summary["not_fetched"]["robots_gave_up"] == 1
    assert summary["all_fetched"] is False
    rows = {p["url"]: (p["error"], p["status"]) for p in stored_pages(env)}
    assert rows.pop(broken_host) == ("robots_gave_up", 0)
    assert set(rows) == set(want)
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("crawl complete: ") and r.returncode == 0, r.stderr
    kinds = ", ".join(f"{e} {n}" for e, n in sorted(summary["not_fetched"].items()))
    assert f"; not fetched: {kinds} (" in lines[-1]
    assert "export pages" in lines[-1] and "seed URL" in lines[-1]


def _crawl(seeds: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "crawl",
            *seeds,
            *["--allow-private", "--slaves", "1", "--delay", "0", "--delay-factor", "0"],
            *["--depth", "3"],
            *["--robots-defer", str(DEFER), "--lag-after", "0.1", "--no-sitemaps"],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_summary_names_every_reason_a_url_was_not_fetched() -> None:
    from srcrawl.master.crawl_summary import crawl_summary, summary_line

    counters = {"pages": 7, "scheduled": 10, "fetch_errors": 2, "error_timeout": 2}
    counters |= {"robots_gave_up": 1, "error_address_refused": 0}
    summary = crawl_summary("j", counters, [])
    assert summary["not_fetched"] == {"robots_gave_up": 1, "timeout": 2}
    assert summary["all_fetched"] is False
    assert summary_line(counters, "j") == (
        "crawl complete: 7 pages, 10 URLs scheduled, 2 fetch errors; not fetched: "
        "robots_gave_up 1, timeout 2 (`srcrawl --job j export pages` lists each with its "
        "error; `srcrawl --job j seed URL…` fetches one again)"
    )
    clean = {"pages": 3, "scheduled": 3}
    assert crawl_summary("j", clean, [])["all_fetched"] is True
    assert crawl_summary("j", clean, ["h:1"])["all_fetched"] is False
    assert summary_line(clean, "j").endswith("0 fetch errors")
    # hosts left deferred: their URLs are still queued, so the crawl is not complete
    assert summary_line(clean, "j", ["h:1"]).startswith("crawl ended: 3 pages")


def test_a_deferred_task_is_not_released_before_its_deferral_ends() -> None:
    from srcrawl.master.frontier.politeness import Politeness
    from srcrawl.master.frontier.rules import CrawlRules

    politeness = Politeness(CrawlRules(CrawlStrategy(delay=0, delay_factor=0, max_delay=0)))
    task = FetchTask("http://127.0.0.1:9/", 1, 1, "127.0.0.1:9")
    until = time.time() + 30.0004  # a deferral ending within a millisecond
    retry_at, lagging = politeness.deferred_at(Deferred(task, until, "HTTP 500"))
    assert retry_at / 1000 >= until and retry_at - until * 1000 < 1
    assert lagging == 1


def test_the_progress_shows_each_try_of_a_host_however_many_hosts_are_late(monkeypatch) -> None:
    import io

    from srcrawl.core.progress import ProgressLine
    from srcrawl.master import crawl_run
    from srcrawl.master.commands import HOST_ERRORS_SHOWN, _CrawlWatch

    hosts = [f"127.0.0.1:{9300 + i}" for i in range(HOST_ERRORS_SHOWN + 2)]
    tries = {"n": 1}

    def errors(cfg) -> dict:
        record = {"reason": "HTTP 500", "try": tries["n"], "tries": 5, "retry_at": time.time()}
        return {h: record for h in hosts}

    monkeypatch.setattr(crawl_run, "host_errors", errors)
    monkeypatch.setattr(crawl_run, "waiting_on", lambda cfg: None)
    out = io.StringIO()
    watch = _CrawlWatch(None, ProgressLine(out))
    progress = {"pages": 0, "queued": 1, "in_flight": 0}
    watch.report(progress, 1.0)
    tries["n"] = 2
    watch.report(progress, 2.0)
    said = out.getvalue()
    # the first HOST_ERRORS_SHOWN hosts are named, and each of them again at its next try
    assert said.count("(try 1 of 5)") == HOST_ERRORS_SHOWN
    assert said.count("(try 2 of 5)") == HOST_ERRORS_SHOWN


def test_a_url_whose_slave_failed_on_it_ends_as_a_row_with_its_reason(
    redis_url, keys, tmp_path
) -> None:
    """A slave's handler that fails on a task sends it back as a task error: its URL is
    stored as a row with error ``slave_error`` (unless it has a page already), counted,
    and named by the summary; a malformed task in the same error writes nothing."""
    from srcrawl.core.urls import fingerprint
    from srcrawl.master.crawl_summary import not_fetched
    from srcrawl.queues.crawl_protocol import TaskError

    cfg = Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": keys.job,
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        }
    )
    start_crawl(cfg, ["http://127.0.0.1:9/"], CrawlStrategy(max_depth=1))
    master = CrawlMaster.from_config(cfg)
    master.acquire(wait=False)
    url = "http://127.0.0.1:9/a.html"
    task = FetchTask(url=url, fp=fingerprint(url), depth=1, queue="127.0.0.1:9")
    master.process([TaskError("boom", (task.encode(), b"not a task")).encode()])
    (row,) = cfg.store().get_pages([task.fp])
    assert (row.url, row.error, row.depth, row.status) == (url, "slave_error", 1, 0)
    counters = {k.decode(): int(v) for k, v in cfg.redis().hgetall(cfg.keys.stats("crawl")).items()}
    assert not_fetched(counters) == {"slave_error": 1}
    master.release()
    cfg.close()
