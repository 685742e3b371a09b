"""The index phase end to end: master + slave over real Redis, on SQLite and MariaDB.

The expected postings are written out by hand (jieba's segmentation of these
sentences is its documented one), not computed by the tokenizer under test.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

from srcrawl.config import Config
from srcrawl.errors import LeaseHeld
from srcrawl.indexer.blocks import term_postings
from srcrawl.indexer.master import IndexMaster, IndexReport
from srcrawl.indexer.merge import merge_index
from srcrawl.indexer.postings import DocPostings, PostingsBatch, term_fingerprint
from srcrawl.indexer.protocol import REFUSED, IndexTask
from srcrawl.indexer.slave import IndexHandler
from srcrawl.queues.envelope import decode
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.slave.runtime import Slave
from srcrawl.sql.store import Page
from srcrawl.urls import fingerprint

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
    "B": {"网易": 2, "来到": 1, "杭研": 1, "大厦": 1, "abc": 1, "def": 1, "full": 1,
          "width": 1, "test": 1},
    "C": {"小明": 1, "硕士": 1, "毕业": 1, "中国科学院": 1, "计算所": 1, "привет": 1, "мир": 1},
    "D": {},
}  # fmt: skip


def page(key: str, title: str, text: str, fetched_at: float = 1000.0) -> Page:
    return Page(fp=FP[key], url=URLS[key], host="127.0.0.1:9", status=200,
                fetched_at=fetched_at, title=title, text=text)  # fmt: skip


def configs(redis_url: str, db_url, job: str, tmp_path) -> tuple[Config, Config]:
    """Two configurations of the same services: the master's and the slave's connections."""
    return tuple(Config(redis_url=redis_url, db=db_url, job=job, home=tmp_path) for _ in "ms")


def run_index(master_cfg: Config, slave_cfg: Config, **kw) -> IndexReport:
    """One index run with one slave in a thread of this process."""
    slave = Slave(slave_cfg, [IndexHandler(slave_cfg)], block_timeout=0.1)
    thread = threading.Thread(target=slave.run, daemon=True)
    thread.start()
    try:
        master = IndexMaster(master_cfg, block_timeout=0.1, merge_wait=0.2, **kw)
        return master.run()
    finally:
        slave.stopping.set()
        thread.join(timeout=10)


# every term these tests index: the index knows terms only by their fingerprints
VOCAB = {t for terms in EXPECTED.values() for t in terms} | {"北京大学", "news", "旧", "新"}


def index_contents(store) -> tuple[dict, dict, dict]:
    """postings {(term, fp): tf}, df {term: df} (terms with df > 0), doclens {fp: length}.

    A term outside VOCAB shows as ``#<its id>``, so it fails any comparison.
    """
    names = {term_fingerprint(t): t for t in VOCAB}
    with store.transaction() as cur:
        cur.execute("SELECT DISTINCT term_id FROM postings")
        ids = [int(r[0]) for r in cur.fetchall()]
        cur.execute("SELECT fp, length + title_length + anchor_length FROM doclens")
        lens = {int(fp): int(n) for fp, n in cur.fetchall()}
    # a term's frequency over all fields, and the body's length
    rows = [
        (names.get(i, f"#{i}"), fp, tf + boiler + ttf + atf, dl + tdl + adl)
        for i in ids
        for fp, tf, dl, boiler, ttf, tdl, atf, adl in term_postings(store, i).tolist()
    ]
    postings = {(t, fp): tf for t, fp, tf, _dl in rows}
    assert len(postings) == len(rows)  # no page holds a term twice
    df = {names.get(i, f"#{i}"): df for i, df in store.lookup_terms(ids).items()}
    assert df == dict(Counter(t for t, *_ in rows))
    # every posting carries its document's length
    assert all(dl == lens[fp] for _t, fp, _tf, dl in rows)
    return postings, df, lens


def expected_index(docs: dict[str, dict[str, int]]) -> tuple[dict, dict, dict]:
    postings = {(t, FP[k]): tf for k, terms in docs.items() for t, tf in terms.items()}
    df = Counter(t for terms in docs.values() for t in terms)
    lens = {FP[k]: sum(terms.values()) for k, terms in docs.items()}
    return postings, dict(df), lens


def unindexed(store) -> set[int]:
    with store.transaction() as cur:
        cur.execute("SELECT fp FROM pages WHERE indexed_at IS NULL")
        return {int(r[0]) for r in cur.fetchall()}


def test_postings_are_exactly_the_expected_tokenization(
    store, db_url, redis_url, redis_client, keys, tmp_path
) -> None:
    store.put_pages(page(k, *tv) for k, tv in CORPUS.items())
    master_cfg, slave_cfg = configs(redis_url, db_url, keys.job, tmp_path)
    report = run_index(master_cfg, slave_cfg, batch_pages=3)
    assert report.indexed == 4 and report.scheduled == 4 and report.failed == 0
    assert index_contents(store) == expected_index(EXPECTED)
    docs, *fields = store.index_lengths()  # body, title and anchor lengths
    assert (docs, sum(fields)) == (4, 9 + 10 + 7)
    assert unindexed(store) == set()
    assert store.get_job(keys.job, "index")["state"] == "complete"
    # queues are drained and no worker is left registered
    q = PhaseQueues(redis_client, keys, "index")
    assert len(q.srq) == 0 and len(q.nrq) == 0
    master_cfg.close()
    slave_cfg.close()


def test_reindexing_touches_only_new_and_refetched_pages(
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
    assert (report.scheduled, report.indexed, report.reindexed) == (2, 2, 1)

    docs = dict(EXPECTED)
    docs["A"] = {"北京": 1, "来到": 1, "北京大学": 1, "hello": 1}
    docs["E"] = {"网易": 2, "news": 1}
    postings, df, lens = index_contents(store)
    assert (postings, df, lens) == expected_index(docs)
    # A's old terms left with it, its df too; nothing was doubled
    assert ("清华大学", FP["A"]) not in postings and "清华大学" not in df
    assert df["来到"] == 2 and df["网易"] == 2 and df["hello"] == 1
    docs, *fields = store.index_lengths()
    assert (docs, sum(fields)) == (5, 4 + 10 + 7 + 0 + 3)
    master_cfg.close()
    slave_cfg.close()


def test_the_index_counters_follow_every_merge_without_a_recount(store) -> None:
    # The counters move by each merge's added and replaced pages; after any
    # mix of new, replaced, repeated and stale pages they equal a fresh count.
    import random

    rng = random.Random(5)
    fps = [fingerprint(f"http://127.0.0.1:9/p{i}") for i in range(40)]
    store.put_pages(
        Page(fp=fp, url=f"http://127.0.0.1:9/p{i}", host="127.0.0.1:9", status=200,
             fetched_at=1000.0, title="", text="x")
        for i, fp in enumerate(fps)
    )  # fmt: skip

    def recount() -> tuple[int, int]:
        with store.transaction(read_only=True) as cur:
            cur.execute("SELECT COUNT(*), COALESCE(SUM(length), 0) FROM doclens")
            n, total = cur.fetchone()
        return int(n), int(total)

    statements: list[str] = []
    if store.dialect == "sqlite":
        store._conn.set_trace_callback(statements.append)
    for round_ in range(12):
        docs = []
        for fp in rng.sample(fps, 15) + rng.sample(fps, 3):  # some pages twice
            terms = rng.sample(["a", "b", "c", "d", "e", "f"], rng.randint(0, 4))
            at = 1000.0 if rng.random() < 0.9 else 999.0  # stale: another fetch's text
            docs.append(DocPostings(fp, at, rng.randint(0, 50), terms, [1] * len(terms)))
        merge_index(store, PostingsBatch.of(docs), float(round_))
        assert store.index_stats() == recount() != (0, 0)
    if store.dialect == "sqlite":  # after the first merge, no merge reads all of doclens
        store._conn.set_trace_callback(None)
        assert sum("COUNT(*)" in st for st in statements) == 12 + 1  # recount()s + first merge
    # a store that lost its counters counts once, then goes on moving them
    with store.transaction() as cur:
        cur.execute("DELETE FROM meta WHERE k IN ('index_docs', 'index_length')")
    assert store.index_stats() == (0, 0)
    docs = [DocPostings(fps[0], 1000.0, 7, ["a"], [1])]
    merge_index(store, PostingsBatch.of(docs), 99.0)
    assert store.index_stats() == recount()


def test_merging_the_same_results_twice_changes_nothing(store) -> None:
    store.put_pages(page(k, *tv) for k, tv in CORPUS.items())
    docs = [
        DocPostings(FP[k], 1000.0, sum(t.values()), list(t), list(t.values()))
        for k, t in EXPECTED.items()
    ]
    first = merge_index(store, PostingsBatch.of(docs), 1.0)
    before = index_contents(store), store.index_stats()
    again = merge_index(store, PostingsBatch.of(docs + docs[:2]), 2.0)  # replayed
    assert (first.applied, first.reindexed) == (4, 0)
    assert (again.applied, again.reindexed) == (4, 4)
    assert (index_contents(store), store.index_stats()) == before
    assert index_contents(store) == expected_index(EXPECTED)
    # another master (nothing of the first in memory) merges the same way
    merge_index(store, PostingsBatch.of(docs), 3.0)
    assert index_contents(store) == expected_index(EXPECTED)


def test_a_term_shared_by_two_messages_of_one_merge_is_one_term(store) -> None:
    store.put_pages(page(k, *tv) for k, tv in CORPUS.items())
    docs = {
        k: DocPostings(FP[k], 1000.0, sum(t.values()), list(t), list(t.values()))
        for k, t in EXPECTED.items()
    }
    # 来到 is in the term tables of both messages of the second merge
    merge_index(store, PostingsBatch.concat([PostingsBatch.of([docs["A"]])]), 1.0)
    both = [PostingsBatch.of([docs["B"], docs["D"]]), PostingsBatch.of([docs["C"], docs["A"]])]
    merged = merge_index(store, PostingsBatch.concat(both), 2.0)
    assert (merged.applied, merged.reindexed) == (4, 1)
    assert index_contents(store) == expected_index(EXPECTED)
    # one row per distinct term, all in the second block (A left the first)
    assert store.count("postings") == len({t for terms in EXPECTED.values() for t in terms})


def test_a_document_of_text_fetched_since_is_not_merged(store) -> None:
    store.put_pages([page("A", *CORPUS["A"], fetched_at=5000.0)])
    old = DocPostings(FP["A"], 1000.0, 1, ["旧"], [1])
    gone = DocPostings(FP["F"], 1000.0, 1, ["旧"], [1])  # no such page
    merged = merge_index(store, PostingsBatch.of([old, gone]), 1.0)
    assert (merged.applied, merged.stale) == (0, 2)
    assert index_contents(store) == ({}, {}, {})
    assert unindexed(store) == {FP["A"]}


def test_a_failed_merge_leaves_nothing_behind(store) -> None:
    store.put_pages([page("A", *CORPUS["A"])])
    new = term_fingerprint("新")
    # a term listed twice (unpacking refuses that; here it is built by hand) makes
    # the block's insert fail after the page's old postings were dropped
    bad = PostingsBatch(
        fps=np.array([FP["A"]]), fetched=np.array([1000.0]), lengths=np.array([[2, 0, 0]]),
        counts=np.array([2]), terms=np.array([new, new]),
        tfs=np.array([[1, 0, 0, 0], [1, 0, 0, 0]]),
    )  # fmt: skip
    with pytest.raises(ValueError, match="twice"):
        merge_index(store, bad, 1.0)
    assert store.lookup_terms([new]) == {} and store.index_stats() == (0, 0)
    assert unindexed(store) == {FP["A"]}
    merge_index(store, PostingsBatch.of([DocPostings(FP["A"], 1000.0, 2, ["新"], [2])]), 2.0)
    assert index_contents(store)[0] == {("新", FP["A"]): 2}
    assert store.lookup_terms([new]) == {new: 1}


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
    handler = IndexHandler(slave_cfg)
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
        IndexMaster(cfg).run()
    assert redis_client.get(keys.master_lease("index")) == b"index-master-99"
    cfg.close()


def test_the_merges_that_end_a_run_halve_so_the_last_one_is_small(
    db_url, redis_url, keys, tmp_path
) -> None:
    # The last merge runs after every slave is done, with nothing to overlap
    # it: once every page is scheduled, held results are merged as soon as
    # they are as many as the pages still out with slaves.
    cfg = Config(redis_url=redis_url, db=db_url, job=keys.job, home=tmp_path)
    master = IndexMaster(cfg, merge_docs=5000, merge_wait=60.0)
    master._held_since = time.monotonic()
    master._outstanding = {1: 50, 2: 50, 3: 50}

    def due(held: int, scanned_all: bool) -> bool:
        master._held_docs, master._scanned_all = held, scanned_all
        return master._merge_due()

    assert not due(149, True) and due(150, True)
    assert not due(4999, False) and due(5000, False)  # pages still to schedule: gather
    master._outstanding = {}
    assert due(1, False)  # nothing out: merge what is held
    master._outstanding = {1: 50}
    master._held_since -= 61.0
    assert due(1, False)  # held for longer than merge_wait
    cfg.close()
