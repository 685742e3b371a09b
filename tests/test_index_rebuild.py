"""`srcrawl index --rebuild` over real Redis, SQLite/MariaDB and Tantivy: an index built
before the stored text is rebuilt with it and the same hits; searches answer from the old
index until the new one is complete; refused while another index master runs; the marks
end consistent with the new index (a plain `srcrawl index` has nothing to do after)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from index_pages import FILLER
from tantivy_index import index_in_process, schema_before_stored_text

from srcrawl.app.cli import cli
from srcrawl.core.urls import fingerprint
from srcrawl.indexer import rebuild as rebuild_module
from srcrawl.indexer.engine import has_stored_text
from srcrawl.indexer.master import IndexerError
from srcrawl.indexer.published import IndexObjects, held_commit
from srcrawl.indexer.rebuild import IndexRebuild, replace_directory, staging_path
from srcrawl.indexer.replica import IndexReplica
from srcrawl.indexer.search import Searcher
from srcrawl.indexer.slave import IndexHandler
from srcrawl.settings.config import Config
from srcrawl.slave.runtime import Slave
from srcrawl.sql.pages import Page

MENU = "Home Prev Up Next Contents"
QUERIES = ["vacuum step 3", "library", "search engines", "网页 排序", "distributed queues"]


def make_page(name: str, text: str, fetched_at: float = 1.0) -> Page:
    url = f"http://127.0.0.1:9/{name}"
    return Page(fp=fingerprint(url), url=url, host="127.0.0.1:9", fetched_at=fetched_at, text=text)


PAGES = [make_page(f"p{i}", f"{MENU} {FILLER[i % 5]} 第{i}页") for i in range(8)]
PAGES[3] = make_page("p3", f"{MENU} vacuum tuning, step 3. {FILLER[3]}")


@pytest.fixture
def cfg(db_url, redis_url, keys, tmp_path) -> Iterator[Config]:
    c = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    yield c
    c.close()


@pytest.fixture
def old_index(cfg: Config, store, monkeypatch):
    """PAGES stored and indexed, marked, in an index built before the stored text."""
    store.put_pages(PAGES)
    with monkeypatch.context() as m:
        m.setattr("srcrawl.indexer.engine.schema", schema_before_stored_text)
        index_in_process(store, cfg.index_path)
    return cfg.index_path


@contextlib.contextmanager
def index_slave(cfg: Config) -> Iterator[None]:
    """An index slave in a thread of this process, on connections of its own."""
    own = Config(redis_url=cfg.redis_url, db=cfg.db, job=cfg.job, home=cfg.home)
    slave = Slave.from_config(own, [IndexHandler.from_config(own)], block_timeout=0.1)
    thread = threading.Thread(target=slave.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        slave.stopping.set()
        thread.join(timeout=10)
        own.close()


def run_index(cfg: Config, *args: str) -> Result:
    """`srcrawl index --slaves 0 --json ARGS` on ``cfg``'s services, in this process (slaves:
    index_slave)."""
    services = ["--redis-url", cfg.redis_url, "--db-url", cfg.db.url(), "--job", cfg.job]
    env = {"SRCRAWL_INDEX_DIR": cfg.index_url} if cfg.index_url else {}
    return CliRunner().invoke(
        cli,
        [*services, "--home", str(cfg.home), "index", "--slaves", "0", "--json", *args],
        env=env,
    )


def report_of(result: Result) -> dict:
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(next(ln for ln in result.stdout.splitlines() if ln.startswith("{")))


def urls(searcher: Searcher, query: str) -> list[str]:
    return [h.url for h in searcher.search(query).hits]


def stores_text(searcher: Searcher) -> bool:
    return has_stored_text(searcher.reader.index)


def test_an_index_without_stored_texts_is_rebuilt_with_them_and_the_same_hits(
    cfg, store, old_index
) -> None:
    before = Searcher(store, old_index)
    assert not stores_text(before) and not before.reader.has_facets
    hits = {q: urls(before, q) for q in QUERIES}
    assert all(hits.values())
    with index_slave(cfg):
        report = report_of(run_index(cfg, "--rebuild"))
    assert report["indexed"] == len(PAGES) and report["failed"] == 0
    assert not staging_path(old_index).exists()
    after = Searcher(store, old_index)
    assert stores_text(after) and after.reader.has_facets
    assert after.reader.num_docs() == len(PAGES)
    assert {q: urls(after, q) for q in QUERIES} == hits
    assert urls(after, "vacuum lang:en") == hits["vacuum step 3"]  # a field the old lacked
    # the snippet is the index's copy of the text, not the store's (which the old read)
    store.put_pages([make_page("p3", "the store's text changed since: vacuum step 3, later")])
    assert after.search("vacuum step 3").hits[0].snippet.marked() == (
        f"«vacuum» tuning, «step» «3». {FILLER[3]}"
    )


def _wait_for(condition, bound: float = 30.0) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_searches_answer_from_the_old_index_until_the_new_one_is_complete(
    cfg, store, old_index
) -> None:
    kept = Searcher(store, old_index)
    library = urls(kept, "library")
    assert library
    done: list[Result] = []
    rebuild = threading.Thread(target=lambda: done.append(run_index(cfg, "--rebuild")))
    rebuild.start()
    try:
        # the new index is begun beside the old one; no slave yet, so none of it is written
        _wait_for(lambda: (staging_path(old_index) / "meta.json").exists())
        kept.reader.reload()
        assert urls(kept, "library") == library and not stores_text(kept)
        opened = Searcher(store, old_index)  # one opened meanwhile: the old index, whole
        assert not stores_text(opened) and opened.reader.num_docs() == len(PAGES)
        late = make_page("late", "a page stored during the rebuild about zeppelins", 2.0)
        store.put_pages([late])
        with index_slave(cfg):
            rebuild.join(timeout=60)
            assert not rebuild.is_alive()
            assert report_of(done[0])["failed"] == 0
            # a searcher kept open answers, then reopens the index that replaced its own
            assert urls(kept, "library") == library
            kept.reader.reload()
            assert stores_text(kept) and urls(kept, "library") == library
            # the page stored meanwhile: indexed by the rebuild, or by the next run
            report_of(run_index(cfg))
        assert urls(Searcher(store, old_index), "zeppelins") == [late.url]
    finally:
        rebuild.join(timeout=60)


def test_a_rebuild_is_refused_while_another_index_master_holds_the_lease(
    cfg, store, old_index, redis_client, keys
) -> None:
    redis_client.set(keys.master_lease("index"), "index-master-99", px=10_000)
    result = run_index(cfg, "--rebuild")
    assert result.exit_code == 1, result.output
    assert "another index master (index-master-99)" in result.output
    assert "no rebuild while it runs" in result.output
    assert not staging_path(old_index).exists()
    assert not stores_text(Searcher(store, old_index))
    assert store.unindexed_pages(None, 100) == []  # the marks as they were
    assert redis_client.get(keys.master_lease("index")) == b"index-master-99"


def test_after_a_rebuild_a_plain_index_run_has_nothing_to_do(cfg, store, old_index) -> None:
    # a page fetched again since it was indexed, and one never indexed
    store.put_pages(
        [
            make_page("p5", "changed text about lighthouses", fetched_at=5.0),
            make_page("new", "a new page about zeppelins"),
        ]
    )
    assert len(store.unindexed_pages(None, 100)) == 2
    with index_slave(cfg):
        assert report_of(run_index(cfg, "--rebuild"))["indexed"] == len(PAGES) + 1
        assert store.unindexed_pages(None, 100) == []
        again = report_of(run_index(cfg))
    assert again["scheduled"] == again["indexed"] == again["removed"] == 0
    searcher = Searcher(store, old_index)
    assert urls(searcher, "lighthouses") == [PAGES[5].url]
    assert urls(searcher, "zeppelins") == ["http://127.0.0.1:9/new"]
    assert store.indexed_pages() == len(PAGES) + 1


def test_a_rebuild_with_failed_pages_leaves_the_index_and_its_marks_as_they_were(
    cfg, store, old_index, tmp_path
) -> None:
    user_dict = tmp_path / "words.txt"  # the master's; the slave has none: it refuses
    user_dict.write_text("杭研大厦 10 n\n", encoding="utf-8")
    rebuild = IndexRebuild.from_config(cfg, user_dict=str(user_dict), block_timeout=0.1)
    with index_slave(cfg), pytest.raises(IndexerError, match="the index is as it was"):
        rebuild.run()
    assert rebuild.report.failed == len(PAGES)
    assert not staging_path(old_index).exists()
    searcher = Searcher(store, old_index)
    assert not stores_text(searcher) and searcher.reader.num_docs() == len(PAGES)
    assert store.unindexed_pages(None, 100) == []


@pytest.mark.slow
def test_with_the_index_in_an_object_store_the_rebuilt_index_is_published_as_one_commit(
    s3, store, db_url, redis_url, keys, tmp_path, monkeypatch
) -> None:
    url = f"s3://rebuild-{uuid.uuid4().hex[:12]}/index"
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path, index_url=url)
    store.put_pages(PAGES)
    with monkeypatch.context() as m:
        m.setattr("srcrawl.indexer.engine.schema", schema_before_stored_text)
        index_in_process(store, cfg.index_work_path)
    replica = IndexReplica(IndexObjects(url, cfg.job), cfg.index_path)
    try:
        with index_slave(cfg):
            report_of(run_index(cfg))  # nothing to index: the directory is published as it is
            assert replica.sync()
            old = replica.held
            kept = Searcher(store, cfg.index_path)
            assert not stores_text(kept)
            hits = {q: urls(kept, q) for q in QUERIES}
            report_of(run_index(cfg, "--rebuild"))
        assert replica.sync() and not replica.held.same(old)
        kept.reader.reload()  # a commit of another schema: the replica's index is reopened
        assert stores_text(kept) and {q: urls(kept, q) for q in QUERIES} == hits
        # the master's directory is the one published: the next run goes on from it
        assert held_commit(cfg.index_work_path).same(replica.held)
        assert not staging_path(cfg.index_work_path).exists()
        with index_slave(cfg):
            again = report_of(run_index(cfg))
        assert again["scheduled"] == again["indexed"] == 0
        assert not replica.sync()
    finally:
        replica.stop()
        cfg.close()


@pytest.mark.parametrize("exchange", [True, False], ids=["exchanged", "two-renames"])
def test_a_directory_replaces_another_whole_and_the_old_is_deleted(
    tmp_path, monkeypatch, exchange
) -> None:
    if not exchange:  # a file system without renameat2's exchange
        monkeypatch.setattr(rebuild_module, "_exchange", lambda _a, _b: False)
    live, new = tmp_path / "job", staging_path(tmp_path / "job")
    for directory, text in ((live, "old"), (new, "new")):
        directory.mkdir()
        (directory / "meta.json").write_text(text)
    replace_directory(new, live)
    assert (live / "meta.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job"]
    # no index yet: the new one is renamed into place
    other = staging_path(tmp_path / "none")
    other.mkdir()
    replace_directory(other, tmp_path / "none")
    assert (tmp_path / "none").is_dir() and not other.exists()
