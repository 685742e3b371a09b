"""The index phase end to end: master + slave over real Redis, on SQLite and MariaDB,
into a real Tantivy index.

The expected terms are written out by hand (jieba's segmentation of these
sentences is its documented one), not computed by the tokenizer under test.
"""

from __future__ import annotations

import threading
import time

import pytest
from tantivy_index import all_pages, index_terms, num_docs

from srcrawl.core.errors import LeaseHeld
from srcrawl.core.urls import fingerprint
from srcrawl.indexer.engine import IndexWriter
from srcrawl.indexer.master import IndexMaster, IndexReport
from srcrawl.indexer.protocol import REFUSED, IndexTask
from srcrawl.indexer.slave import IndexHandler, tokenize_document
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.queues.envelope import decode
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.settings.config import Config
from srcrawl.slave.runtime import Slave
from srcrawl.sql.pages import Page

URLS = {k: f"http://127.0.0.1:9/{k}" for k in "ABCDEF"}
FP = {k: fingerprint(u) for k, u in URLS.items()}

CORPUS = {
    "A": ("清华大学", "我来到北京清华大学。Hello World, hello again! 2024年"),
    "B": ("网易", "他来到了网易杭研大厦，ＡＢＣ　Ｄｅｆ full-width test。"),
    "C": ("", "小明硕士毕业于中国科学院计算所 😀 Привет мир! the of and"),
    "D": ("", ""),
}
# 我 了 他 于 again the of and: stop words; ＡＢＣ　Ｄｅｆ: folded to abc def
EXPECTED = {
    "A": {"清华大学": 2, "来到": 1, "北京": 1, "hello": 2, "world": 1, "2024": 1, "年": 1},
    "B": {
        "网易": 2,
        "来到": 1,
        "杭研": 1,
        "大厦": 1,
        "abc": 1,
        "def": 1,
        "full": 1,
        "width": 1,
        "test": 1,
    },
    "C": {"小明": 1, "硕士": 1, "毕业": 1, "中国科学院": 1, "计算所": 1, "привет": 1, "мир": 1},
    "D": {},
}
STOPPED = ("我", "了", "他", "于", "again", "the", "of", "and", "清华")


def page(key: str, title: str, text: str, fetched_at: float = 1000.0) -> Page:
    return Page(
        fp=FP[key],
        url=URLS[key],
        host="127.0.0.1:9",
        status=200,
        fetched_at=fetched_at,
        title=title,
        text=text,
    )


def configs(redis_url: str, db_url, job: str, tmp_path) -> tuple[Config, Config]:
    """Two configurations of the same services: the master's and the slave's connections."""
    return tuple(Config(redis_url=redis_url, db=db_url, job=job, home=tmp_path) for _ in "ms")


def run_index(master_cfg: Config, slave_cfg: Config, **kw) -> IndexReport:
    """One index run with one slave in a thread of this process."""
    slave = Slave.from_config(slave_cfg, [IndexHandler.from_config(slave_cfg)], block_timeout=0.1)
    thread = threading.Thread(target=slave.run, daemon=True)
    thread.start()
    try:
        master = IndexMaster.from_config(master_cfg, block_timeout=0.1, merge_wait=0.2, **kw)
        return master.run()
    finally:
        slave.stopping.set()
        thread.join(timeout=10)


def unindexed(store) -> set[int]:
    with store.transaction() as cur:
        cur.execute("SELECT fp FROM pages WHERE indexed_at IS NULL")
        return {int(r[0]) for r in cur.fetchall()}


VOCAB = {t for terms in EXPECTED.values() for t in terms} | {"北京大学", "news", "旧", "新"}


def expected_terms(docs: dict[str, dict[str, int]]) -> dict[str, set[int]]:
    """term -> the pages holding it."""
    out: dict[str, set[int]] = {}
    for k, terms in docs.items():
        for t in terms:
            out.setdefault(t, set()).add(FP[k])
    return out


def test_the_index_holds_exactly_the_expected_tokenization(
    store, db_url, redis_url, redis_client, keys, tmp_path
) -> None:
    store.put_pages(page(k, *tv) for k, tv in CORPUS.items())
    master_cfg, slave_cfg = configs(redis_url, db_url, keys.job, tmp_path)
    report = run_index(master_cfg, slave_cfg, batch_pages=3)
    assert report.indexed == 4 and report.scheduled == 4 and report.failed == 0
    index = master_cfg.index_path
    assert index == tmp_path / "index" / keys.job
    assert index_terms(index, VOCAB | set(STOPPED)) == expected_terms(EXPECTED)
    assert all_pages(index) == sorted(FP[k] for k in CORPUS)  # D too: an empty document
    assert unindexed(store) == set()
    assert store.get_job(keys.job, "index")["state"] == "complete"
    # queues are drained and no worker is left registered
    q = PhaseQueues(redis_client, keys, "index")
    assert len(q.srq) == 0 and len(q.nrq) == 0
    master_cfg.close()
    slave_cfg.close()


def test_reindexing_replaces_only_new_and_refetched_pages(
    store, db_url, redis_url, redis_client, keys, tmp_path
) -> None:
    store.put_pages(page(k, *tv) for k, tv in CORPUS.items())
    master_cfg, slave_cfg = configs(redis_url, db_url, keys.job, tmp_path)
    run_index(master_cfg, slave_cfg)
    assert run_index(master_cfg, slave_cfg).scheduled == 0  # nothing new: nothing to do

    # A is fetched again with other text; E is new
    store.save_fetched([page("A", "北京", "我来到北京大学。hello", fetched_at=2000.0)], [])
    store.put_pages([page("E", "", "网易 news 网易", fetched_at=2000.0)])
    assert unindexed(store) == {FP["A"], FP["E"]}
    report = run_index(master_cfg, slave_cfg)
    assert (report.scheduled, report.indexed) == (2, 2)

    docs = dict(EXPECTED)
    docs["A"] = {"北京": 1, "来到": 1, "北京大学": 1, "hello": 1}
    docs["E"] = {"网易": 2, "news": 1}
    found = index_terms(master_cfg.index_path, VOCAB)
    assert found == expected_terms(docs)
    # A's old terms left with its old document; nothing was doubled
    assert "清华大学" not in found
    assert all_pages(master_cfg.index_path) == sorted(FP[k] for k in "ABCDE")
    master_cfg.close()
    slave_cfg.close()


def _docs(keys: str = "ABCD", fetched_at: float = 1000.0) -> list:
    tok = get_tokenizer()
    return [tokenize_document(tok, FP[k], fetched_at, "127.0.0.1:9", *CORPUS[k]) for k in keys]


def test_writing_the_same_documents_twice_changes_nothing(store, tmp_path) -> None:
    # a master killed after its commit and before its acknowledgement: the next one
    # writes the same documents again
    index = tmp_path / "index"
    for _ in range(2):
        writer = IndexWriter(index)
        writer.replace(_docs() + _docs("AB"))  # a page listed twice in one commit, too
        writer.commit()
        writer.close()
        assert all_pages(index) == sorted(FP[k] for k in "ABCD")
        assert index_terms(index, VOCAB) == expected_terms(EXPECTED)


def test_a_document_of_text_fetched_since_is_not_written(
    store, db_url, redis_url, keys, tmp_path
) -> None:
    store.put_pages([page("A", *CORPUS["A"], fetched_at=5000.0)])
    master_cfg, _ = configs(redis_url, db_url, keys.job, tmp_path)
    master = IndexMaster.from_config(master_cfg)
    master.lease.acquire(what="index master")
    old = _docs("A", fetched_at=1000.0)  # the text of an earlier fetch
    gone = tokenize_document(get_tokenizer(), FP["F"], 1000.0, "127.0.0.1:9", "", "旧")
    master.held.batches, master.held.docs = [[*old, gone]], 2
    master._merge()
    master.writer.close()
    master.lease.release()
    assert (master.report.indexed, master.report.stale) == (0, 2)
    assert num_docs(master_cfg.index_path) == 0
    assert unindexed(store) == {FP["A"]}
    master_cfg.close()


def test_a_commit_refused_by_the_lease_check_leaves_nothing_behind(store, tmp_path) -> None:
    index = tmp_path / "index"
    writer = IndexWriter(index)
    writer.replace(_docs("A"))

    def lost() -> None:
        raise RuntimeError("the lease is gone")

    with pytest.raises(RuntimeError, match="lease"):
        writer.commit(before=lost)
    writer.replace(_docs("B"))
    writer.commit()
    writer.close()
    assert all_pages(index) == [FP["B"]]  # A was rolled back, not left for the next commit


def test_a_commit_waits_for_another_writer_then_gives_up(tmp_path) -> None:
    from srcrawl.indexer.engine import IndexUnavailable

    index = tmp_path / "index"
    writer = IndexWriter(index, wait=0.5)
    other = writer.index.writer(15_000_000, 1)  # a stalled master inside its commit
    writer.replace(_docs("A"))
    renewed = []
    t0 = time.monotonic()
    with pytest.raises(IndexUnavailable, match="another writer"):
        writer.commit(before=lambda: renewed.append(1))
    assert time.monotonic() - t0 >= 0.5 and renewed  # the lease was renewed meanwhile
    other.wait_merging_threads()  # released: the next commit writes
    writer.replace(_docs("B"))
    writer.commit()
    assert all_pages(index) == [FP["B"]]


def test_a_slave_with_another_user_dictionary_refuses_and_nothing_is_lost(
    store, db_url, redis_url, redis_client, keys, tmp_path
) -> None:
    store.put_pages(page(k, *tv) for k, tv in CORPUS.items())
    user_dict = tmp_path / "words.txt"
    user_dict.write_text("杭研大厦 10 n\n", encoding="utf-8")
    master_cfg, slave_cfg = configs(redis_url, db_url, keys.job, tmp_path)
    report = run_index(master_cfg, slave_cfg, user_dict=str(user_dict))
    assert report.failed == 4 and report.indexed == 0
    assert any("user dictionary" in e for e in report.errors)
    assert unindexed(store) == set(FP[k] for k in CORPUS)  # left for a later run
    # the refusal itself, as a slave sends it
    handler = IndexHandler.from_config(slave_cfg)
    [raw] = handler.handle([IndexTask(7, [FP["A"]], "abc").encode()])
    msg = decode(raw)
    assert msg.kind == REFUSED and msg.get("batch") == 7
    master_cfg.close()
    slave_cfg.close()


def test_a_second_master_refuses_to_start(
    store, db_url, redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    redis_client.set(keys.master_lease("index"), "index-master-99", px=10_000)
    with pytest.raises(LeaseHeld, match=r"another index master \(index-master-99\)"):
        IndexMaster.from_config(cfg).run()
    assert redis_client.get(keys.master_lease("index")) == b"index-master-99"
    cfg.close()


def test_the_merges_that_end_a_run_halve_so_the_last_one_is_small(
    db_url, redis_url, keys, tmp_path
) -> None:
    # The last merge runs after every slave is done, with nothing to overlap
    # it: once every page is scheduled, held results are merged as soon as
    # they are as many as the pages still out with slaves.
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    master = IndexMaster.from_config(cfg, merge_docs=5000, merge_wait=60.0)
    master.held.since = time.monotonic()
    out = master.tasks.outstanding
    out.update({1: 50, 2: 50, 3: 50})

    def due(held: int, scanned_all: bool) -> bool:
        master.held.docs, master.tasks.scanned_all = held, scanned_all
        return master._merge_due()

    assert not due(149, True) and due(150, True)
    assert not due(4999, False) and due(5000, False)  # pages still to schedule: gather
    out.clear()
    assert due(1, False)  # nothing out: merge what is held
    out[1] = 50
    master.held.since -= 61.0
    assert due(1, False)  # held for longer than merge_wait
    cfg.close()


def test_a_master_dying_between_its_commit_and_the_marks_reindexes_and_doubles_nothing(
    store, db_url, redis_url, keys, tmp_path, monkeypatch
) -> None:
    store.put_pages(page(k, *tv) for k, tv in CORPUS.items())
    master_cfg, slave_cfg = configs(redis_url, db_url, keys.job, tmp_path)
    real = type(store).mark_indexed

    def died(self, versions, at):  # type: ignore[no-untyped-def]
        raise SystemExit("killed after the Tantivy commit, before the store's marks")

    monkeypatch.setattr(type(store), "mark_indexed", died)
    with pytest.raises(SystemExit, match="killed"):
        run_index(master_cfg, slave_cfg)
    assert all_pages(master_cfg.index_path) == sorted(FP[k] for k in CORPUS)  # committed
    assert unindexed(store) == {FP[k] for k in CORPUS}  # not marked
    monkeypatch.setattr(type(store), "mark_indexed", real)
    master_cfg.close()
    master_cfg, _ = configs(redis_url, db_url, keys.job, tmp_path)
    report = run_index(master_cfg, slave_cfg)
    # the dead master's results went back to nrq, and the pages were scheduled again:
    # written twice over, each write replacing the page's document
    assert report.indexed == 8 and unindexed(store) == set()
    assert all_pages(master_cfg.index_path) == sorted(FP[k] for k in CORPUS)  # none twice
    assert index_terms(master_cfg.index_path, VOCAB) == expected_terms(EXPECTED)
    master_cfg.close()
    slave_cfg.close()
