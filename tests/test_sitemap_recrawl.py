"""A sitemap's ``<lastmod>`` moves a page's next fetch earlier.

The frontier's commit alone (a page waiting on the schedule is due now when its
``<lastmod>`` is newer than its last fetch, and only then), and a real always-on
crawl of a changing test web whose hosts serve sitemaps of their pages' live
versions, read again every --sitemap-every by a task of each host's own.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from srcrawl.core.urls import fingerprint as fingerprint_of
from srcrawl.master.crawl_master import CrawlMaster, reset_crawl
from srcrawl.master.crawl_run import start_crawl
from srcrawl.master.frontier import Batch, Requeue, now_ms
from srcrawl.master.frontier.recrawl import record_lastmod
from srcrawl.queues.change_rate import ChangeHistory
from srcrawl.queues.crawl_protocol import Fetched, FetchTask
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.settings.config import Config
from srcrawl.slave.sitemaps import parse_sitemap
from srcrawl.testweb import TestWeb
from srcrawl.testweb.changes import CHANGING, STATIC, ChangeSchedule, live_sitemap

from .conftest import cli_env
from .test_crawl_per_host import _frontier
from .test_recrawl import regular, start, stop, wait_until

HOUR = 3_600_000


def _on_schedule(frontier, at_ms: int, *fps: int, history: bool = False) -> None:
    """Pages fetched at ``at_ms``, due an hour later."""
    batch = Batch()
    for fp in fps:
        hist = ChangeHistory(1, 0, 10, at_ms / 1000) if history else None
        task = FetchTask(f"http://h/{fp}", fp, 0, "h", revisit=3600.0, history=hist)
        batch.due.append(Requeue(task, at_ms + HOUR))
    frontier.commit(batch, b"")


def test_a_newer_lastmod_makes_a_scheduled_page_due_now_and_nothing_else(
    redis_client, keys
) -> None:
    frontier, _srq = _frontier(redis_client, keys)
    fetched = now_ms() - 60_000
    _on_schedule(frontier, fetched, 1, 2)
    _on_schedule(frontier, fetched, 3, history=True)  # the slave's fetch time is in its record
    batch = Batch()
    batch.sooner = {1: fetched + 5_000, 2: fetched - 5_000, 3: fetched + 1, 4: fetched + 5_000}
    frontier.commit(batch, b"")
    due = dict(redis_client.zrange(keys.crawl_due, 0, -1, withscores=True))
    assert due[b"1"] <= now_ms() and due[b"3"] <= now_ms()  # changed since their fetch
    assert due[b"2"] > now_ms() + HOUR - 120_000  # the sitemap names the version stored
    assert b"4" not in due  # not waiting on the schedule (queued, in flight): left alone
    assert int(redis_client.hget(keys.stats("crawl"), "sitemap_sooner")) == 2
    assert frontier.release_due(100)[0] == 2
    # a page that changed less than a fetch's worth after its fetch is left where it is
    _on_schedule(frontier, fetched, 5)
    little = Batch(value=10_000)
    little.sooner = {5: fetched + 5_000}
    frontier.commit(little, b"")
    assert redis_client.zscore(keys.crawl_due, "5") > now_ms() + HOUR - 120_000
    redis_client.zrem(keys.crawl_due, "5")
    # the same lastmod read again moves nothing: the page is queued, not on the schedule
    frontier.commit(batch, b"")
    assert int(redis_client.hget(keys.stats("crawl"), "sitemap_sooner")) == 2
    assert redis_client.zcard(keys.crawl_due) == 1


def test_a_crawl_reset_forgets_the_sitemaps_lastmod(redis_url, keys, tmp_path) -> None:
    cfg = Config.load(env=cli_env(redis_url, keys.job, tmp_path))
    client = cfg.redis()
    record_lastmod(client, cfg.keys, [(1, 100.0), (2, 200.0)])
    assert client.hlen(cfg.keys.sitemap_lastmod) == 2
    reset_crawl(cfg)
    assert not client.exists(cfg.keys.sitemap_lastmod)
    cfg.close()


def test_the_changing_web_serves_its_live_lastmods() -> None:
    sched = ChangeSchedule(
        start=1000.0, seed=3, changing=0.5, gone=0.0, periods=(4.0,), sitemap=True
    )
    with TestWeb.generate(hosts=2, pages=15, seed=1, changes=sched) as tw:
        origin = tw.base_url(1)
        kinds = regular(tw)
        assert any("&" in url for url in kinds)  # written as &amp;
        parsed = parse_sitemap(live_sitemap(tw.web, origin, 1009.5), 1000)
        assert not parsed.malformed
        lastmods = dict(parsed.pages)
        assert set(lastmods) == set(kinds)
        for url, kind in kinds.items():
            assert lastmods[url] == (1008.0 if kind == CHANGING else 1000.0), url


# every page waits a minute to be fetched again; the sitemap is read again every 2 s,
# robots.txt only once (it stays cached an hour)
_REVISIT_BY_SITEMAP = [
    *("--delay", "0.05", "--delay-factor", "0", "--max-delay", "1", "--depth", "5"),
    *("--revisit", "60s", "--revisit-policy", "uniform", "--sitemap-every", "2s"),
    "--keep-running",
]


@pytest.mark.slow
def test_a_page_whose_lastmod_moves_is_fetched_before_its_revisit(
    redis_url, keys, tmp_path: Path
) -> None:
    sched = ChangeSchedule(
        start=time.time(), seed=4, changing=0.5, gone=0.0, periods=(3.0,), sitemap=True
    )
    with TestWeb.generate(
        hosts=2,
        pages=8,
        seed=9,
        changes=sched,
        flush_interval=0.2,
        crawl_delay=0.05,
        access_log=tmp_path / "access.log",
    ) as tw:
        kinds = regular(tw)
        env = cli_env(redis_url, keys.job, tmp_path)
        log = tmp_path / "crawl.log"
        master = start(["master", "start", tw.seed_urls[1], *_REVISIT_BY_SITEMAP], env, log)
        slave = start(["slave", "start", "--threads", "4"], env, log)
        cfg = Config.load(env=env)
        try:
            t0 = time.time()
            # a change moves a page only 0.1 × --revisit = 6 s after its fetch (a fetch's
            # worth), so the next change, the sitemap read after it and the commit make 8-11 s
            # here on a quiet machine; 40 s leaves room for a loaded one, far from the minute
            wait_until(
                lambda: _fetches(tw, kinds, CHANGING) >= 2, 40, "no changing page was fetched again"
            )
            took = time.time() - t0
            time.sleep(1.0)
            stats = {
                k.decode(): int(v) for k, v in cfg.redis().hgetall(cfg.keys.stats("crawl")).items()
            }
        finally:
            stop(slave)
            stop(master)
        assert took < 40  # far before the minute the schedule gave every page
        assert stats.get("sitemap_sooner", 0) >= 1, stats
        assert stats.get("sitemaps_fetched", 0) >= 2, stats  # read again, not only once
        assert stats.get("sitemap_rereads", 0) >= 1, stats
        asked = Counter(e["url"].rsplit("/", 1)[-1] for e in tw.log_entries())
        assert asked["robots.txt"] == 1 and asked["sitemap.xml"] >= 2, asked
        # a page that never changes is never fetched again before its minute
        entries = tw.log_entries()
        static = [(e["url"], e["status"]) for e in entries if kinds.get(e["url"]) == STATIC]
        assert _fetches(tw, kinds, STATIC) == 1, (static, stats)
        cfg.close()


def _fetches(tw: TestWeb, kinds: dict[str, str], kind: str) -> int:
    """The most requests any page of ``kind`` had."""
    counts = Counter(e["url"] for e in tw.log_entries() if kinds.get(e["url"]) == kind)
    return max(counts.values(), default=0)


def test_a_page_its_sitemap_told_right_waits_longest_and_a_wrong_one_is_not_moved(
    redis_url, keys, tmp_path
) -> None:
    cfg = Config.load(env=cli_env(redis_url, keys.job, tmp_path))
    strategy = CrawlStrategy(revisit=10, min_revisit=1, max_revisit=1000)
    start_crawl(cfg, ["http://127.0.0.1:9/"], strategy)
    master = CrawlMaster.from_config(cfg)
    master.acquire()
    before = time.time() - 100

    def fetched(name: str, changed: bool) -> bytes:
        url = f"http://127.0.0.1:9/{name}"
        fp = fingerprint_of(url)
        task = FetchTask(
            url, fp, 0, "127.0.0.1:9", revisit=10.0, history=ChangeHistory(2, 1, 20, before)
        )
        nxt = replace(task, history=ChangeHistory(3, 2, 120, time.time()))
        return Fetched(task, 200, 1.0, next=nxt, changed=changed).encode()

    # right found unchanged, wrong changed; later changed after its fetch: it tells nothing
    told = {"right": before - 50, "wrong": before - 50, "later": time.time() + 5}
    record_lastmod(
        cfg.redis(),
        cfg.keys,
        [(fingerprint_of(f"http://127.0.0.1:9/{n}"), t) for n, t in told.items()],
    )
    master.process(
        [
            fetched("right", False),
            fetched("wrong", True),
            fetched("none", False),
            fetched("later", False),
        ]
    )
    due = {
        int(fp): t / 1000 - time.time()
        for fp, t in cfg.redis().zrange(cfg.keys.crawl_due, 0, -1, withscores=True)
    }
    right, wrong, later, none = (
        fingerprint_of(f"http://127.0.0.1:9/{n}") for n in told | {"none": 0}
    )
    assert 990 < due[right] <= 1000  # its sitemap tells when it changes: --max-revisit
    assert max(due[wrong], due[later], due[none]) <= 10  # their own interval
    # a newer lastmod moves the page its sitemap told right, not the one it told wrong
    sooner = Batch()  # a lastmod a second after the fetch: more than a fetch's worth (1 ms)
    sooner.sooner = {fp: int(time.time() * 1000) + 1000 for fp in (right, wrong)}
    master.frontier.commit(sooner, b"")
    due = dict(cfg.redis().zrange(cfg.keys.crawl_due, 0, -1, withscores=True))
    assert due[str(right).encode()] <= now_ms() < due[str(wrong).encode()]
    stats = master.counters()
    assert stats["sitemap_watched"] == 1 and stats["sitemap_lastmod_wrong"] == 1
    master.release()
    cfg.close()
