"""`srcrawl bench search --corpus`: srcrawl's ranking on real documentation, beside plain BM25.

A corpus is a Debian package's HTML documentation (obtained once with
``apt-get download`` and ``dpkg -x`` into ``$SRCRAWL_HOME/bench/corpora/``) or a
directory of HTML, and a file of known-item queries (see :mod:`known_queries`).
The tree is served on loopback by a plain static HTTP server, crawled by the
real ``srcrawl crawl`` (master and slaves, no politeness wait: the site is ours),
indexed by ``srcrawl index`` and ranked by ``srcrawl pagerank``, each run as the
command a user runs, on a job and SQLite store of the benchmark's own. Then every
query goes through srcrawl's search, and through a plain BM25 (:mod:`bm25`) the
benchmark builds over the same stored pages' titles and texts with srcrawl's own
tokenizer. Figures: success@1, success@3 and MRR@10 (1/rank of the answer in the
top 10, else 0).
"""

from __future__ import annotations

import functools
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from srcrawl.app.local import popen_child, stop_children
from srcrawl.benchmarks.bm25 import BM25
from srcrawl.benchmarks.index import BenchmarkError, _drop_job_keys
from srcrawl.benchmarks.known_queries import QueryFile, check_answers, rank_of_answer
from srcrawl.benchmarks.ranking import Scores
from srcrawl.benchmarks.search_cpu import CodeJob, SearchCpu, time_searches
from srcrawl.benchmarks.search_instructions import SearchInstructions, count_instructions
from srcrawl.benchmarks.startup import Code, this_code
from srcrawl.core.defaults import BENCH_CORPUS_DEPTH, DEFAULT_SEARCH_TOP
from srcrawl.settings.config import Config
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import Store

Progress = Callable[[str], None]
TOP = DEFAULT_SEARCH_TOP  # MRR@10: the hits a search shows
SYSTEMS = ("srcrawl", "bm25")  # srcrawl's search, and the plain BM25 beside it


# -- the corpus ------------------------------------------------------------------
def unpacked_package(cfg: Config, qf: QueryFile, say: Progress) -> tuple[Path, str]:
    """The HTML tree of ``qf``'s Debian package and the package's version, unpacked under
    ``$SRCRAWL_HOME/bench/corpora/`` on first use (``apt-get download`` + ``dpkg -x``)."""
    assert qf.package is not None
    name, version = qf.package
    cache = (cfg.home / "bench" / "corpora" / name).resolve()  # the tools run inside it
    marker = cache / "unpacked.json"
    tree = cache / "root" / qf.header.get("root", "")
    if marker.is_file() and tree.is_dir():
        return tree, json.loads(marker.read_text())["version"]
    for tool in ("apt-get", "dpkg", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise BenchmarkError(
                f"corpus {qf.name} is Debian's {name}: `{tool}` is not on PATH (on Debian: "
                f"`apt-get download {name}={version} && dpkg -x {name}_*.deb DIR`, then "
                f"`--corpus DIR/{qf.header.get('root', '')} --query-file {qf.path}`)"
            )
    cache.mkdir(parents=True, exist_ok=True)
    for old in cache.glob("*.deb"):
        old.unlink()
    deb = _download(name, version, cache, say)
    got = _run_tool(["dpkg-deb", "-f", str(deb), "Version"], cache).strip()
    if got != version:
        say(f"note: {name} {got} unpacked; the queries were written on {version}")
    shutil.rmtree(cache / "root", ignore_errors=True)
    _run_tool(["dpkg", "-x", str(deb), str(cache / "root")], cache)
    if not tree.is_dir():
        raise BenchmarkError(f"{deb.name} holds no {qf.header.get('root')}/")
    marker.write_text(json.dumps({"package": name, "version": got}))
    return tree, got


def _download(name: str, version: str, cache: Path, say: Progress) -> Path:
    """The .deb of ``name`` at ``version`` or, when the archive no longer has that one,
    its current version (the answers are checked against the tree either way)."""
    say(f"apt-get download {name}={version} (into {cache})")
    try:
        _run_tool(["apt-get", "download", f"{name}={version}"], cache)
    except BenchmarkError as pinned:
        say(f"{pinned}; trying the archive's current {name}")
        try:
            _run_tool(["apt-get", "download", name], cache)
        except BenchmarkError as e:
            raise BenchmarkError(
                f"{e} (is Debian's archive reachable? `apt-get update` first)"
            ) from e
    debs = sorted(cache.glob(f"{name}_*.deb"))
    if not debs:
        raise BenchmarkError(f"`apt-get download {name}` left no {name}_*.deb in {cache}")
    return debs[-1]


def _run_tool(args: list[str], cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchmarkError(f"`{' '.join(args)}` failed (exit {done.returncode}): {last}")
    return done.stdout


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a request log line per page would bury the crawl's progress


@contextmanager
def served(tree: Path) -> Iterator[str]:
    """``tree`` served by a plain static HTTP server on loopback; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(tree))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="corpus-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- crawl, index, rank ----------------------------------------------------------
def corpus_config(cfg: Config, name: str, bench: str = "corpora") -> Config:
    """A job and a fresh SQLite store (with its WARC files) of the benchmark's own, under
    ``$SRCRAWL_HOME/bench/BENCH/runs/NAME``."""
    directory = cfg.home / "bench" / bench / "runs" / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return Config(
        redis_url=cfg.resolved_redis_url(),
        db=DatabaseURL(kind="sqlite", path=str(directory / "pages.db")),
        job=f"bench-{bench}-{time.time_ns()}",
        home=cfg.home,
        warc_dir=directory / "warc",
    )


ANY_CLI = (
    "import importlib.util as u; "
    "m = __import__('srcrawl.app.cli' if u.find_spec('srcrawl.app') else 'srcrawl.cli', "
    "fromlist=['main']); m.main()"
)
"""``srcrawl`` of whichever code the PYTHONPATH names (older codes: ``srcrawl.cli``)."""


def _step(
    jcfg: Config, args: list[str], say: Progress, code: CodeJob | None = None
) -> tuple[float, str]:
    """``srcrawl ARGS`` as its own process (of ``code``, when given), its progress on this
    one's stderr; (seconds, its stdout)."""
    say(f"$ srcrawl {' '.join(args)}" + (f"  ({code.code.label} code)" if code else ""))
    env = jcfg.child_env()
    cwd = None
    if code is not None:
        env.update(PYTHONPATH=str(code.code.root), SRCRAWL_INDEX_DIR=str(code.index_dir))
        # `python -c` puts its working directory first on the path: started in another
        # checkout (this one's), it would import that code instead of ``code``'s
        cwd = code.db.parent
    t0 = time.monotonic()
    proc = popen_child(
        [sys.executable, "-c", ANY_CLI, *args],
        env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    try:
        out, _ = proc.communicate()
    finally:
        stop_children([proc])  # interrupted: the step stops, and its own children
    if proc.returncode != 0:
        raise BenchmarkError(f"`srcrawl {args[0]}` failed (exit {proc.returncode}); see above")
    return time.monotonic() - t0, out


def crawl_index_rank(
    jcfg: Config, seed: str, slaves: int, say: Progress, code: CodeJob | None = None
) -> dict[str, float]:
    """Seconds of the crawl from ``seed``, the index and the PageRank of its pages (by
    ``code``, when given)."""
    n = str(slaves)
    crawl, _ = _step(
        jcfg,
        [
            "crawl",
            seed,
            "--depth",
            str(BENCH_CORPUS_DEPTH),
            "--slaves",
            n,
            "--delay",
            "0",
            "--delay-factor",
            "0",
        ],
        say,
        code,
    )
    index, _ = _step(jcfg, ["index", "--slaves", n], say, code)
    rank, _ = _step(jcfg, ["pagerank", "--slaves", n], say, code)
    return {"crawl_s": crawl, "index_s": index, "rank_s": rank}


# -- searching -------------------------------------------------------------------
def srcrawl_search(jcfg: Config) -> Callable[[str, int], list[list[str]]]:
    """srcrawl's in-process search of the job's index: query, top → each hit's URL followed
    by those of the duplicates and near-duplicates it stands for (no hits for a query it
    refuses), as `srcrawl search` answers. The one place the benchmark calls the search
    engine."""
    from srcrawl.indexer.search import QueryError, Searcher

    searcher = Searcher(jcfg.store(), jcfg.index_path)

    def search(query: str, top: int) -> list[list[str]]:
        try:
            return [[h.url, *h.similar_urls] for h in searcher.search(query, top=top).hits]
        except QueryError:
            return []

    return search


def stored_documents(store: Store, progress: Progress) -> list[tuple[str, str]]:
    """(url, title + text) of every stored page srcrawl indexes (fetched without error,
    body whole or capped, not gone), its text read as the index reads it."""
    fps = [
        p.fp
        for p in store.iter_pages()
        if p.error is None
        and p.body_state in ("complete", "capped")
        and p.status not in (404, 410)
        and not 300 <= p.status < 400
    ]
    docs = []
    for i in range(0, len(fps), 500):
        for _fp, _at, url, title, text in store.index_documents(fps[i : i + 500]):
            docs.append((url, f"{title}\n{text}"))
        progress(f"reading the stored pages: {len(docs)}/{len(fps)}")
    return sorted(docs)


# -- the evaluation --------------------------------------------------------------
@dataclass
class Outcome:
    """One query's top-10 corpus paths from srcrawl and from BM25, and the answer's rank.

    A srcrawl hit that stands for duplicates or near-duplicates of its page (the engine's
    own test: the same body tokens, or simhashes a few bits apart) finds the answer when
    one of them is the answer: the engine showed that page as this hit ("n similar
    pages") instead of repeating it. BM25 lists every copy as a hit of its own (each
    copy takes a place of the ten).
    """

    query: str
    answers: tuple[str, ...]
    srcrawl: list[str]
    bm25: list[str]
    srcrawl_similar: list[list[str]] = field(default_factory=list)  # per hit, its copies

    @property
    def srcrawl_rank(self) -> int | None:
        for rank, (path, similar) in enumerate(self._with_similar(), 1):
            if path in self.answers or any(p in self.answers for p in similar):
                return rank
        return None

    def _with_similar(self) -> Iterator[tuple[str, list[str]]]:
        for i, path in enumerate(self.srcrawl):
            yield path, self.srcrawl_similar[i] if i < len(self.srcrawl_similar) else []

    @property
    def bm25_rank(self) -> int | None:
        return rank_of_answer(self.answers, self.bm25)

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "answers": list(self.answers),
            "srcrawl_rank": self.srcrawl_rank,
            "bm25_rank": self.bm25_rank,
            "srcrawl": self.srcrawl,
            "srcrawl_similar": self.srcrawl_similar,
            "bm25": self.bm25,
        }


@dataclass
class CorpusResult:
    name: str
    source: str  # "package version" or the directory served
    pages: int  # stored by the crawl
    documents: int  # indexable among them
    seconds: dict[str, float]
    outcomes: list[Outcome] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)  # srcrawl, per query
    unindexed: list[str] = field(default_factory=list)  # answers the crawl did not index
    cpu: SearchCpu | None = None  # with --rounds: the search's CPU beside Tantivy's
    base_ranks: list[int | None] | None = None  # with --base: that code's answer ranks
    instructions: SearchInstructions | None = None  # with --instructions

    def scores(self, system: str) -> Scores:
        return Scores([getattr(o, f"{system}_rank") for o in self.outcomes])

    def figures(self, system: str) -> dict[str, float]:
        sc = self.scores(system)
        return {"success@1": sc.success(1), "success@3": sc.success(3), "mrr@10": sc.mrr}

    def render(self) -> str:
        s = self.seconds
        lines = [
            f"corpus {self.name} ({self.source}): {len(self.outcomes)} queries, "
            f"{self.pages:,} pages stored, {self.documents:,} indexed",
            f"  crawl {s['crawl_s']:.1f} s, index {s['index_s']:.1f} s, pagerank "
            f"{s['rank_s']:.1f} s, BM25 built in {s['bm25_build_s']:.1f} s; srcrawl search "
            f"p50 {statistics.median(self.search_ms):.1f} ms, all queries "
            f"{sum(self.search_ms) / 1000:.2f} s",
            f"  {'':<9}{'success@1':>10}{'success@3':>11}{'MRR@10':>8}",
        ]
        for system in SYSTEMS:
            sc = self.scores(system)
            lines.append(f"  {system:<9}{sc.success(1):>10.3f}{sc.success(3):>11.3f}{sc.mrr:>8.3f}")
        if self.base_ranks is not None and self.cpu is not None and self.cpu.base is not None:
            sc = Scores(self.base_ranks)
            label = self.cpu.base.label
            lines.append(f"  {label:<9}{sc.success(1):>10.3f}{sc.success(3):>11.3f}{sc.mrr:>8.3f}")
        if self.cpu is not None:
            lines.append(self.cpu.render())
        if self.instructions is not None:
            lines.append(self.instructions.render())
        if self.unindexed:
            lines.append(
                f"  answers not indexed ({len(self.unindexed)}): " + ", ".join(self.unindexed)
            )
        misses = [o for o in self.outcomes if o.srcrawl_rank != 1]
        lines.append(
            f"  srcrawl's answer not first ({len(misses)}): rank srcrawl/BM25, srcrawl's top 3"
        )
        for o in misses:
            ranks = "/".join(str(r or "-") for r in (o.srcrawl_rank, o.bm25_rank))
            lines.append(f"    {o.query!r} -> {' | '.join(o.answers)}  [{ranks}]")
            lines.append(f"      {', '.join(o.srcrawl[:3]) or '(no hits)'}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "corpus": self.name,
            "source": self.source,
            "pages": self.pages,
            "documents": self.documents,
            "seconds": self.seconds,
            "queries": len(self.outcomes),
            "search_p50_ms": statistics.median(self.search_ms),
            "search_total_s": sum(self.search_ms) / 1000,
            "unindexed_answers": self.unindexed,
            **{s: self.figures(s) for s in SYSTEMS},
            **({"search_cpu": self.cpu.as_json()} if self.cpu is not None else {}),
            **(
                {"search_instructions": self.instructions.as_json()}
                if self.instructions is not None
                else {}
            ),
            **({"base": _figures(Scores(self.base_ranks))} if self.base_ranks is not None else {}),
            "outcomes": [o.as_json() for o in self.outcomes],
        }


@dataclass
class Overall:
    """Several corpora's figures together, two ways: every query pooled (a corpus weighs
    as many queries as it has), and the mean of the corpora's own figures (each corpus
    weighs one, so a large corpus does not hide a weak one)."""

    results: list[CorpusResult]

    def pooled(self, system: str) -> dict[str, float]:
        sc = Scores([getattr(o, f"{system}_rank") for r in self.results for o in r.outcomes])
        return {"success@1": sc.success(1), "success@3": sc.success(3), "mrr@10": sc.mrr}

    def mean(self, system: str) -> dict[str, float]:
        figures = [r.figures(system) for r in self.results]
        return {k: statistics.fmean(f[k] for f in figures) for k in figures[0]}

    def render(self) -> str:
        queries = sum(len(r.outcomes) for r in self.results)
        lines = [
            f"all {len(self.results)} corpora ({queries} queries)",
            f"  {'':<9}{'':<18}{'success@1':>10}{'success@3':>11}{'MRR@10':>8}",
        ]
        for label, of in (("pooled queries", self.pooled), ("mean of corpora", self.mean)):
            for system in SYSTEMS:
                f = of(system)
                lines.append(
                    f"  {system:<9}{label:<18}{f['success@1']:>10.3f}{f['success@3']:>11.3f}"
                    f"{f['mrr@10']:>8.3f}"
                )
        lines.append(f"  {'corpus':<22}{'queries':>8}  srcrawl s@1/s@3/MRR   BM25 s@1/s@3/MRR")
        for r in self.results:
            mine, base = (r.figures(s) for s in SYSTEMS)
            lines.append(
                f"  {r.name:<22}{len(r.outcomes):>8}  "
                + "  ".join("/".join(f"{v:.3f}" for v in f.values()) for f in (mine, base))
            )
        return "\n".join(lines + self._cpu_lines())

    def _cpu_lines(self) -> list[str]:
        """Each corpus's search CPU (ms p50/p95) by each code and by Tantivy alone."""
        timed = [r.cpu for r in self.results if r.cpu is not None]
        if not timed:
            return []
        codes = [c.label for c in timed[0].codes()]
        lines = [f"  {'search CPU ms p50/p95':<30}" + "".join(f"{c:>16}" for c in codes)]
        for r in self.results:
            if r.cpu is not None:
                cells = [c.figures() for c in r.cpu.codes()]
                lines.append(
                    f"  {r.name:<30}"
                    + "".join(f"{f['p50_ms']:>9.2f}/{f['p95_ms']:<6.2f}" for f in cells)
                )
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "corpora": [r.name for r in self.results],
            "queries": sum(len(r.outcomes) for r in self.results),
            "pooled": {s: self.pooled(s) for s in SYSTEMS},
            "mean_of_corpora": {s: self.mean(s) for s in SYSTEMS},
        }


def _figures(sc: Scores) -> dict[str, float]:
    return {"success@1": sc.success(1), "success@3": sc.success(3), "mrr@10": sc.mrr}


def _ranks(qf: QueryFile, answers: list[list[list[str]]]) -> list[int | None]:
    """Each query's answer rank among hits given as [url, *urls of its copies] (as
    :attr:`Outcome.srcrawl_rank` counts it)."""
    from srcrawl.benchmarks.known_queries import corpus_path

    ranks: list[int | None] = []
    for q, hits in zip(qf.queries, answers, strict=True):
        found = (
            i for i, urls in enumerate(hits, 1) if any(corpus_path(u) in q.answers for u in urls)
        )
        ranks.append(next(found, None))
    return ranks


def evaluate(result: CorpusResult, jcfg: Config, qf: QueryFile, progress: Progress) -> None:
    """Every query of ``qf`` through srcrawl's search and through BM25 over the same pages."""
    from srcrawl.benchmarks.known_queries import corpus_path
    from srcrawl.indexer.tokenizer import get_tokenizer, user_dict_from_env

    search = srcrawl_search(jcfg)
    tok = get_tokenizer(user_dict_from_env())
    t0 = time.monotonic()
    docs = stored_documents(jcfg.store(), progress)
    token_lists = []
    for i, (_url, text) in enumerate(docs, 1):
        token_lists.append(tok.tokens(text))
        if i % 100 == 0 or i == len(docs):
            progress(f"BM25: tokenized {i}/{len(docs)} pages")
    bm25 = BM25(token_lists)
    result.documents = len(docs)
    indexed = {corpus_path(url) for url, _text in docs}
    result.unindexed = sorted({a for q in qf.queries for a in q.answers} - indexed)
    result.seconds["bm25_build_s"] = time.monotonic() - t0
    for q in qf.queries:
        t1 = time.perf_counter()
        hits = search(q.query, TOP)
        result.search_ms.append((time.perf_counter() - t1) * 1000)
        best = [docs[i][0] for i in bm25.top(tok.tokens(q.query), TOP)]
        paths = [[corpus_path(u) for u in hit] for hit in hits]
        result.outcomes.append(
            Outcome(
                q.query,
                q.answers,
                [p[0] for p in paths],
                [corpus_path(u) for u in best],
                [p[1:] for p in paths],
            )
        )


def _time_searches(
    result: CorpusResult, jcfg: Config, qf: QueryFile, base: CodeJob | None, rounds: int
) -> None:
    assert jcfg.warc_dir is not None  # corpus_config names it
    this = CodeJob(this_code(), Path(jcfg.db.path), jcfg.index_path, jcfg.warc_dir)
    queries = [q.query for q in qf.queries]
    result.cpu = time_searches(queries, this, base, rounds, Path(jcfg.db.path).parent)
    if result.cpu.base is not None:
        result.base_ranks = _ranks(qf, result.cpu.base.urls)


def run_corpus(
    cfg: Config,
    qf: QueryFile,
    *,
    tree: Path | None,
    slaves: int,
    say: Progress,
    progress: Progress | None = None,
    rounds: int = 0,
    base: Code | None = None,
    instructions: bool = False,
) -> CorpusResult:
    """Crawl, index and rank the corpus of ``qf`` (its package's tree, or ``tree``), then
    score its queries with srcrawl and with BM25; ``say`` tells the steps, ``progress``
    (default ``say``) counts within one. With ``rounds``, the search's CPU beside Tantivy
    alone's over that many passes (and beside ``base``'s, a code that crawls, indexes
    and ranks the corpus on its own, and whose answers are scored too); with
    ``instructions``, a search's instructions by each (benchmarks/search_instructions.py)."""
    if tree is None:
        tree, version = unpacked_package(cfg, qf, say)
        source = f"{qf.package[0]} {version}" if qf.package else str(tree)
    else:
        source = str(tree)
    check_answers(qf, tree)
    jcfg = corpus_config(cfg, qf.name)
    bcfg = corpus_config(cfg, qf.name, "corpora-base") if base is not None else None
    old = None
    if base is not None and bcfg is not None and bcfg.warc_dir is not None:
        old = CodeJob(base, Path(bcfg.db.path), bcfg.index_path, bcfg.warc_dir)
    try:
        with served(tree) as url:
            say(f"corpus {qf.name}: {tree} served at {url}")
            seconds = crawl_index_rank(jcfg, url + qf.seed, slaves, say)
            if old is not None and bcfg is not None:
                crawl_index_rank(bcfg, url + qf.seed, slaves, say, old)
        result = CorpusResult(qf.name, source, jcfg.store().count("pages"), 0, seconds)
        evaluate(result, jcfg, qf, progress or say)
        if rounds:
            say(f"corpus {qf.name}: {rounds} timed passes over its queries")
            _time_searches(result, jcfg, qf, old, rounds)
        if instructions:
            say(f"corpus {qf.name}: one pass of each code counted by callgrind")
            assert jcfg.warc_dir is not None  # corpus_config names it
            this = CodeJob(this_code(), Path(jcfg.db.path), jcfg.index_path, jcfg.warc_dir)
            queries = [q.query for q in qf.queries]
            result.instructions = count_instructions(queries, this, old, this.db.parent)
    finally:
        for c in (jcfg, bcfg):
            if c is not None:
                _drop_job_keys(c)
                c.close()
    return result
