"""The storage contract, run against SQLite and (when configured) MariaDB."""

from __future__ import annotations

import random
import shutil
import string
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from srcrawl.core.errors import StoreDataError, StoreError
from srcrawl.settings.config import DatabaseURL
from srcrawl.sql.migrations import OLD_INDEX_META, SCHEMA_VERSION, STEPS
from srcrawl.sql.pages import (
    MAX_CONTENT_TYPE_CHARS,
    MAX_TITLE_CHARS,
    Page,
    compress_body,
    decompress_body,
)
from srcrawl.sql.store import Store, open_store

from .conftest import _empty


def page(fp: int, url: str | None = None, **kw) -> Page:
    url = url or f"http://127.0.0.1/p/{fp}"
    return Page(fp=fp, url=url, host="127.0.0.1", fetched_at=1000.0 + fp % 1000, **kw)


def test_the_migration_steps_are_numbered_up_to_the_schema_version() -> None:
    assert [step.version for step in STEPS] == list(range(1, int(SCHEMA_VERSION) + 1))


def test_schema_is_idempotent(store: Store) -> None:
    store.init_schema()
    store.init_schema()
    assert store.schema_version() == SCHEMA_VERSION == "8"
    assert store.count("pages") == 0


def test_save_fetched_round_trips_every_column(store: Store) -> None:
    raw = "<html><title>标题</title>中文 and English 🎉</html>".encode()
    p = Page(
        fp=-(2**63),
        url="http://127.0.0.1:8000/中文?q=1",
        host="127.0.0.1:8000",
        depth=3,
        status=200,
        content_type="text/html; charset=utf-8",
        fetched_at=1700000000.25,
        fetch_ms=42,
        title="标题 🎉",
        text="中文 and English 🎉",
        body=compress_body(raw),
    )
    store.save_fetched([p], [(p.fp, 2**63 - 1), (p.fp, 7)])
    [got] = store.get_pages([p.fp], with_body=True)
    assert got == p
    assert decompress_body(got.body) == raw
    assert sorted(store.iter_links().__next__()) == [(p.fp, 7), (p.fp, 2**63 - 1)]


def test_a_hostile_title_or_content_type_is_cut_not_refused(store: Store) -> None:
    # one page a column cannot hold must not fail its whole batch on every retry
    title, ctype = "标题" * 40_000, "text/html; x=" + "y" * 1_000
    store.save_fetched([page(5, title=title, content_type=ctype), page(6, title="ok")], [])
    got = {p.fp: p for p in store.get_pages([5, 6])}
    assert got[5].title == title[:MAX_TITLE_CHARS] and got[6].title == "ok"
    assert got[5].content_type == ctype[:MAX_CONTENT_TYPE_CHARS]


def test_refetch_replaces_page_and_links_never_doubles(store: Store) -> None:
    store.save_fetched([page(1, title="old")], [(1, 2), (1, 3)])
    store.save_fetched([page(1, title="new")], [(1, 3), (1, 4)])
    assert store.count("pages") == 1
    assert store.get_pages([1])[0].title == "new"
    assert [link for chunk in store.iter_links() for link in chunk] == [(1, 3), (1, 4)]


def test_duplicate_links_are_collapsed(store: Store) -> None:
    assert store.put_links([(1, 2), (1, 2), (2, 1)]) == 3
    store.put_links([(1, 2)])
    assert store.count("links") == 2


def test_iter_pages_and_links_paginate_in_order(store: Store) -> None:
    fps = [-5, -1, 0, 3, 9, 2**62, 17, 11]
    store.put_pages(page(fp) for fp in fps)
    got = [p.fp for p in store.iter_pages(batch=3)]
    assert got == sorted(fps)
    links = [(a, b) for a in fps for b in fps if a != b]
    store.put_links(links)
    chunks = list(store.iter_links(batch=7))
    assert all(len(c) <= 7 for c in chunks)
    assert [x for c in chunks for x in c] == sorted(links)


def test_batched_writes_cross_batch_boundaries(store: Store) -> None:
    store.batch_size = 7
    assert store.put_pages(page(i) for i in range(50)) == 50
    assert store.count("pages") == 50
    assert len(store.get_pages(list(range(0, 1200)))) == 50  # IN lists are chunked too


def test_sql_looking_data_is_only_data(store: Store) -> None:
    evil = "http://127.0.0.1/'; DROP TABLE pages; --"
    store.put_pages([page(1, url=evil, title="' OR 1=1 --", text="%s ? %(x)s")])
    [got] = store.get_pages([1])
    assert (got.url, got.title, got.text) == (evil, "' OR 1=1 --", "%s ? %(x)s")
    assert store.count("pages") == 1


def test_ranks_are_replaced_whole(store: Store) -> None:
    store.put_pages([page(1, url="http://a/"), page(2, url="http://b/")])
    store.replace_ranks([(1, 0.25), (2, 0.75)])
    assert store.top_ranks() == [("http://b/", 0.75), ("http://a/", 0.25)]
    store.replace_ranks([(1, 1.0)])
    assert store.top_ranks() == [("http://a/", 1.0)]


def test_a_search_reads_each_rank_run_as_the_table_holds_it(store: Store, monkeypatch) -> None:
    # a search keeps a rank run's scores in memory (sql/ranks.py's KeptRanks): the same
    # scores as the table's, pages without a score left out, and the next run's scores
    # once it replaced them, never the kept ones; a run over RANKS_KEPT is read by SQL
    from srcrawl.sql import ranks

    rng = random.Random(3)
    first = {rng.randrange(-(2**63), 2**63): rng.random() for _ in range(300)}
    store.replace_ranks(first.items())
    asked = [*rng.sample(sorted(first), 50), 7, -(2**63), 2**63 - 1]  # and pages not ranked
    with store.rank_snapshot() as snap:
        assert snap.run is not None and snap.run.startswith("300:")
        assert snap.scores(asked) == {fp: first[fp] for fp in asked if fp in first}
        assert snap.run in ranks._kept and snap.scores([]) == {}
    second = {fp: 2.0 for fp in list(first)[:5]}
    store.replace_ranks(second.items())
    with store.rank_snapshot() as snap:
        assert snap.scores(list(first)) == second
    monkeypatch.setattr(ranks, "RANKS_KEPT", 4)
    store.replace_ranks(second.items())
    with store.rank_snapshot() as snap:
        assert snap.scores(list(first)) == second and ranks._kept[snap.run] is None
    monkeypatch.setattr(ranks, "RANKS_KEPT", 1000)
    store.replace_ranks([(1, 0.0), (2, 0.5)])  # a score of 0 is a score
    with store.rank_snapshot() as snap:
        assert snap.scores([1, 2, 3]) == {1: 0.0, 2: 0.5}
        assert snap.score_array(np.array([3, 2, 1], np.int64)).tolist() == [0.0, 0.5, 0.0]
    store.replace_ranks([])
    with store.rank_snapshot() as snap:
        assert snap.mean is None and snap.run is None
        assert snap.score_array(np.array([1], np.int64)).tolist() == [0.0]


def test_jobs_keep_their_start_time(store: Store) -> None:
    store.set_job("j", "crawl", "running", {"pages": 1}, started_at=10.0)
    store.set_job("j", "crawl", "complete", {"pages": 5}, finished_at=20.0)
    assert store.get_job("j", "crawl") == {
        "state": "complete",
        "started_at": 10.0,
        "finished_at": 20.0,
        "stats": {"pages": 5},
    }
    assert store.get_job("j", "index") is None


def test_failed_transaction_rolls_back(store: Store) -> None:
    with pytest.raises(StoreError), store.transaction() as cur:
        cur.execute(store._sql(store.UPSERT_PAGE), page(1).row())
        cur.execute("SELECT * FROM no_such_table")
    assert store.count("pages") == 0


def test_a_store_made_with_the_links_dst_index_loses_it(store: Store) -> None:
    # Older schemas indexed links by target; nothing reads them that way and
    # the index cost a B-tree insert per stored link.
    def indexes() -> set[str]:
        with store.transaction(read_only=True) as cur:
            if store.dialect == "sqlite":
                cur.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
            else:
                cur.execute(
                    "SELECT index_name FROM information_schema.statistics "
                    "WHERE table_schema = DATABASE() AND table_name = 'links'"
                )
            return {row[0] for row in cur.fetchall()}

    with store.transaction() as cur:
        cur.execute("CREATE INDEX links_dst ON links (dst)")
    assert "links_dst" in indexes()
    store.save_fetched([page(1)], [(1, 2), (1, 3)])
    store.init_schema()
    assert "links_dst" not in indexes()
    assert store.count("links") == 2
    store.init_schema()  # and stays idempotent


def test_size_is_what_the_store_takes_and_grows_with_its_pages(store: Store, db_url) -> None:
    empty = store.size_bytes()
    assert empty > 0  # the schema's tables and indexes
    rng = random.Random(3)
    text = lambda: "".join(rng.choices(string.ascii_letters, k=20_000))  # noqa: E731
    store.put_pages(page(fp, text=text()) for fp in range(200))
    if db_url.kind == "mysql":  # InnoDB's table statistics catch up in the background
        for table in ("pages", "links"):
            store._query(f"ANALYZE TABLE {table}")
    else:
        files = [Path(db_url.path), Path(f"{db_url.path}-wal")]
        assert store.size_bytes() == sum(f.stat().st_size for f in files if f.exists())
    assert store.size_bytes() - empty >= 200 * 15_000


def test_unknown_table_is_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        store.count("pages; DROP TABLE pages")


def test_unreachable_mysql_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot connect"):
        open_store(DatabaseURL(kind="mysql", host="127.0.0.1", port=1, database="x"))


def test_sqlite_in_unwritable_place_is_a_store_error(tmp_path) -> None:
    target = tmp_path / "dir"
    target.mkdir()
    with pytest.raises(StoreError):
        open_store(DatabaseURL(kind="sqlite", path=str(target)))  # a directory, not a file


def test_many_connections_opening_a_new_sqlite_file_at_once_all_open_it(tmp_path) -> None:
    # a local crawl forks its master and slaves together, each opening the
    # store: switching a new file to WAL takes an exclusive lock that SQLite
    # refuses at once (no busy wait) to all but one of them
    failures: list[str] = []
    for i in range(60):
        path = str(tmp_path / f"{i}.db")
        start = threading.Barrier(6)

        def open_it(path: str = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                open_store(DatabaseURL(kind="sqlite", path=path)).close()
            except StoreError as e:
                failures.append(str(e))

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
    with open_store(DatabaseURL(kind="sqlite", path=str(tmp_path / "0.db"))) as store:
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _old_index(store: Store, schema: int) -> None:
    """Pages 1 and 2, page 1 indexed in the SQL index tables of an older schema: 1 had a
    postings row per (term, page), 2 blocks of postings and a terms table numbering terms,
    7 blocks of postings by term fingerprint."""
    store.put_pages([page(1), page(2)])
    with store.transaction() as cur:
        for table in ("postings", "doclens", "terms"):
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        if schema < 7:
            cur.execute(
                "CREATE TABLE terms (id INTEGER NOT NULL PRIMARY KEY, "
                "term VARCHAR(100) NOT NULL UNIQUE, df INTEGER NOT NULL DEFAULT 0)"
            )
            cur.execute("INSERT INTO terms (id, term, df) VALUES (1, 'old', 1)")
        if schema == 1:
            cur.execute(
                "CREATE TABLE postings (term_id INTEGER NOT NULL, fp BIGINT NOT NULL, "
                "tf INTEGER NOT NULL, dl INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (term_id, fp))"
            )
            cur.execute("INSERT INTO postings (term_id, fp, tf, dl) VALUES (1, 1, 1, 1)")
            cur.execute(
                "CREATE TABLE doclens (fp BIGINT NOT NULL PRIMARY KEY, length INTEGER NOT NULL, "
                "terms BLOB NULL)"
            )
        else:
            cur.execute(
                "CREATE TABLE postings (term_id INTEGER NOT NULL, block INTEGER NOT NULL, "
                "n INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (term_id, block))"
            )
            record = struct.pack("<qII", 1, 1, 1)
            cur.execute(
                store._sql("INSERT INTO postings (term_id, block, n, data) VALUES (?, ?, ?, ?)"),
                (1, 1, 1, record),
            )
            cur.execute(
                "CREATE TABLE doclens (fp BIGINT NOT NULL PRIMARY KEY, length INTEGER NOT NULL, "
                "block INTEGER NOT NULL, terms BLOB NULL)"
            )
        cur.execute(
            "INSERT INTO doclens (fp, length) VALUES (1, 1)"
            if schema == 1
            else "INSERT INTO doclens (fp, length, block) VALUES (1, 1, 1)"
        )
        cur.execute(store._sql("UPDATE pages SET indexed_at = ? WHERE fp = ?"), (5.0, 1))
        cur.execute(store._sql(store.UPSERT_META), ("index_docs", "1"))
        cur.execute(store._sql(store.UPSERT_META), ("index_length", "1"))
        cur.execute(store._sql(store.UPSERT_META), ("schema_version", str(schema)))


def _tables(store: Store) -> set[str]:
    with store.transaction() as cur:
        return {t for t in ("postings", "doclens", "terms") if store._columns(cur, t)}


@pytest.mark.parametrize("schema", [1, 2, 7])
def test_an_index_in_sql_is_dropped_and_its_pages_marked_unindexed(
    store: Store, caplog: pytest.LogCaptureFixture, schema: int
) -> None:
    _old_index(store, schema)
    with caplog.at_level("WARNING", logger="srcrawl.store"):
        store.init_schema()
    assert "run `srcrawl index`" in caplog.text
    assert "Tantivy" in caplog.text
    assert store.unindexed_pages(None, 10) == [1, 2]  # indexed anew once
    assert _tables(store) == set()
    assert store.schema_version() == SCHEMA_VERSION == "8"
    with store.transaction() as cur:
        assert store._select_in(cur, "SELECT k FROM meta WHERE k IN ({})", OLD_INDEX_META) == []
    store.mark_indexed([(1, 1001.0)], 6.0)
    caplog.clear()
    store.init_schema()  # once migrated, nothing more happens
    assert caplog.text == "" and store.unindexed_pages(None, 10) == [2]


@pytest.mark.parametrize("schema", [1, 2, 7])
def test_a_drop_of_the_old_index_cut_short_is_finished_by_the_next_start(
    store: Store, monkeypatch: pytest.MonkeyPatch, schema: int
) -> None:
    # MySQL commits before every DROP TABLE: a crash between two of them
    # leaves part of the old index. The next start must finish the drop and
    # never leave pages marked indexed over an index that is gone.
    _old_index(store, schema)
    execute = type(store)._execute
    drops = []

    def crash_at_second_drop(self, cur, statement, params=()):  # type: ignore[no-untyped-def]
        if statement.startswith("DROP TABLE"):
            drops.append(statement)
            if len(drops) == 2:
                raise StoreError("the process died here")
        return execute(self, cur, statement, params)

    monkeypatch.setattr(type(store), "_execute", crash_at_second_drop)
    with pytest.raises(StoreError, match="died"):
        store.init_schema()
    monkeypatch.undo()
    store.init_schema()
    assert store.unindexed_pages(None, 10) == [1, 2]
    assert _tables(store) == set()
    assert store.schema_version() == SCHEMA_VERSION == "8"


def test_rows_the_store_refuses_for_their_data_are_a_store_data_error(store: Store) -> None:
    # what a slave must not retry forever, told apart from a store that is down
    bad = Page(fp=1, url=None, host="h", depth=2**40)  # type: ignore[arg-type]
    with pytest.raises(StoreDataError):
        store.save_fetched([bad], [])
    assert store.count("pages") == 0


_SCHEMA_3_PAGES = (
    "CREATE TABLE pages (fp BIGINT NOT NULL PRIMARY KEY, url TEXT NOT NULL, "
    "host VARCHAR(255) NOT NULL, depth INT NOT NULL DEFAULT 0, status INT NOT NULL DEFAULT 0, "
    "content_type VARCHAR(255) NOT NULL DEFAULT '', fetched_at DOUBLE NOT NULL, "
    "fetch_ms INT NOT NULL DEFAULT 0, title TEXT NOT NULL, text MEDIUMTEXT NOT NULL, "
    "body MEDIUMBLOB NULL, indexed_at DOUBLE NULL)"
)


def test_pages_of_a_schema_3_store_gain_the_fetch_outcome_columns(store: Store) -> None:
    with store.transaction() as cur:
        cur.execute("DROP TABLE pages")
        cur.execute(_SCHEMA_3_PAGES)
        cur.execute(
            store._sql(
                "INSERT INTO pages (fp, url, host, status, fetched_at, title, text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)"
            ),
            (7, "http://127.0.0.1/old", "127.0.0.1", 200, 1.0, "old", "old text"),
        )
        cur.execute(store._sql(store.UPSERT_META), ("schema_version", "3"))
    store.init_schema()
    store.init_schema()  # once migrated, nothing more happens
    assert store.schema_version() == "8"
    [old] = store.get_pages([7])
    assert (old.title, old.error, old.body_state) == ("old", None, "complete")
    failed = page(8, status=200, text="half a pa", error="timeout", body_state="incomplete")
    capped = page(9, status=200, text="capped", body_state="capped")
    store.save_fetched([failed, capped], [])
    by_fp = {p.fp: p for p in store.iter_pages()}
    assert (by_fp[8].error, by_fp[8].body_state) == ("timeout", "incomplete")
    assert (by_fp[9].error, by_fp[9].body_state) == (None, "capped")


def test_failed_and_cut_off_pages_are_not_indexed(store: Store) -> None:
    store.save_fetched(
        [
            page(1, status=200, text="whole"),
            page(2, status=200, text="cut at the cap", body_state="capped"),
            page(3, status=200, text="half a pa", error="timeout", body_state="incomplete"),
            page(4, status=200, text="short", error="truncated", body_state="incomplete"),
            page(5, status=0, error="connect", body_state="none"),
        ],
        [],
    )
    assert store.unindexed_pages(None, 10) == [1, 2]
    assert store.unindexed_pages(1, 10) == [2]


def test_links_of_a_schema_4_store_gain_anchor_text_read_by_target(store: Store) -> None:
    with store.transaction() as cur:
        cur.execute("DROP TABLE links")
        cur.execute(
            "CREATE TABLE links (src BIGINT NOT NULL, dst BIGINT NOT NULL, PRIMARY KEY (src, dst))"
        )
        cur.execute(store._sql("INSERT INTO links (src, dst) VALUES (?, ?)"), (1, 2))
        cur.execute(store._sql(store.UPSERT_META), ("schema_version", "4"))
    store.init_schema()
    store.init_schema()  # once migrated, nothing more happens
    assert store.schema_version() == "8"
    store.save_fetched(
        [page(3), page(4)],
        [(3, 2, "二号 page"), (4, 2, "two"), (4, 4, "self"), (4, 1, None), (3, 5, "作者" * 128)],
    )
    assert store.anchor_texts([2, 4, 5, 1]) == {2: ["二号 page", "two"], 4: [], 5: ["作者" * 128]}
    assert store.anchor_texts([2], per_page=1) == {2: ["二号 page"]}
    assert sorted(r for batch in store.iter_links() for r in batch) == [
        (1, 2),
        (3, 2),
        (3, 5),
        (4, 1),
        (4, 2),
        (4, 4),
    ]


def test_pages_of_a_schema_5_store_gain_the_recrawl_columns(store: Store) -> None:
    with store.transaction() as cur:
        cur.execute("DROP TABLE pages")
        cur.execute(_SCHEMA_3_PAGES)
        for statement in store.ADD_FETCH_OUTCOME:
            cur.execute(statement)
        cur.execute(
            store._sql(
                "INSERT INTO pages (fp, url, host, status, fetched_at, title, text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)"
            ),
            (7, "http://127.0.0.1/old", "127.0.0.1", 200, 1.0, "old", "old text"),
        )
        cur.execute(store._sql(store.UPSERT_META), ("schema_version", "5"))
    store.init_schema()
    store.init_schema()  # once migrated, nothing more happens
    assert store.schema_version() == "8"
    [old] = store.get_pages([7])
    assert (old.title, old.etag, old.digest, old.next_fetch) == ("old", None, None, None)
    fresh = page(
        8,
        status=200,
        text="t",
        etag='"1-a"',
        last_modified="Mon, 01 Jan 2024 00:00:00 GMT",
        digest=-(2**63),
        revisit=3.5,
        next_fetch=1003.5,
    )
    store.save_fetched([fresh], [])
    [got] = store.get_pages([8])
    assert (got.etag, got.last_modified, got.digest, got.revisit, got.next_fetch) == (
        '"1-a"',
        "Mon, 01 Jan 2024 00:00:00 GMT",
        -(2**63),
        3.5,
        1003.5,
    )


def test_an_unchanged_page_is_touched_not_marked_for_indexing(store: Store) -> None:
    store.save_fetched([page(1, status=200, text="a", etag='"0-x"', revisit=2.0)], [])
    store.mark_indexed([(1, 1001.0)], 5.0)
    store.touch_pages([(1, 2000.0, 7, None, "Tue, 02 Jan 2024 00:00:00 GMT", 2.8, 2002.8)])
    [got] = store.get_pages([1])
    assert (
        got.checked_at,
        got.fetch_ms,
        got.etag,
        got.last_modified,
        got.revisit,
        got.next_fetch,
        got.text,
    ) == (2000.0, 7, '"0-x"', "Tue, 02 Jan 2024 00:00:00 GMT", 2.8, 2002.8, "a")
    assert got.fetched_at == 1001.0  # the stored version's: an index merge stays valid
    assert store.unindexed_pages(None, 10) == []


def test_a_touch_can_point_an_unchanged_page_at_new_warc_records(store: Store) -> None:
    # the text the same, the body not (its markup changed): the row points at the new
    # response and conversion records; fetched_at and the index entry stay
    store.save_fetched(
        [
            page(
                1,
                status=200,
                text="",
                warc_file="j/a.warc.gz",
                warc_offset=0,
                warc_length=90,
                payload_digest="sha1:A",
                text_length=30,
            ),
            page(2, status=200, text="in the row", body=b"old"),
        ],
        [],
    )
    store.mark_indexed([(1, 1001.0), (2, 1002.0)], 5.0)
    store.touch_pages(
        [(1, 2000.0, 7, None, None, 2.8, 2002.8), (2, 2000.0, 7, None, None, 2.8, 2002.8)],
        [(1, "j/b.warc.gz", 500, 95, "sha1:B", 31), (2, "j/b.warc.gz", 700, 80, "sha1:C", 12)],
    )
    got = {p.fp: p for p in store.get_pages([1, 2], with_body=True)}
    one, two = got[1], got[2]
    assert (
        one.warc_file,
        one.warc_offset,
        one.warc_length,
        one.payload_digest,
        one.text_length,
        one.checked_at,
    ) == ("j/b.warc.gz", 500, 95, "sha1:B", 31, 2000.0)
    assert (two.warc_file, two.warc_offset, two.text, two.body, two.text_length) == (
        "j/b.warc.gz",
        700,
        "",
        None,
        12,
    )  # the text is in the record now
    assert (one.fetched_at, two.fetched_at) == (1001.0, 1002.0)
    assert store.unindexed_pages(None, 10) == []
    assert store.warc_files() == ["j/b.warc.gz"]


def test_a_page_that_went_away_is_listed_for_the_index_once(store: Store) -> None:
    store.save_fetched([page(1, status=200, text="w"), page(2, status=200, text="w")], [])
    store.mark_indexed([(1, 1001.0), (2, 1002.0)], 6.0)
    assert store.unindexable_unmarked(10) == [] and store.indexed_pages() == 2
    store.save_fetched([page(1, status=410, text="gone")], [])
    assert store.unindexed_pages(None, 10) == [] and store.unindexable_unmarked(10) == [1]
    assert store.settle_unindexable([1], 7.0) == 1  # after its document's deletion committed
    assert store.unindexable_unmarked(10) == [] and store.indexed_pages() == 1


def test_a_page_fetched_again_meanwhile_is_not_marked_indexed(store: Store) -> None:
    # the index wrote the text of fetched_at 1001; the page was stored again since
    store.save_fetched([page(1, status=200, text="old")], [])
    again = Page(
        fp=1,
        url="http://127.0.0.1/p/1",
        host="127.0.0.1",
        fetched_at=3000.0,
        status=200,
        text="new",
    )
    store.save_fetched([again], [])
    store.mark_indexed([(1, 1001.0)], 6.0)
    assert store.unindexed_pages(None, 10) == [1]  # the new text is still to be indexed
    store.mark_indexed([(1, 3000.0)], 7.0)
    assert store.unindexed_pages(None, 10) == []


def test_an_early_schema_6_store_gains_text_length_and_reads_texts_from_warc(
    store: Store, tmp_path: Path
) -> None:
    from srcrawl.warc.output import WarcOutput
    from srcrawl.warc.read import WarcTexts
    from srcrawl.warc.records import prepare_fetch
    from srcrawl.warc.storage import LocalWarcStorage

    with store.transaction() as cur:  # pages as the first schema 6 made them
        cur.execute("ALTER TABLE pages DROP COLUMN text_length")
    store.init_schema()
    store.init_schema()  # once migrated, nothing more happens
    assert store.schema_version() == "8"
    fetch = prepare_fetch(
        "http://127.0.0.1/p/5",
        status=200,
        headers={},
        body=b"<p>x</p>",
        ip="",
        fetched_at=1.7e9,
        request=b"GET / HTTP/1.1\r\n\r\n",
        text="中文 and English 🎉",
    )
    out = WarcOutput(LocalWarcStorage(tmp_path), "job", 10**6)
    [[_req, resp, conv]] = out.append([fetch.records()])
    out.close()
    with_text = page(
        5,
        status=200,
        title="t",
        warc_file=resp.file,
        warc_offset=resp.offset,
        warc_length=resp.length,
        text_length=conv.length,
    )
    store.save_fetched([with_text, page(6, status=200, text="in the row")], [])
    store.warc_texts = WarcTexts(tmp_path)
    docs = {fp: text for fp, _at, _url, _title, text in store.index_documents([5, 6])}
    assert docs == {5: "中文 and English 🎉", 6: "in the row"}
    assert sorted(store.host_texts("127.0.0.1", 10)) == sorted(docs.values())
    [row] = store.get_pages([5])
    assert row.text == "" and row.text_length == conv.length
    assert store.page_text(row) == "中文 and English 🎉"
    store.warc_texts = WarcTexts(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="page text"):
        store.index_documents([5])


def _warc_page(fp: int, name: str, offset: int, **kw) -> Page:
    return page(
        fp,
        status=200,
        warc_file=name,
        warc_offset=offset,
        warc_length=10,
        payload_digest=f"sha1:{fp}",
        **kw,
    )


def test_warc_files_are_named_once_and_read_back_by_name(store: Store) -> None:
    a, b = "job/job-20240101-host-1-00000.warc.gz", "/archives/导入 ✓.warc.gz"
    store.save_fetched([_warc_page(1, a, 0), _warc_page(2, a, 10), _warc_page(3, b, 0)], [])
    store.put_pages([_warc_page(4, a, 20), page(5, status=200, text="in the row")])
    assert store.count("warc_files") == 2  # one row per file, not per page
    with store.transaction(read_only=True) as cur:
        cur.execute("SELECT fp, warc_file_id FROM pages ORDER BY fp")
        ids = dict(cur.fetchall())
    assert ids[1] == ids[2] == ids[4] != ids[3] and ids[5] is None
    got = {p.fp: p for p in store.get_pages([1, 2, 3, 4, 5])}
    assert [got[fp].warc_file for fp in (1, 2, 3, 4, 5)] == [a, a, b, a, None]
    assert [p.warc_file for p in store.iter_pages()] == [a, a, b, a, None]
    payloads = store.stored_payloads([1, 3, 5])
    assert (payloads[1].warc_file, payloads[1].warc_offset, payloads[3].warc_file) == (a, 0, b)
    assert set(payloads) == {1, 3}
    assert store.warc_files() == sorted([a, b])
    c = "job/job-20240101-host-1-00001.warc.gz"
    store.save_fetched([_warc_page(3, c, 0)], [])  # b's only page is written again
    assert store.warc_files() == sorted([a, c]) and store.count("warc_files") == 3


def test_a_number_given_in_a_transaction_rolled_back_is_not_kept(
    store: Store, db_url: DatabaseURL
) -> None:
    # SQLite gives a rolled back row's id to the next insert: a number kept from a write
    # that failed would point this store's later pages at another file
    bad = Page(fp=9, url=None, host="h")  # type: ignore[arg-type]
    with pytest.raises(StoreDataError):
        store.save_fetched([_warc_page(1, "job/x.warc.gz", 0), bad], [])
    assert store.count("warc_files") == 0
    other = open_store(db_url)
    try:
        other.save_fetched([_warc_page(2, "job/y.warc.gz", 0)], [])
    finally:
        other.close()
    store.save_fetched([_warc_page(1, "job/x.warc.gz", 0)], [])
    got = {p.fp: p.warc_file for p in store.get_pages([1, 2])}
    assert got == {1: "job/x.warc.gz", 2: "job/y.warc.gz"}


@pytest.mark.mysql
def test_a_file_another_writer_numbered_after_a_snapshot_is_found(mysql_db: DatabaseURL) -> None:
    """MySQL only: SQLite writers take turns (BEGIN IMMEDIATE), so no snapshot predates
    a row another writer added."""
    store, db_url = _empty(open_store(mysql_db)), mysql_db
    other = open_store(db_url)
    try:
        with store.transaction() as cur:
            cur.execute("SELECT COUNT(*) FROM warc_files")  # this transaction's snapshot
            other.save_fetched([_warc_page(1, "job/z.warc.gz", 0)], [])
            ids = store._warc_file_ids(cur, {"job/z.warc.gz"})
        assert store.count("warc_files") == 1
        [got] = store.get_pages([1])
        assert got.warc_file == "job/z.warc.gz" and ids["job/z.warc.gz"] > 0
    finally:
        other.close()
        store.close()


def _schema_6_pages(store: Store) -> None:
    """Pages as schema 6 made them: the WARC file's name on every row, no warc_files."""
    name = "TEXT NULL" if store.dialect == "sqlite" else "VARCHAR(1024) NULL"
    with store.transaction() as cur:
        cur.execute("DROP TABLE warc_files")
        cur.execute("ALTER TABLE pages DROP COLUMN warc_file_id")
        cur.execute(f"ALTER TABLE pages ADD COLUMN warc_file {name}")
        cur.execute(store._sql(store.UPSERT_META), ("schema_version", "6"))


def _insert_schema_6_rows(store: Store, rows: list[tuple]) -> None:
    """Rows (fp, WARC file, offset, length, text length) as schema 6 wrote them; a row
    without a text length keeps its text in the row."""
    with store.transaction() as cur:
        for fp, wfile, off, length, tlen in rows:
            cur.execute(
                store._sql(
                    "INSERT INTO pages (fp, url, host, status, fetched_at, title, text, warc_file, "
                    "warc_offset, warc_length, payload_digest, text_length) "
                    "VALUES (?, ?, '127.0.0.1', 200, 1.0, 't', ?, ?, ?, ?, ?, ?)"
                ),
                (
                    fp,
                    f"http://127.0.0.1/p/{fp}",
                    "" if tlen else "row text",
                    wfile,
                    off,
                    length,
                    f"sha1:{fp}",
                    tlen,
                ),
            )


def test_a_schema_6_store_moves_its_warc_file_names_into_warc_files(
    store: Store, tmp_path: Path
) -> None:
    from srcrawl.warc.output import WarcOutput
    from srcrawl.warc.read import WarcTexts, read_payload
    from srcrawl.warc.records import prepare_fetch
    from srcrawl.warc.storage import LocalWarcStorage, Pointer

    storage = LocalWarcStorage(tmp_path)
    out = WarcOutput(storage, "job", 10**6)
    fetches = [
        prepare_fetch(
            f"http://127.0.0.1/p/{fp}",
            status=200,
            headers={},
            body=f"<p>{fp}</p>".encode(),
            ip="",
            fetched_at=1.7e9,
            request=b"GET / HTTP/1.1\r\n\r\n",
            text=f"中文 {fp}",
        )
        for fp in (1, 2)
    ]
    [[_q1, r1, c1], [_q2, r2, c2]] = out.append([f.records() for f in fetches])
    out.close()
    imported = str(tmp_path / "job" / r1.file.split("/")[-1])  # an archive by absolute path
    _schema_6_pages(store)
    rows = [
        (1, r1.file, r1.offset, r1.length, c1.length),
        (2, r2.file, r2.offset, r2.length, c2.length),
        (3, imported, r1.offset, r1.length, None),
    ]
    _insert_schema_6_rows(store, rows)
    store.init_schema()
    store.init_schema()  # once migrated, nothing more happens
    assert store.schema_version() == SCHEMA_VERSION == "8"
    with store.transaction(read_only=True) as cur:
        assert "warc_file" not in store._columns(cur, "pages")  # its bytes are freed
    assert store.count("warc_files") == 2 and store.warc_files() == sorted([r1.file, imported])
    got = {p.fp: p for p in store.get_pages([1, 2, 3], with_body=True)}
    assert [got[fp].warc_file for fp in (1, 2, 3)] == [r1.file, r2.file, imported]
    for fp in (1, 2):
        pointer = Pointer(got[fp].warc_file, got[fp].warc_offset, got[fp].warc_length)
        assert read_payload(storage, pointer) == f"<p>{fp}</p>".encode()
    assert store.stored_payloads([3])[3].warc_file == imported
    store.warc_texts = WarcTexts(tmp_path)
    docs = {fp: text for fp, _at, _url, _title, text in store.index_documents([1, 2, 3])}
    assert docs == {1: "中文 1", 2: "中文 2", 3: "row text"}
    store.save_fetched([_warc_page(4, r1.file, 0)], [])  # a file named before: its number
    assert store.count("warc_files") == 2 and store.get_pages([4])[0].warc_file == r1.file


@pytest.mark.mysql
def test_a_mariadb_store_tells_the_free_space_of_its_data_disk_by_the_disks_plugin(
    mysql_db: DatabaseURL,
) -> None:
    from disks_plugin import disks_plugin, disks_plugin_installed

    store = open_store(mysql_db)
    try:
        if not disks_plugin_installed(mysql_db):  # no information_schema.DISKS: unknown
            assert store.disk_free_bytes() is None
        with disks_plugin(mysql_db):
            free = store.disk_free_bytes()
            (datadir,) = store._query("SELECT @@datadir")[0]
        assert free is not None and free > 0
        if mysql_db.host in ("127.0.0.1", "localhost") and Path(datadir).exists():
            # the server on this machine: what the kernel says of the same disk
            assert abs(free - shutil.disk_usage(datadir).free) < 2**30
        store.init_schema()  # the store goes on as before once the plugin is gone
    finally:
        store.close()


def test_the_disk_of_the_data_directory_is_the_one_mounted_deepest_above_it() -> None:
    from srcrawl.sql.mysql_store import disk_available

    disks = [("/", 100), ("/var", 20), ("/var/lib/mysql2", 3), ("/dev/shm", 7)]
    assert disk_available("/var/lib/mysql/", disks) == 20 * 1024
    assert disk_available("/var/lib/mysql2/", disks) == 3 * 1024
    assert disk_available("/srv/db", disks) == 100 * 1024
    assert disk_available("/srv/db", disks[1:]) is None
    assert disk_available("/variable", disks[1:]) is None
    assert disk_available("/var/lib/mysql/", []) is None
