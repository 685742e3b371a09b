"""PageWriter on a real store: one batch per flush, and one hostile page never holds it back."""

from __future__ import annotations

import sqlite3

import pytest

from srcrawl.core.errors import StoreError
from srcrawl.settings.config import DatabaseURL
from srcrawl.slave import page_writer
from srcrawl.slave.page_writer import PageWriter
from srcrawl.sql.pages import Page
from srcrawl.sql.store import Store, open_store


def page(fp: int, text: str = "text") -> Page:
    return Page(
        fp=fp,
        url=f"http://127.0.0.1:9/{fp}",
        host="127.0.0.1:9",
        status=200,
        fetched_at=1.0,
        title=f"title {fp}",
        text=text,
        body=b"x",
    )


@pytest.fixture
def sqlite_store(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(page_writer, "_BACKOFF", 0.001)
    store = open_store(DatabaseURL(kind="sqlite", path=str(tmp_path / "w.db")))
    store.init_schema()
    yield store
    store.close()


def stored(store: Store) -> dict[int, tuple[str, str, bool]]:
    with store.transaction(read_only=True) as cur:
        cur.execute("SELECT fp, title, text, body IS NOT NULL FROM pages")
        return {fp: (title, text, bool(body)) for fp, title, text, body in cur.fetchall()}


def links(store: Store) -> set[tuple[int, int]]:
    with store.transaction(read_only=True) as cur:
        cur.execute("SELECT src, dst FROM links")
        return set(cur.fetchall())


def test_a_page_the_store_refuses_is_stored_bare_and_the_others_whole(sqlite_store) -> None:
    # SQLite refuses a value over its length limit whatever happens, as MySQL
    # refuses a text over MEDIUMTEXT or a packet over max_allowed_packet:
    # retried as one batch, the page would stall the slave for good.
    sqlite_store._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 50_000)
    writer = PageWriter(sqlite_store)
    writer.add([page(1)], [(1, 2)])
    writer.add([page(2, text="字" * 60_000)], [(2, 3), (2, 4)])
    writer.add([page(3)], [(3, 1)])
    assert writer.flush() == 3
    assert stored(sqlite_store) == {
        1: ("title 1", "text", True),
        2: ("", "", False),  # the URL is recorded, its content is not
        3: ("title 3", "text", True),
    }
    assert links(sqlite_store) == {(1, 2), (2, 3), (2, 4), (3, 1)}
    assert (writer.stored_bare, writer.dropped) == (1, 0)
    assert writer.flush() == 0  # nothing left behind to fail again


def test_a_store_that_is_down_keeps_every_page_for_the_next_flush(
    sqlite_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = PageWriter(sqlite_store)
    writer.add([page(1), page(2)], [(1, 2), (2, 1)])
    save = sqlite_store.save_fetched

    def down(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise StoreError("database is restarting")

    monkeypatch.setattr(sqlite_store, "save_fetched", down)
    with pytest.raises(StoreError):
        writer.flush()
    assert stored(sqlite_store) == {} and writer.stored_bare == 0
    monkeypatch.setattr(sqlite_store, "save_fetched", save)
    writer.add([page(3)], [])
    assert writer.flush() == 3
    assert set(stored(sqlite_store)) == {1, 2, 3}
    assert links(sqlite_store) == {(1, 2), (2, 1)}
    assert all(title.startswith("title") for title, _, _ in stored(sqlite_store).values())


def test_a_page_that_breaks_the_insert_itself_is_dropped_not_retried_forever(
    sqlite_store,
) -> None:
    writer = PageWriter(sqlite_store)
    writer.add([page(1), Page(fp=2, url=None, host="h")], [(1, 2)])  # type: ignore[arg-type]
    assert writer.flush() == 2
    assert set(stored(sqlite_store)) == {1} and writer.dropped == 1
    assert writer.flush() == 0
