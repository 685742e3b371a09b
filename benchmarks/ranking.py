"""Does search find the page a user means? Known-item queries on the test web, scored.

The test web made with ``known_items`` (see :mod:`srcrawl.testweb.known`) holds
pages with distinctive titles, anchor texts and a host menu, and the queries that
name each page (its title's words, the words links to it use, a menu label). Its
pages are rendered, parsed and stored as a crawl stores them (title, text, links
with their anchor text) into one SQLite file, without a crawl. Each code compared
indexes a copy with its own ``srcrawl index``, then answers every query in a process
of its own (:data:`CHILD`, run with that code on ``PYTHONPATH``): the rank of the
answer in its top 10 and each query's latency, one round per code in alternating
order, a warm-up pass first.

Figures: MRR (mean of 1/rank, 0 when the answer is not in the top 10) and
success@k (the share of queries whose answer is in the top k).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srcrawl.benchmarks.startup import (
    Code,
    _index_copy,
    index_dir_of,
    search_child,
)
from srcrawl.core.urls import fingerprint, host_of
from srcrawl.queues.crawl_protocol import canonical_links
from srcrawl.settings.config import Config
from srcrawl.slave.links import canonical_anchors
from srcrawl.slave.parse import parse_html
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.pages import Page
from srcrawl.sql.store import open_store
from srcrawl.testweb.content import render
from srcrawl.testweb.generator import generate
from srcrawl.testweb.model import KnownItem

Progress = Callable[[str], None]
CUTOFFS = (1, 3, 10)

CHILD = r"""
import inspect, json, os, sys, time
from srcrawl.indexer.search import Searcher
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import open_store
db, queries_file, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
queries = json.load(open(queries_file, encoding="utf-8"))
store = open_store(DatabaseURL(kind="sqlite", path=db))
# a code with its index in a directory of its own takes it as the second argument
takes_index = "index" in inspect.signature(Searcher).parameters
searcher = Searcher(store, os.environ["SRCRAWL_INDEX_DIR"]) if takes_index else Searcher(store)
urls = [[h.url for h in searcher.search(q, top=10).hits] for q in queries]
ms = [[] for _ in queries]
for _ in range(passes):
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        searcher.search(q, top=10)
        ms[i].append((time.perf_counter() - t0) * 1000)
json.dump({"urls": urls, "ms": ms}, sys.stdout)
"""
"""Run with a code's ``PYTHONPATH``: only APIs every compared code has (Searcher, open_store;
the index directory where a code's Searcher takes one)."""


def rank_of(answer: str, urls: Sequence[str]) -> int | None:
    """1-based position of ``answer`` in ``urls``, None when absent."""
    return urls.index(answer) + 1 if answer in urls else None


@dataclass
class Scores:
    """Ranking figures of one code over a query set: MRR and success@k."""

    ranks: list[int | None]

    @property
    def mrr(self) -> float:
        return sum(1 / r for r in self.ranks if r) / len(self.ranks) if self.ranks else 0.0

    def success(self, k: int) -> float:
        return sum(1 for r in self.ranks if r and r <= k) / len(self.ranks) if self.ranks else 0.0

    def as_json(self) -> dict[str, float]:
        return {"mrr": self.mrr, **{f"success@{k}": self.success(k) for k in CUTOFFS}}


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0–100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class CodeRun:
    """One code's answers: the top URLs of each query and every timed latency."""

    code: Code
    urls: list[list[str]] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)


@dataclass
class RankingResult:
    hosts: int
    pages: int
    rounds: int
    queries: list[KnownItem]
    runs: list[CodeRun]

    def scores(self, run: CodeRun, kind: str | None = None) -> Scores:
        return Scores(
            [
                rank_of(q.url, urls)
                for q, urls in zip(self.queries, run.urls, strict=True)
                if kind is None or q.kind == kind
            ]
        )

    def render(self) -> str:
        kinds = sorted({q.kind for q in self.queries})
        counts = ", ".join(f"{k} {sum(q.kind == k for q in self.queries)}" for k in kinds)
        lines = [
            f"search ranking: {len(self.queries)} known-item queries ({counts}) on the known-item "
            f"test web, {self.hosts} hosts x {self.pages} pages; latency over {self.rounds} rounds",
            f"  {'code':<6}{'queries':<9}{'MRR':>6}{'@1':>7}{'@3':>7}{'@10':>7}"
            f"{'p50 ms':>9}{'p95 ms':>9}",
        ]
        for run in self.runs:
            for kind in (None, *kinds):
                s = self.scores(run, kind)
                lat = (
                    f"{statistics.median(run.ms):>9.2f}{percentile(run.ms, 95):>9.2f}"
                    if kind is None
                    else ""
                )
                lines.append(
                    f"  {run.code.label:<6}{kind or 'all':<9}{s.mrr:>6.3f}{s.success(1):>7.3f}"
                    f"{s.success(3):>7.3f}{s.success(10):>7.3f}{lat}"
                )
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "parameters": {"hosts": self.hosts, "pages": self.pages, "rounds": self.rounds},
            "codes": {
                r.code.label: {
                    "root": str(r.code.root),
                    "all": self.scores(r).as_json(),
                    **{k: self.scores(r, k).as_json() for k in {q.kind for q in self.queries}},
                    "p50_ms": statistics.median(r.ms),
                    "p95_ms": percentile(r.ms, 95),
                }
                for r in self.runs
            },
        }


def known_item_store(path: Path, hosts: int, pages: int, seed: int) -> list[KnownItem]:
    """The known-item web's indexable pages and their links stored in a new SQLite file at
    ``path`` as a crawl stores them; the web's queries."""
    web = generate(hosts=hosts, pages=pages, seed=seed, known_items=True)
    path.unlink(missing_ok=True)
    store = open_store(DatabaseURL(kind="sqlite", path=str(path)))
    try:
        store.init_schema()
        stored, links = [], []
        for page in web.pages.values():
            if not page.indexable or page.encoding != "utf-8":
                continue
            parsed = parse_html(render(web, page).body.decode("utf-8", "replace"), page.url)
            fp = fingerprint(page.url)
            stored.append(
                Page(
                    fp=fp,
                    url=page.url,
                    host=host_of(page.url),
                    status=200,
                    fetched_at=1.0,
                    title=parsed.title,
                    text=parsed.text,
                )
            )
            canonical, _invalid = canonical_links(parsed.links)
            texts = canonical_anchors(canonical, parsed.anchors)
            links.extend((fp, dst, texts.get(dst)) for dst in canonical.values())
        store.put_pages(stored)
        store.put_links(links)
    finally:
        store.close()
    return web.queries


def _answers(code: Code, db: Path, queries_file: Path, passes: int) -> dict[str, Any]:
    extra = {"SRCRAWL_DB_URL": f"sqlite:///{db}", "SRCRAWL_INDEX_DIR": str(index_dir_of(db))}
    return search_child(code, CHILD, [str(db), str(queries_file), str(passes)], db.parent, extra)


def run_ranking_benchmark(
    cfg: Config,
    *,
    codes: Sequence[Code],
    hosts: int = 2,
    pages: int = 60,
    seed: int = 1,
    rounds: int = 5,
    say: Progress = print,
) -> RankingResult:
    """Rank every known-item query with each code; latency over ``rounds`` alternating rounds."""
    directory = cfg.home / "bench" / "ranking"
    directory.mkdir(parents=True, exist_ok=True)
    pages_db = directory / f"known-{hosts}-{pages}-{seed}.db"
    say(f"storing the known-item test web ({hosts} hosts x {pages} pages) in {pages_db}")
    queries = known_item_store(pages_db, hosts, pages, seed)
    queries_file = directory / "queries.json"
    queries_file.write_text(json.dumps([q.query for q in queries], ensure_ascii=False))
    dbs = {c.label: _index_copy(cfg, c, pages_db, say) for c in codes}
    runs = {c.label: CodeRun(c) for c in codes}
    for r in range(rounds):
        say(f"round {r + 1}/{rounds}")
        for code in codes if r % 2 == 0 else list(reversed(codes)):
            got = _answers(code, dbs[code.label], queries_file, 1)
            run = runs[code.label]
            run.urls = run.urls or got["urls"]
            run.ms.extend(ms for per_query in got["ms"] for ms in per_query)
    return RankingResult(hosts, pages, rounds, queries, [runs[c.label] for c in codes])
