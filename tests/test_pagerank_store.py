"""The store methods PageRank reads and writes through, on every backend."""

from __future__ import annotations

import pytest

from srcrawl.core.defaults import DEFAULT_STORE_BULK_BATCH
from srcrawl.pagerank.graph import load_graph
from srcrawl.sql.pages import Page


def test_iter_page_hosts_pages_through_in_fingerprint_order(store) -> None:
    fps = [2**63 - 1, -(2**63), 0, 17, -4, 99]
    store.put_pages(
        Page(fp=fp, url=f"http://h{i}.test/", host=f"h{i}.test", fetched_at=1.0)
        for i, fp in enumerate(fps)
    )
    batches = list(store.iter_page_hosts(batch=4))
    assert [len(b) for b in batches] == [4, 2]
    got = [row for b in batches for row in b]
    assert [fp for fp, _ in got] == sorted(fps)
    assert dict(got)[17] == "h3.test"


def test_bulk_load_writes_everything_and_restores_settings(store) -> None:
    normal = store.batch_size
    pages = [
        Page(fp=i, url=f"http://x.test/{i}", host="x.test", fetched_at=1.0) for i in range(3000)
    ]
    links = [(i, (i * 7 + 1) % 3000) for i in range(3000)] + [(1, 8), (1, 8)]
    with store.bulk_load() as bulk:
        assert bulk is store and store.batch_size == DEFAULT_STORE_BULK_BATCH
        assert store.put_pages(pages) == 3000
        store.put_links(links)
    assert store.batch_size == normal
    assert store.count("pages") == 3000 and store.count("links") == 3000
    graph = load_graph(store)
    assert graph.n == 3000 and graph.m == 3000  # (1, 8) is one of them: stored once
    if store.dialect == "sqlite":
        (cache,) = store._conn.execute("PRAGMA cache_size").fetchone()
        assert cache == -2000  # SQLite's default again


def test_bulk_load_restores_settings_after_an_error(store) -> None:
    normal = store.batch_size
    with pytest.raises(RuntimeError), store.bulk_load():
        raise RuntimeError("interrupted import")
    assert store.batch_size == normal


def _sqlite_indexes(store) -> set[str]:
    rows = store._conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ).fetchall()
    return {name for (name,) in rows}


def test_sqlite_bulk_load_builds_the_secondary_indexes_after_the_load(tmp_path) -> None:
    from srcrawl.sql.sqlite_store import SQLiteStore

    store = SQLiteStore(str(tmp_path / "bulk.db"))
    store.init_schema()
    before = _sqlite_indexes(store)
    assert {"pages_host", "pages_indexed"} <= before
    with store.bulk_load():
        assert not {"pages_host", "pages_indexed"} & _sqlite_indexes(store)
        store.put_links([(1, 2), (3, 2)])
    assert _sqlite_indexes(store) == before
    plan = store._conn.execute("EXPLAIN QUERY PLAN SELECT fp FROM pages WHERE host = 'h'")
    assert "pages_host" in str(plan.fetchall())
    with pytest.raises(RuntimeError), store.bulk_load():
        raise RuntimeError("interrupted import")
    assert _sqlite_indexes(store) == before
    store.close()
