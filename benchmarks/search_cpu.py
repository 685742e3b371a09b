"""A search's CPU on a real corpus: srcrawl beside Tantivy alone, and beside another code.

Each code searches in a child process of its own (only the APIs every compared code
has: ``Searcher(store, index_dir)`` and ``open_store(db, warc_root)``), one pass over the corpus's
queries a child, the codes alternating pass by pass, so a machine that slows down for
a minute slows both. A search's cost is the CPU time of the searching thread
(``time.thread_time``): on a shared machine the wall time of one search swings with
the load, its CPU time much less, but not enough for a ratio of two passes a minute
apart (the p95 over Tantivy alone's of one corpus ranged 1.4–2.3 between two runs of
the same code). So Tantivy alone searches in srcrawl's child, each query right after
srcrawl's search of it: the two are timed in the same moments, under the same load.
Another code's child does the same (with that code's own Tantivy alone), so that each
code's searches share the process and the caches with the same other work.

Tantivy alone is the same search done by the library with nothing of srcrawl's around
it: srcrawl's every-word query for the text (built before timing), the top 10; when
fewer pages hold every word, the rest of the 10 from srcrawl's query of pages with some
of the words, as srcrawl fills them (a long query in a user's words often has no page
with every word, and a search that shows nothing is no search to compare with); and a
snippet of each hit by Tantivy's own ``SnippetGenerator`` over the page text the index
stores (an index without stored text: the search alone). Its analyzer does not cut
Chinese into words, so its snippets of Chinese pages are empty; a pass of its own times
it with them made (TantivyAlone's ``chinese``), the figure to judge a Chinese corpus's
snippets by.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srcrawl.benchmarks.index import BenchmarkError
from srcrawl.benchmarks.ranking import percentile
from srcrawl.benchmarks.startup import Code, search_child
from srcrawl.core.defaults import DEFAULT_SEARCH_TOP, DEFAULT_SNIPPET_CHARS

WARM_QUERIES = 5
"""Queries each child runs before timing: the index's first reads are not a search's."""

CHILD = r"""
import json, pathlib, sys, time
from srcrawl.indexer.search import Searcher
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import open_store
db, index, warc, queries_file, warm, top = sys.argv[1:7]
chinese = sys.argv[7:] == ["chinese"]  # Tantivy alone with its Chinese snippets, only
queries = json.load(open(queries_file, encoding="utf-8"))
store = open_store(DatabaseURL(kind="sqlite", path=db), pathlib.Path(warc))
searcher = Searcher(store, index)
alone, prepared = None, [None] * len(queries)
try:  # Tantivy alone beside it, each query right after the code's search (its own copy)
    from srcrawl.benchmarks.search_cpu import TantivyAlone
    from srcrawl.indexer.search import QueryError
    alone = TantivyAlone(pathlib.Path(index), chinese=True) if chinese else (
        TantivyAlone(pathlib.Path(index))
    )
except ImportError:  # a code before it: its searches timed alone
    pass
def prepare(q):
    try:
        return alone.query(q)
    except QueryError:  # a query srcrawl refuses: nothing to search
        return None
if alone is not None:
    prepared = [prepare(q) for q in queries]
failed = []
def search(q):
    if chinese:
        return []
    try:
        hits = searcher.search(q, top=int(top)).hits
        return [[h.url, *getattr(h, "similar_urls", [])] for h in hits]
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # a query the code refuses (QueryError) has no hits
        if type(e).__name__ == "QueryError":
            return []
        failed.append(f"{q!r}: {type(e).__name__}: {e}")  # a code's own bug (a Rust panic)
        return None
for q, p in list(zip(queries, prepared))[: int(warm)]:
    search(q)
    if p is not None:
        alone.search(p)
if not chinese:
    try:  # the embedding model loaded as a server loads it, at start (the portal)
        from srcrawl.indexer.search import meaning
        getattr(meaning, "available", lambda: None)()
    except ImportError:  # a code before it
        pass
    tokenizer = getattr(searcher, "tokenizer", None)
    getattr(tokenizer, "warm_up", lambda: None)()  # as a server starts (not in a code before)
failed.clear()
ms, urls, alone_ms = [], [], []
for q, p in zip(queries, prepared):
    t0 = time.thread_time()
    got = search(q)
    if got is not None:  # a failed search is no search to time
        ms.append((time.thread_time() - t0) * 1000)
    urls.append(got or [])
    if p is not None:
        t0 = time.thread_time()
        alone.search(p)
        alone_ms.append((time.thread_time() - t0) * 1000)
json.dump({"ms": ms, "urls": urls, "failed": failed, "alone_ms": alone_ms}, sys.stdout)
"""


@dataclass
class CodeCpu:
    """One code's CPU ms a search over every pass, and its answers (the last pass's)."""

    label: str
    ms: list[float] = field(default_factory=list)
    urls: list[list[list[str]]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # queries its search raised on

    def figures(self) -> dict[str, float]:
        return {"p50_ms": percentile(self.ms, 50), "p95_ms": percentile(self.ms, 95)}


@dataclass
class SearchCpu:
    """A corpus's search CPU: srcrawl (``this``), Tantivy alone (and with its Chinese
    snippets made, ``chinese``), and another code."""

    this: CodeCpu
    tantivy: CodeCpu
    base: CodeCpu | None = None
    chinese: CodeCpu = field(default_factory=lambda: CodeCpu("tantivy+jieba"))

    def codes(self) -> list[CodeCpu]:
        """The codes timed, srcrawl first."""
        return [c for c in (self.this, self.tantivy, self.chinese, self.base) if c and c.ms]

    def render(self) -> str:
        mine, lib = self.this.figures(), self.tantivy.figures()
        line = (
            f"  search CPU ms p50/p95 ({len(self.this.ms)} searches): srcrawl "
            f"{mine['p50_ms']:.2f}/{mine['p95_ms']:.2f}, Tantivy alone "
            f"{lib['p50_ms']:.2f}/{lib['p95_ms']:.2f} (p95 ×{mine['p95_ms'] / lib['p95_ms']:.2f})"
        )
        if self.chinese.ms:
            cut = self.chinese.figures()
            line += (
                f", with its Chinese snippets {cut['p50_ms']:.2f}/{cut['p95_ms']:.2f} "
                f"(p95 ×{mine['p95_ms'] / cut['p95_ms']:.2f})"
            )
        if self.base is not None:
            old = self.base.figures()
            line += (
                f", {self.base.label} {old['p50_ms']:.2f}/{old['p95_ms']:.2f} "
                f"({old['p50_ms'] / mine['p50_ms']:.1f}× / {old['p95_ms'] / mine['p95_ms']:.1f}×"
                " less CPU now)"
            )
            if self.base.failed:
                line += f"; {self.base.label} failed on {len(self.base.failed)} queries: " + (
                    "; ".join(self.base.failed[:3])
                )
        return line

    def as_json(self) -> dict[str, Any]:
        out = {"srcrawl": self.this.figures(), "tantivy_alone": self.tantivy.figures()}
        if self.chinese.ms:
            out["tantivy_alone_chinese_snippets"] = self.chinese.figures()
        if self.base is not None:
            out[self.base.label] = {**self.base.figures(), "failed": self.base.failed}
        return out


class TantivyAlone:
    """Tantivy searching ``index_dir`` and making its own snippets (see the module).

    Its snippet of a Chinese page is empty: Tantivy's analyzer does not cut Chinese into
    words (srcrawl's index is given jieba's words), so it finds no query word in the
    text, and makes nothing of it. With ``chinese``, a text holding Chinese is cut by
    jieba-rs first, as Tantivy with a jieba tokenizer would cut it, and its snippet is
    made of those words: a Chinese search's snippets as an engine of Tantivy and jieba
    alone makes them."""

    def __init__(self, index_dir: Path, chinese: bool = False) -> None:
        import tantivy

        from srcrawl.indexer.engine import STORED_TEXT, open_index
        from srcrawl.indexer.search.query import every_word, lower, some_words
        from srcrawl.indexer.search.weights import RankWeights
        from srcrawl.indexer.tokenizer import get_tokenizer, user_dict_from_env

        self._tantivy = tantivy
        self.index = open_index(index_dir)
        self.searcher = self.index.searcher()
        self._stored = STORED_TEXT
        tokenizer, weights = get_tokenizer(user_dict_from_env()), RankWeights()

        def prepare(text: str) -> tuple[Any, Any]:
            units = lower(tokenizer, text, weights)[0]
            return every_word(units), some_words(units) if units.positive > 1 else None

        self.query = prepare
        self.snippets: list[Any] = []  # the last search's, in order
        self._cut: Callable[[str], str] | None = None
        if chinese:
            from srcrawl.indexer.text import HAN_RUN
            from srcrawl.indexer.tokenizer import load_segmenter

            segmenter = load_segmenter(user_dict_from_env())

            def cut(text: str) -> str:
                return " ".join(segmenter.cut(text, True)) if HAN_RUN.search(text) else text

            self._cut = cut

    def search(self, query: tuple[Any, Any]) -> list[Any]:
        """The top hits (score, address) of the (prepared) ``query``: its pages with every
        word, then those with some of them; their snippets made."""
        every, some = query
        hits = self.searcher.search(every, DEFAULT_SEARCH_TOP).hits
        if len(hits) < DEFAULT_SEARCH_TOP and some is not None:
            held = {(a.segment_ord, a.doc) for _score, a in hits}
            more = self.searcher.search(some, DEFAULT_SEARCH_TOP).hits
            more = [h for h in more if (h[1].segment_ord, h[1].doc) not in held]
            hits += more[: DEFAULT_SEARCH_TOP - len(hits)]
        make = self._tantivy.SnippetGenerator.create(
            self.searcher, some if some is not None else every, self.index.schema, "body"
        )
        make.set_max_num_chars(DEFAULT_SNIPPET_CHARS)
        self.snippets = []
        for _score, address in hits:
            stored = self.searcher.doc(address).get_first(self._stored)
            if stored is not None:
                text = bytes(stored).decode()
                if self._cut is not None:
                    text = self._cut(text)
                self.snippets.append(make.snippet_from_doc(self._tantivy.Document(body=[text])))
        return hits


def child_pass(job: CodeJob, queries_file: Path, chinese: bool = False) -> dict[str, Any]:
    """One timed pass of the job's code's search over the queries in ``queries_file``
    (JSON), and Tantivy alone's search of each query after it (``alone_ms``; none with a
    code before TantivyAlone); ``chinese``: only Tantivy alone's, its Chinese snippets
    made (a pass of its own: cutting whole pages with jieba would warm and cool the
    caches around srcrawl's searches as no other code's are)."""
    args = [str(job.db), str(job.index_dir), str(job.warc_dir), str(queries_file)]
    args += [str(WARM_QUERIES), str(DEFAULT_SEARCH_TOP), *(["chinese"] if chinese else [])]
    return search_child(job.code, CHILD, args, job.db.parent, {})


@dataclass(frozen=True)
class CodeJob:
    """Where one code's crawl of the corpus is: its SQLite store, index and WARC
    directories."""

    code: Code
    db: Path
    index_dir: Path
    warc_dir: Path


def time_searches(
    queries: Sequence[str], this: CodeJob, base: CodeJob | None, rounds: int, scratch: Path
) -> SearchCpu:
    """``rounds`` passes over ``queries`` by each code, alternating, Tantivy alone paired
    with srcrawl's (see the module)."""
    queries_file = scratch / "queries.json"
    queries_file.write_text(json.dumps(list(queries), ensure_ascii=False), encoding="utf-8")
    result = SearchCpu(CodeCpu("srcrawl"), CodeCpu("tantivy"))
    if base is not None:
        result.base = CodeCpu(base.code.label)
    for _ in range(rounds):
        for job, cpu in ((this, result.this), (base, result.base)):
            if job is not None and cpu is not None:
                got = child_pass(job, queries_file)
                if got["failed"] and job is this:
                    raise BenchmarkError("srcrawl's search failed: " + "; ".join(got["failed"]))
                cpu.ms += got["ms"]
                cpu.urls, cpu.failed = got["urls"], got["failed"]
                if job is this:
                    result.tantivy.ms += got["alone_ms"]
        result.chinese.ms += child_pass(this, queries_file, chinese=True)["alone_ms"]
    return result
