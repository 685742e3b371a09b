"""`srcrawl pagerank --every`: ranks recomputed on a schedule while searches keep getting
ranked results, the previous ranks until the new ones replace them at once (real processes)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from srcrawl.core.urls import fingerprint
from srcrawl.indexer.search import Searcher
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.sql.pages import Page
from srcrawl.sql.store import open_store

from .conftest import cli_env, run_cli

PAGES = 40


def _store_web(store) -> list[int]:
    """PAGES pages about the same thing, page i linking to i+1 and to page 0."""
    urls = [f"http://127.0.0.1:9/p{i}" for i in range(PAGES)]
    fps = [fingerprint(u) for u in urls]
    pages = [
        Page(
            fp=fp,
            url=u,
            host="127.0.0.1:9",
            fetched_at=1.0,
            title=f"p{i}",
            text=f"orchards and apples, page {i}",
        )
        for i, (u, fp) in enumerate(zip(urls, fps, strict=True))
    ]
    links = [(fps[i], fps[(i + 1) % PAGES]) for i in range(PAGES)]
    links += [(fps[i], fps[0]) for i in range(1, PAGES)]
    store.save_fetched(pages, links)
    return fps


def _ranked_search(store, index) -> None:
    """One search as the portal runs it: every hit found, PageRank blended."""
    searcher = Searcher(store, index, tokenizer=get_tokenizer(None))
    result = searcher.search("orchards apples", top=5)
    assert result.ranked and len(result.hits) == 5


def test_a_search_during_a_rank_swap_sees_the_previous_ranks(tmp_path) -> None:
    db = DatabaseURL(kind="sqlite", path=str(tmp_path / "s.db"))
    writer, reader = open_store(db), open_store(db)
    writer.init_schema()
    fps = _store_web(writer)
    writer.replace_ranks((fp, 1.0) for fp in fps)
    # a recompute caught halfway: old ranks deleted, half the new ones written, not committed
    with writer.transaction() as cur:
        cur.execute("DELETE FROM ranks")
        new = [(fp, 2.0) for fp in fps[:5]]
        cur.executemany("INSERT INTO ranks (fp, score) VALUES (?, ?)", new)
        assert reader.page_ranks(fps) == dict.fromkeys(fps, 1.0)  # all of the previous ones
        assert reader.rank_mean() == 1.0
    assert reader.page_ranks(fps) == dict.fromkeys(fps[:5], 2.0)  # then all of the new ones
    writer.close()
    reader.close()


@pytest.mark.slow
def test_pagerank_every_recomputes_while_searches_stay_ranked(redis_url, keys, tmp_path) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    store = open_store(DatabaseURL.parse(env["SRCRAWL_DB_URL"]))
    store.init_schema()
    _store_web(store)
    indexed = run_cli(["index", "--slaves", "1"], env, timeout=120)
    assert indexed.returncode == 0, indexed.stderr
    cmd = [sys.executable, "-m", "srcrawl.app.cli", "pagerank", "--every", "1s", "--slaves", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while store.get_job(keys.job, "pagerank") is None:
            assert time.monotonic() < deadline and proc.poll() is None, "no first run"
            time.sleep(0.05)
        while (store.get_job(keys.job, "pagerank") or {}).get("state") != "complete":
            assert time.monotonic() < deadline and proc.poll() is None, "no first ranks"
            time.sleep(0.05)
        finished, searches = set(), 0
        while len(finished) < 3:  # searches through two recomputes after the first
            assert time.monotonic() < deadline and proc.poll() is None, "no recompute"
            _ranked_search(store, Config.load(env=env).index_path)
            searches += 1
            job = store.get_job(keys.job, "pagerank")
            if job["state"] == "complete":
                finished.add(job["finished_at"])
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "run 3, next in 1 s" in out and "pagerank --every stopped after" in out
    assert searches > 10
    top = run_cli(["export", "ranks", "--limit", "1"], env)
    assert top.stdout.startswith("http://127.0.0.1:9/p0\t")  # every page links to p0
    store.close()


@pytest.mark.slow
def test_pagerank_every_ranks_the_first_pages_as_soon_as_they_are_stored(
    redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    store = open_store(DatabaseURL.parse(env["SRCRAWL_DB_URL"]))
    store.init_schema()
    cmd = [
        sys.executable,
        "-m",
        "srcrawl.app.cli",
        "pagerank",
        "--every",
        "1h",
        "--poll",
        "0.5s",
        "--slaves",
        "1",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # started on an empty store: it waits, and ranks nothing
        assert proc.poll() is None
        assert store.get_job(keys.job, "pagerank") is None and store.count("ranks") == 0
        stored_at = time.monotonic()
        _store_web(store)
        # ranked within seconds of the first pages, not an hour later
        while store.count("ranks") < PAGES:
            assert time.monotonic() - stored_at < 60 and proc.poll() is None, "no first ranks"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "no pages and links yet; looking again every 0.5 s" in err
    assert "run 1, next in 3600 s" in out and "stopped after 1 run(s)" in out
    assert store.get_job(keys.job, "pagerank")["state"] == "complete"
    store.close()
