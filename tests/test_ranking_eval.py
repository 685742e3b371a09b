"""The known-item evaluation of `srcrawl bench search`: its figures, its query set, and the
ranking it guards (success@3 on the known-item test web)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from srcrawl.benchmarks.ranking import Scores, known_item_store, percentile, rank_of
from srcrawl.core.urls import canonicalize
from srcrawl.indexer.search import Searcher
from srcrawl.settings.config import Config
from srcrawl.slave.parse import parse_html
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import open_store
from srcrawl.testweb.content import render
from srcrawl.testweb.generator import generate
from srcrawl.testweb.urls import origin_of

from .conftest import cli_env, run_cli


def test_figures_of_a_hand_made_query_set() -> None:
    ranks = [rank_of("a", ["a", "b"]), rank_of("a", ["c", "b", "a"]), rank_of("a", ["b"])]
    assert ranks == [1, 3, None]
    s = Scores(ranks)
    assert s.mrr == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert (s.success(1), s.success(3), s.success(10)) == (pytest.approx(1 / 3),) + (
        pytest.approx(2 / 3),
    ) * 2
    assert Scores([]).mrr == 0.0
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 95) == 5.0
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0


def test_known_items_hold_by_construction() -> None:
    web = generate(hosts=2, pages=30, seed=4, known_items=True)
    kinds = {(q.kind, q.lang) for q in web.queries}
    assert kinds == {(k, lang) for k in ("title", "anchor", "menu") for lang in ("en", "zh")}
    texts = {
        url: parse_html(render(web, p).body.decode(), url)
        for url, p in web.pages.items()
        if p.indexable and p.encoding == "utf-8" and p.template in ("regular", "root")
    }
    for q in web.queries:
        own = texts[q.url]
        if q.kind == "anchor":  # the words are in no text of the page, only in links to it
            ws = q.query.split() if q.lang == "en" else [q.query[:2], q.query[2:]]
            assert all(w not in own.text for w in ws), q
            assert any(
                ws[0] in text
                for t in texts.values()
                for u, text in t.anchors.items()
                if canonicalize(u) == q.url
            ), q
        elif q.kind == "title":
            assert all(w in own.title.lower() for w in q.query.split()), q
        else:  # a menu label: on every page of the host
            assert own.title == q.query
            host = [
                t
                for u, t in texts.items()
                if origin_of(u) == origin_of(q.url) and web.pages[u].template == "regular"
            ]
            assert all(q.query in t.text for t in host)
    # the known-item content is an option: the default web is unchanged
    assert generate(hosts=2, pages=30, seed=4).queries == []


@pytest.mark.slow
def test_known_item_web_finds_the_page_meant(redis_url: str, tmp_path: Path) -> None:
    env = cli_env(redis_url, f"rank-{uuid.uuid4().hex[:8]}", tmp_path)
    db = Path(env["SRCRAWL_DB_URL"].removeprefix("sqlite:///"))
    queries = known_item_store(db, hosts=2, pages=30, seed=2)
    run = run_cli(["index", "--slaves", "1"], env)
    assert run.returncode == 0, run.stderr
    store = open_store(DatabaseURL(kind="sqlite", path=str(db)))
    try:
        searcher = Searcher(store, Config.load(env=env).index_path)
        ranks = [
            rank_of(q.url, [h.url for h in searcher.search(q.query, top=10).hits]) for q in queries
        ]
    finally:
        store.close()
    scores = Scores(ranks)
    assert len(ranks) > 100
    assert scores.success(3) >= 0.95, scores.as_json()
