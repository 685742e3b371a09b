"""Pages never indexable (a 404, a redirect, an error on their first fetch) are marked done
once, so no later `index` pass reads them again, nor commits anything for them."""

from __future__ import annotations

import time

import pytest

from srcrawl.core.urls import fingerprint
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page
from srcrawl.sql.store import Store

from .conftest import cli_env, run_cli


def _page(name: str, **kw) -> Page:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:9/{name}"
    return Page(
        fp=fingerprint(url),
        url=url,
        host="127.0.0.1:9",
        fetched_at=time.time(),
        title=name,
        text=f"{name} words here",
        **kw,
    )


PAGES = [
    _page("ok", status=200),
    _page("missing", status=404),
    _page("moved", status=301),
    _page("broken", status=200, error="timeout", body_state="incomplete"),
]


def _unmarked(store: Store) -> set[str]:
    return {u for (u,) in store._query("SELECT url FROM pages WHERE indexed_at IS NULL")}


def _last_commit(cfg: Config) -> str:
    return (cfg.index_path / "meta.json").read_text()


def test_unindexable_pages_are_settled_once(store: Store) -> None:
    store.put_pages(PAGES)
    unmarked = store.unindexable_unmarked(2)  # in batches
    assert len(unmarked) == 2 and store.settle_unindexable(unmarked, time.time()) == 2
    rest = store.unindexable_unmarked(10)
    assert len(rest) == 1 and store.settle_unindexable(rest, time.time()) == 1
    assert store.unindexable_unmarked(10) == []  # nothing is read again
    assert _unmarked(store) == {PAGES[0].url}  # the indexable one is left to the index
    # fetched again, now indexable: back in the index's work, and not settled
    store.put_pages([_page("missing", status=200)])
    assert PAGES[1].fp in store.unindexed_pages(None, 10)
    assert store.settle_unindexable([PAGES[1].fp], time.time()) == 0


@pytest.mark.slow
def test_an_index_pass_leaves_no_page_to_read_again(redis_url, keys, tmp_path) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    cfg = Config.load(env=env)
    store = cfg.store()
    store.init_schema()
    store.put_pages(PAGES)
    r = run_cli(["index", "--slaves", "1", "--json"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _unmarked(store) == set()
    commit = _last_commit(cfg)
    r = run_cli(["index", "--slaves", "1", "--json"], env)  # nothing new: nothing is committed
    assert r.returncode == 0, r.stderr[-2000:]
    assert _last_commit(cfg) == commit and _unmarked(store) == set()
    cfg.close()
