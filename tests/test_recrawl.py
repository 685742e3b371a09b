"""Keeping the store fresh: a master with --keep-running fetches stored pages again.

A test web whose pages change on a seeded schedule (srcrawl/testweb/changes.py)
is crawled by a real master and slave; what the store holds is compared with
the version the schedule says is live, what the server answered is read from
its access log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from srcrawl.core.keys import Keys, processing_pattern
from srcrawl.indexer.search import Searcher
from srcrawl.queues.crawl_protocol import FetchTask, sitemap_task
from srcrawl.queues.envelope import decode
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.testweb.changes import CHANGING, GONE, STATIC, ChangeSchedule, live_version
from srcrawl.testweb.changes import version_of_etag as etag_version
from srcrawl.warc.read import read_payload
from srcrawl.warc.records import NOT_MODIFIED_PROFILE, REVISIT_PROFILE, payload_digest, warc_date
from srcrawl.warc.storage import LocalWarcStorage, Pointer

from .conftest import cli_env, logged_requests, run_cli
from .test_lifecycle import CLI
from .test_warc import _all_records, _warcio_check

pytestmark = pytest.mark.slow  # every test here runs for more than a second

POLITE = [
    "--delay",
    "0.05",
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    "2",
    "--robots-defer",
    "0.3",
    "--depth",
    "5",
]
REVISIT = ["--revisit", "1s", "--min-revisit", "1s", "--max-revisit", "2s"]
MARGIN = 2.0
"""Seconds beyond the longest interval within which a new version must be stored."""


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "a")  # noqa: SIM115 - the child holds it
    return subprocess.Popen(
        [*CLI, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)


def regular(tw: TestWeb) -> dict[str, str]:
    """URL → kind (static, changing, gone) of the pages the schedule may change."""
    sched = tw.web.changes
    assert sched is not None
    host = tw.base_url(1)
    return {
        u: sched.kind(u)[0]
        for u, p in tw.web.pages.items()
        if p.template == "regular" and u.startswith(host + "/")
    }


def stored(cfg: Config) -> dict[str, object]:
    return {p.url: p for p in cfg.store().iter_pages()}


def stored_version(page) -> int | None:  # type: ignore[no-untyped-def]
    return None if page.status in (404, 410) else etag_version(page.etag)


def wait_until(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def assert_fresh(tw: TestWeb, pages: dict, now: float, interval: float) -> None:
    """Every page the schedule changes is stored in a version at least as new as the one
    live ``interval`` + MARGIN seconds ago (a page gone by then: stored as 404/410)."""
    then = now - interval - MARGIN
    for url in regular(tw):
        if url not in pages:
            continue
        live, have = live_version(tw.web, url, then), stored_version(pages[url])
        if have is None:  # stored as gone: it must be gone
            assert live_version(tw.web, url, now) is None, (url, pages[url].status)
        else:
            assert live is not None and have >= live, (url, have, live)


@pytest.fixture
def changing(tmp_path: Path):
    # host 1 is crawled (host 0 has the special pages: slow ones, traps), its
    # Crawl-delay short. A page's kind hangs on its URL, port included, and the ports
    # are drawn free: the first schedule whose 12 pages have every kind is taken.
    for seed in range(4, 24):
        sched = ChangeSchedule(
            start=time.time(), seed=seed, changing=0.4, gone=0.25, periods=(3.0,), gone_after=14.0
        )
        web = TestWeb.generate(
            hosts=2,
            pages=12,
            seed=9,
            changes=sched,
            flush_interval=0.2,
            crawl_delay=0.05,
            access_log=tmp_path / "access.log",
        )
        with web as tw:
            kinds = Counter(regular(tw).values())
            if kinds[STATIC] and kinds[CHANGING] and kinds[GONE]:
                yield tw
                return
    pytest.fail(f"no change schedule gave every kind of page: {kinds}")


@pytest.mark.slow
def test_a_running_crawl_keeps_the_store_fresh_with_304s_and_drops_gone_pages(
    changing, redis_url, keys, tmp_path
) -> None:
    tw = changing
    env = cli_env(redis_url, keys.job, tmp_path)
    log = tmp_path / "crawl.log"
    master = start(
        ["master", "start", tw.seed_urls[1], *POLITE, *REVISIT, "--keep-running"], env, log
    )
    slave = start(["slave", "start", "--threads", "4"], env, log)
    cfg = Config.load(env=env)
    urls = regular(tw)
    try:
        wait_until(lambda: set(urls) <= set(stored(cfg)), 30, "the first crawl did not end")
        r = run_cli(["index", "--slaves", "1", "--json"], env)
        assert r.returncode == 0, r.stderr[-2000:]
        searcher = Searcher(cfg.store(), cfg.index_path)
        found = {u for u, k in urls.items() if k == GONE and _finds(searcher, tw, u)}
        assert found, "no page that goes away was indexed before it went"
        first = _indexed(cfg)
        sched = tw.web.changes
        assert sched is not None
        gone_by = sched.start + sched.gone_after + 2.0 + MARGIN
        time.sleep(max(0.0, gone_by - time.time()))
        pages = stored(cfg)
        assert_fresh(tw, pages, time.time(), 2.0)
    finally:
        stop(slave)
        stop(master)
    assert master.returncode == 0, log.read_text()[-3000:]
    # an unchanged page is answered 304 and neither stored nor indexed again
    entries = tw.log_entries()
    static = [u for u, k in urls.items() if k == STATIC]
    for url in static:
        statuses = Counter(e["status"] for e in entries if e["url"] == url)
        assert statuses[304] >= 2 and statuses[200] == 1, (url, statuses)
        assert pages[url].fetched_at < pages[url].checked_at
    after = _indexed(cfg)
    assert all(after[u] == first[u] is not None for u in static if u in first)
    assert sum(e["bytes"] for e in entries if e["status"] == 304) == 0
    # a page that went away leaves the search results at the next index pass
    r = run_cli(["index", "--slaves", "1", "--json"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["removed"] >= len(found)
    searcher = Searcher(cfg.store(), cfg.index_path)
    assert not [u for u in found if _finds(searcher, tw, u)]
    changed = [u for u, k in urls.items() if k == CHANGING]
    assert all(_finds(searcher, tw, u) for u in changed)  # new versions keep their terms
    cfg.close()


def _revisits(paths: list[Path]) -> list[tuple]:
    """(WARC headers, HTTP headers) of each revisit record of ``paths``, each checked: right
    after its request, naming an existing response record of its URI, by the profile of
    its status (304: server-not-modified; else identical-payload-digest)."""
    responses, revisits = {}, []
    for path in paths:
        records = _all_records(path)
        for i, (kind, head, http) in enumerate(records):
            if kind == "response":
                responses[head.get_header("WARC-Record-ID")] = head
            elif kind == "revisit":  # written in place of the response: after its request
                before, request, _h = records[i - 1]
                assert before == "request" and request.get_header("WARC-Target-URI") == (
                    head.get_header("WARC-Target-URI")
                )
                assert request.get_header("WARC-Concurrent-To") == head.get_header("WARC-Record-ID")
                revisits.append((head, http))
    for head, http in revisits:
        original = responses[head.get_header("WARC-Refers-To")]  # an existing response
        assert original.get_header("WARC-Target-URI") == head.get_header("WARC-Target-URI")
        assert head.get_header("WARC-Refers-To-Date") == original.get_header("WARC-Date")
        if http.get_statuscode() == "304":
            assert head.get_header("WARC-Profile") == NOT_MODIFIED_PROFILE
            assert head.get_header("WARC-Payload-Digest") is None
        else:
            assert head.get_header("WARC-Profile") == REVISIT_PROFILE
            assert head.get_header("WARC-Payload-Digest") == original.get_header(
                "WARC-Payload-Digest"
            )
    return revisits


def _dates_by_url(revisits: list) -> dict[str, set[str]]:
    """URL → the WARC-Date of each of its revisit records."""
    dates: dict[str, set[str]] = {}
    for head, _http in revisits:
        dates.setdefault(head.get_header("WARC-Target-URI"), set()).add(
            head.get_header("WARC-Date")
        )
    return dates


def _assert_rows_read(store, storage: LocalWarcStorage, pages: dict) -> None:
    """Each stored row's WARC pointer reads the payload it names, and its text is there."""
    for page in pages.values():
        if page.warc_file:
            pointer = Pointer(page.warc_file, page.warc_offset, page.warc_length)
            assert payload_digest(read_payload(storage, pointer)) == page.payload_digest
        if page.text_length:
            assert store.page_text(page)


@pytest.fixture
def still():
    """The changing web's twin that never changes and sends no validators: a recrawl of
    one of its pages is a 200 with the stored body."""
    with TestWeb.generate(hosts=2, pages=12, seed=9, crawl_delay=0.05) as tw:
        yield tw


def test_unchanged_recrawls_leave_request_and_revisit_records(
    changing, still, redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    log = tmp_path / "crawl.log"
    seeds = [changing.seed_urls[1], still.seed_urls[1]]
    master = start(["master", "start", *seeds, *POLITE, *REVISIT, "--keep-running"], env, log)
    slave = start(["slave", "start", "--threads", "4"], env, log)
    cfg = Config.load(env=env)
    static = [u for u, k in regular(changing).items() if k == STATIC]  # answered 304
    plain = [
        u
        for u, p in still.web.pages.items()  # answered 200, the same body
        if p.template == "regular" and u.startswith(still.base_url(1) + "/")
    ]

    def rechecked() -> bool:
        pages = stored(cfg)
        return all(u in pages and pages[u].checked_at for u in static + plain)

    try:
        wait_until(rechecked, 40, "an unchanged page was not fetched again")
    finally:
        stop(slave)
        stop(master)
    assert master.returncode == 0, log.read_text()[-3000:]
    storage = LocalWarcStorage(cfg.warc_root)
    paths = [storage.path(n) for n in storage.names(keys.job)]
    _warcio_check(paths)
    revisits = _revisits(paths)
    dates = _dates_by_url(revisits)
    # each unchanged page's last check left its revisit; its row still reads body and text
    store = cfg.store()
    pages = stored(cfg)
    for url in static + plain:
        page = pages[url]
        assert warc_date(page.checked_at) in dates[url], url
    _assert_rows_read(store, storage, pages)
    # as many server-not-modified revisits as 304s the server sent (but for fetches the
    # slave dropped when it stopped), and a 200 with the same body is one too
    sent = Counter(e["url"] for e in logged_requests(changing) if e["status"] == 304)
    kept = Counter(
        h.get_header("WARC-Target-URI")
        for h, http in revisits
        if h.get_header("WARC-Profile") == NOT_MODIFIED_PROFILE
    )
    assert all(0 < kept[u] <= sent[u] for u in static), (kept, sent)
    assert sum(sent.values()) - 4 <= sum(kept.values()) <= sum(sent.values())
    assert all(
        h.get_header("WARC-Profile") == REVISIT_PROFILE
        for h, _http in revisits
        if h.get_header("WARC-Target-URI") in plain
    )
    cfg.close()


def _indexed(cfg: Config) -> dict[str, float | None]:
    """URL → indexed_at of every stored page."""
    return dict(cfg.store()._query("SELECT url, indexed_at FROM pages"))


def _finds(searcher: Searcher, tw: TestWeb, url: str) -> bool:
    term = tw.web.pages[url].terms[0]
    return url in [h.url for h in searcher.search(term, top=5).hits]


_SNAPSHOT = """
local out = {redis.call('ZRANGE', KEYS[1], 0, -1), redis.call('HVALS', KEYS[2])}
local keys = {ARGV[1], ARGV[2]}
for i = 3, #ARGV do
  for _, key in ipairs(redis.call('KEYS', ARGV[i])) do table.insert(keys, key) end
end
for _, key in ipairs(keys) do
  if redis.call('TYPE', key).ok == 'list' then
    table.insert(out, key)
    table.insert(out, redis.call('LRANGE', key, 0, -1))
  end
end
return out
"""


def scheduled(cfg: Config) -> Counter:
    """fp → how many times the crawl holds a task or outcome of it, read atomically:
    the recrawl schedule, host queues, tasks in flight, srq and nrq with their
    processing lists."""
    client, k = cfg.redis(), cfg.keys
    # one script: the lists are found and read in one atomic step (a SCAN before the
    # read would miss a processing list a restarted slave makes in between)
    patterns = [
        f"{k.crawl_queue_prefix}*",
        *(processing_pattern(q) for q in (k.srq("crawl"), k.nrq("crawl"))),
    ]
    found = client.eval(
        _SNAPSHOT, 2, k.crawl_due, k.crawl_inflight, k.srq("crawl"), k.nrq("crawl"), *patterns
    )
    due, inflight, named = found[0], found[1], found[2:]
    lists = [key.decode() for key in named[0::2]]
    queued = named[1::2]
    held: Counter = Counter(int(fp) for fp in due)
    # a task in flight is held twice by design: its host queue's slot (crawl:inflight)
    # keeps it from release to commit, while the task itself moves through srq, a
    # slave's processing list and, as its outcome, nrq; it counts once
    flying = Counter(_fps(inflight))
    moving = Counter(
        _fps(m for key, q in zip(lists, queued, strict=True) if _moving(key, k) for m in q)
    )
    held.update(
        _fps(m for key, q in zip(lists, queued, strict=True) if not _moving(key, k) for m in q)
    )
    for fp in flying.keys() | moving.keys():
        held[fp] += max(flying[fp], moving[fp])
    return held


def _moving(key: str, k: Keys) -> bool:
    """Whether ``key`` is srq or nrq or one of their processing lists."""
    return any(key == q or key.startswith(q + ":") for q in (k.srq("crawl"), k.nrq("crawl")))


def _fps(raws) -> list[int]:
    return [FetchTask.from_message(m).fp for m in map(decode, raws) if m.kind != "seed"]


@pytest.mark.slow
def test_master_and_slave_kills_during_recrawl_keep_each_page_once_and_latest(
    changing, redis_url, keys: Keys, tmp_path
) -> None:
    tw = changing
    env = cli_env(redis_url, keys.job, tmp_path)
    log = tmp_path / "crawl.log"
    args = ["master", "start", tw.seed_urls[1], *POLITE, *REVISIT, "--keep-running"]
    master = start(args, env, log)
    # a killed slave's tasks come back when its heartbeat lapses and the master reaps it
    short = ["slave", "start", "--threads", "4", "--heartbeat-ttl", "1"]
    slave = start(short, env, log)
    cfg = Config.load(env=env)
    try:
        wait_until(lambda: set(regular(tw)) <= set(stored(cfg)), 30, "the crawl did not end")
        for victim in ("slave", "master", "slave", "master"):
            time.sleep(1.5)  # recrawls in flight
            if victim == "slave":
                stop(slave, signal.SIGKILL)
                slave = start(short, env, log)
            else:
                stop(master, signal.SIGKILL)
                master = start(["master", "start", "--keep-running"], env, log)
        time.sleep(2.0 + MARGIN + 4.0)
        pages = stored(cfg)
        assert_fresh(tw, pages, time.time(), 2.0 + 4.0)  # + TTL and reaping
        held = scheduled(cfg)
    finally:
        stop(slave)
        stop(master)
    fps = {p.fp for p in pages.values()}
    assert len(fps) == len(pages) == cfg.store().count("pages")
    # every stored page is on the schedule, queued or in flight exactly once
    doubled = {fp: n for fp, n in held.items() if n > 1}
    assert not doubled, doubled
    # and so is the task that reads the host's sitemaps again
    assert held.pop(sitemap_task(tw.base_url(1), "").fp) == 1
    assert set(held) == fps
    cfg.close()
