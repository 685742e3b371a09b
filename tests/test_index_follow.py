"""`srcrawl index --follow`: pages stored while it runs become searchable within its delay,
a page stored again is indexed again, and SIGTERM ends it cleanly (real processes)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time

import pytest
import redis

from srcrawl.core.keys import Keys
from srcrawl.core.urls import fingerprint
from srcrawl.indexer.freshness import Freshness
from srcrawl.indexer.search import QueryError, Searcher
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.sql.pages import Page
from srcrawl.sql.store import open_store

from .conftest import cli_env, run_cli

MAX_DELAY = 2.0
# a loaded 2-core machine may add the slave's tokenizing and a busy merge on top
SLACK = 4.0


def _page(name: str, text: str) -> Page:
    url = f"http://127.0.0.1:9/{name}"
    return Page(
        fp=fingerprint(url),
        url=url,
        host="127.0.0.1:9",
        fetched_at=time.time(),
        title=name,
        text=text,
    )


def _wait_searchable(searcher: Searcher, word: str, url: str, deadline: float) -> float:
    """Seconds until ``word`` finds ``url``; fails at ``deadline``."""
    t0 = time.monotonic()
    while time.monotonic() < deadline:
        with contextlib.suppress(QueryError):  # an empty index, before the first merge
            if any(h.url == url for h in searcher.search(word, top=5).hits):
                return time.monotonic() - t0
        time.sleep(0.05)
    pytest.fail(f"{url} never became searchable for {word!r}")


@pytest.mark.slow
def test_follow_indexes_new_and_refetched_pages_then_stops_on_sigterm(
    redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    db = DatabaseURL.parse(env["SRCRAWL_DB_URL"])
    store = open_store(db)
    store.init_schema()
    store.save_fetched([_page("old", "an old page about lighthouses")], [])
    cmd = [
        sys.executable,
        "-m",
        "srcrawl.app.cli",
        "index",
        "--follow",
        "--slaves",
        "1",
        "--max-delay",
        f"{MAX_DELAY:g}s",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    searcher = Searcher(store, Config.load(env=env).index_path, tokenizer=get_tokenizer(None))
    try:
        _wait_searchable(searcher, "lighthouses", "http://127.0.0.1:9/old", time.monotonic() + 60)
        delays = []
        for wave in range(3):
            new = _page(f"new{wave}", f"fresh news number{wave} about zeppelins")
            store.save_fetched([new], [])
            bound = time.monotonic() + MAX_DELAY + SLACK
            delays.append(_wait_searchable(searcher, f"number{wave}", new.url, bound))
        # fetched again with other text: indexed_at reset, indexed again, old words gone
        store.save_fetched([_page("old", "the same address now about submarines")], [])
        bound = time.monotonic() + MAX_DELAY + SLACK
        delays.append(_wait_searchable(searcher, "submarines", "http://127.0.0.1:9/old", bound))
        assert not searcher.search("lighthouses").hits
        client = redis.Redis.from_url(redis_url)
        counters = _wait_counters(client, Keys(keys.job))
        assert 0 < float(counters[b"delay_p95_s"]) <= MAX_DELAY + SLACK
        assert int(counters[b"fresh_pages"]) >= 4
        assert proc.poll() is None  # following: it does not end on its own
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "4 pages stored meanwhile became searchable: delay p50" in out
    assert "index --follow stopped: delay p50" in err
    job = store.get_job(keys.job, "index")
    assert job["state"] == "stopped" and job["stats"]["freshness"]["fresh_pages"] == 4
    assert max(delays) <= MAX_DELAY + SLACK
    assert client.get(Keys(keys.job).master_lease("index")) is None  # let go of on the way out
    status = run_cli(["status", "--json"], env)
    assert json.loads(status.stdout)["phases"]["index"]["counters"]["fresh_pages"] == 4
    store.close()


def _wait_counters(client: redis.Redis, keys: Keys) -> dict:
    """The index phase's counters once the master has published its delay figures."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        counters = client.hgetall(keys.stats("index"))
        if int(counters.get(b"fresh_pages", 0)) >= 4:
            return counters
        time.sleep(0.1)
    pytest.fail("the follow master never published its delay figures")


def test_freshness_counts_only_pages_stored_after_it_started() -> None:
    fresh = Freshness(since=100.0, samples=3)
    fresh.add([50.0, 101.0, 102.0], committed=103.0)  # 50: a backlog page, not counted
    assert fresh.pages == 2 and fresh.percentile(50) == pytest.approx(1.5)
    fresh.add([103.0, 103.5], committed=104.0)  # the window keeps the last 3
    assert list(fresh.delays) == [1.0, 1.0, 0.5] and fresh.pages == 4
    assert fresh.summary()["delay_max_s"] == 1.0
    assert Freshness(since=0.0).sentence() == "no new page yet"
