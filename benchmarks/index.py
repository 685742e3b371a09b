"""``srcrawl bench index`` and ``srcrawl bench search``.

Both work on generated pages (:mod:`srcrawl.lab.corpus`) written through
the store's normal page path into a scratch SQLite file under
``$SRCRAWL_HOME/bench/`` (kept, so a later run on the same corpus reuses it),
and on a scratch job in the configured Redis (removed afterwards).

- index: raw jieba (``jieba.Tokenizer.lcut`` on each page's title and text,
  one process, dictionary loaded beforehand), srcrawl's tokenizer in one
  process (folding, runs, jieba, stop words, counting), then the whole index
  phase (master + N local slave processes, started and ready before the
  clock starts) from an empty index, for each N; with ``--rounds`` R, R
  times each in alternating order, each N's median run in the table.
- search: 100 (``--queries``) known-item queries of 1–3 terms drawn from
  random pages, timed one by one on one :class:`Searcher`, first with BM25
  alone, then with a PageRank table (random heavy-tailed scores) blended in;
  beside them, Tantivy alone on the same index and tokens (:func:`engine_alone`):
  what the engine itself takes for the plainest ranked form of each query; and
  Tantivy doing srcrawl's own search and making its own snippets
  (``SnippetGenerator`` on the stored text): the engine's time for the same work.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tantivy

from srcrawl.app.local import LocalSlaves
from srcrawl.benchmarks.scaling import Column, Row, ScalingResult, median_of_rounds, round_orders
from srcrawl.core.defaults import DEFAULT_HEARTBEAT_INTERVAL
from srcrawl.core.errors import SrcrawlError
from srcrawl.indexer.engine import IndexReader, schema, stem
from srcrawl.indexer.master import IndexMaster, IndexReport
from srcrawl.indexer.search import Searcher
from srcrawl.indexer.slave import document_text, tokenize_document
from srcrawl.indexer.tokenizer import Tokenizer, python_jieba
from srcrawl.lab.corpus import Corpus
from srcrawl.queues.workers import workers
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.sql.store import Store

Progress = Callable[[str], None]


class BenchmarkError(SrcrawlError):
    """The benchmark could not run (slaves did not start, …)."""


# -- the scratch corpus --------------------------------------------------------
def bench_config(cfg: Config, pages: int, seed: int) -> Config:
    """A scratch job and SQLite file for a corpus of ``pages`` pages, on ``cfg``'s Redis."""
    directory = cfg.home / "bench"
    directory.mkdir(parents=True, exist_ok=True)
    db = DatabaseURL(kind="sqlite", path=str(directory / f"index-{pages}-{seed}.db"))
    job = f"bench-index-{os.getpid()}-{time.time_ns() % 10**6}"
    return Config(
        redis_url=cfg.resolved_redis_url(),
        db=db,
        job=job,
        home=cfg.home,
        index_dir=directory / f"index-{pages}-{seed}.tantivy",
    )


def prepare_corpus(bcfg: Config, pages: int, seed: int, say: Progress) -> Store:
    """The scratch store holding exactly the corpus (generated unless already there)."""
    marker = Path(bcfg.db.path + ".ready")
    store = bcfg.store()
    if marker.exists() and store.count("pages") == pages:
        return store
    say(f"generating {pages:,} pages (seed {seed}) into {bcfg.db.path}")
    with store.transaction() as cur:
        for table in ("pages", "warc_files", "links", "ranks"):
            cur.execute(f"DELETE FROM {table}")
    store.reset_index()
    shutil.rmtree(bcfg.index_path, ignore_errors=True)
    corpus = Corpus(seed)
    t0 = time.perf_counter()
    store.put_pages(corpus.pages(pages))
    marker.write_text(json.dumps({"pages": pages, "seed": seed}))
    say(f"  {pages:,} pages written in {time.perf_counter() - t0:.1f} s")
    return store


def _texts(store: Store) -> list[tuple[int, float, str, str]]:
    out = []
    fps = [p.fp for p in store.iter_pages(batch=5000)]
    for i in range(0, len(fps), 2000):
        out.extend((fp, at, t, x) for fp, at, _u, t, x in store.index_documents(fps[i : i + 2000]))
    return out


def _drop_job_keys(bcfg: Config) -> None:
    client = bcfg.redis()
    doomed = list(client.scan_iter(match=f"{bcfg.keys.prefix}:*", count=1000))
    if doomed:
        client.delete(*doomed)


def _cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


@dataclass
class IndexRun:
    """One timed run of the index phase."""

    report: IndexReport
    master_cpu_s: float
    slave_cpu_s: float  # CPU time of the slaves' consumer threads inside the handler
    index_bytes: int = 0  # the index directory's files once Tantivy's merges ended

    def as_json(self) -> dict:
        pages = max(self.report.indexed, 1)
        return {
            "pages": self.report.indexed,
            "wall_s": round(self.report.wall_s, 2),
            "master_cpu_ms_per_page": round(1000 * self.master_cpu_s / pages, 3),
            "slave_cpu_ms_per_page": round(1000 * self.slave_cpu_s / pages, 3),
            "cpu_ms_per_page": round(1000 * (self.master_cpu_s + self.slave_cpu_s) / pages, 3),
            "index_bytes_per_page": round(self.index_bytes / pages, 1),
        }


def run_index(
    bcfg: Config,
    slaves: int,
    *,
    wait_ready: float = 120.0,
    progress: Callable[[IndexReport], None] | None = None,
) -> IndexRun:
    """Index the scratch store with ``slaves`` local slaves, timed once all are ready."""
    log_dir = bcfg.home / "bench" / "logs"
    client = bcfg.redis()
    with LocalSlaves(bcfg, slaves, ["index"], log_dir=log_dir) as local:
        deadline = time.monotonic() + wait_ready
        # a slave registers once its handler (and jieba's dictionary) is loaded
        while sum(w.alive for w in workers(client, bcfg.keys)) < slaves:
            if local.alive() < slaves:
                raise BenchmarkError(f"an index slave exited at start; see {log_dir}")
            if time.monotonic() > deadline:
                raise BenchmarkError(f"index slaves not ready after {wait_ready:.0f} s")
            time.sleep(0.1)
        master = IndexMaster.from_config(bcfg)
        cpu0 = _cpu_s()
        report = master.run(slaves=local, progress=progress, progress_interval=1.0)
        master_cpu = _cpu_s() - cpu0
        # the slaves' counters arrive with their next heartbeat
        slave_cpu = 0.0
        deadline = time.monotonic() + 3 * DEFAULT_HEARTBEAT_INTERVAL
        while time.monotonic() < deadline:
            stats = [w.stats for w in workers(client, bcfg.keys) if w.id.startswith("slave-")]
            if sum(st.get("index_pages", 0) for st in stats) >= report.indexed:
                slave_cpu = sum(st.get("index_cpu_s", 0.0) for st in stats)
                break
            time.sleep(0.2)
        return IndexRun(report, master_cpu, slave_cpu, IndexReader(bcfg.index_path).size_bytes())


def _timed(work: Callable[[], None]) -> tuple[float, float]:
    """Wall and CPU seconds of ``work`` (this process, one thread)."""
    w0, c0 = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - w0, time.process_time() - c0


# -- bench index ---------------------------------------------------------------
def run_index_benchmark(
    cfg: Config,
    *,
    pages: int,
    slaves: Sequence[int],
    seed: int = 1,
    rounds: int = 1,
    say: Progress = print,
    progress: Progress | None = None,
) -> ScalingResult:
    """Raw jieba, the tokenizer in one process, then the index phase per slave count.

    With ``rounds`` > 1 every slave count runs once a round (see
    :func:`~srcrawl.benchmarks.scaling.round_orders`) and its row is its median run.
    ``say`` gets the steps, ``progress`` the changing line of a running index phase.
    """
    if rounds < 1:
        raise ValueError("rounds must be positive")
    bcfg = bench_config(cfg, pages, seed)
    show = progress or (lambda text: None)
    try:
        store = prepare_corpus(bcfg, pages, seed, say)
        baseline = _OneProcess(store)
        say("raw jieba, one process …")
        baseline.raw_before = _timed(baseline.raw)
        say("srcrawl tokenizer, one process …")
        baseline.ours = _timed(baseline.tokenize)
        say("jieba-rs and Tantivy, one process …")
        baseline.with_tantivy = _timed(lambda: baseline.jieba_tantivy(bcfg.home / "bench"))
        rounds_run = [
            _index_round(bcfg, store, pages, order, r, rounds, say, show)
            for r, order in enumerate(round_orders(slaves, rounds))
        ]
        say("raw jieba again …")
        baseline.raw_after = _timed(baseline.raw)
    finally:
        _drop_job_keys(bcfg)
        bcfg.close()
    result = _index_table(pages, slaves, seed, rounds, baseline)
    _add_index_rows(result, pages, rounds, baseline, rounds_run)
    return result


class _OneProcess:
    """Raw jieba and srcrawl's tokenizer over the corpus in this process: the baseline."""

    def __init__(self, store: Store) -> None:
        jieba = python_jieba()
        self.docs = _texts(store)
        self.texts = [document_text(title, text) for _fp, _at, title, text in self.docs]
        self.megabytes = sum(len(t.encode()) for t in self.texts) / 1e6
        self.seg = jieba.Tokenizer()
        self.seg.initialize()
        self.tok = Tokenizer()
        self.tok.warm_up()
        # (wall, CPU) seconds of each timed pass
        self.raw_before = self.raw_after = self.ours = self.with_tantivy = (0.0, 0.0)

    def raw(self) -> None:
        lcut = self.seg.lcut
        for text in self.texts:
            lcut(text)

    def tokenize(self) -> None:
        tok = self.tok
        for fp, at, title, text in self.docs:
            tokenize_document(tok, fp, at, "", title, text)

    def jieba_tantivy(self, scratch: Path) -> None:
        """jieba's words of each page (title and text; jieba-rs, the jieba srcrawl's
        tokenizer runs) written by Tantivy into an index of srcrawl's schema (its analyzer,
        positions), committed and merged: what the index phase is judged against (the same
        segmenter and engine, nothing of srcrawl's)."""
        import rjieba

        from srcrawl.core.defaults import DEFAULT_INDEX_WRITER_HEAP
        from srcrawl.indexer.engine import open_index

        path = scratch / f"jieba-tantivy-{os.getpid()}"
        shutil.rmtree(path, ignore_errors=True)
        try:
            writer = open_index(path, create=True).writer(DEFAULT_INDEX_WRITER_HEAP)
            lcut = rjieba.cut
            for fp, _at, title, text in self.docs:
                words = lambda t: " ".join(w for w in lcut(t) if not w.isspace())  # noqa: E731
                writer.add_document(tantivy.Document(fp=fp, title=words(title), body=words(text)))
            writer.commit()
            writer.wait_merging_threads()
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def raw_rate(self, pages: int) -> float:
        """Raw jieba's pages/s, the mean of the runs before and after the index phase."""
        return pages / ((self.raw_before[0] + self.raw_after[0]) / 2)


def _index_round(
    bcfg: Config,
    store: Store,
    pages: int,
    order: list[int],
    r: int,
    rounds: int,
    say: Progress,
    show: Progress,
) -> dict[int, IndexRun]:
    """Round ``r``: the index phase once per slave count in ``order``, from an empty index."""
    runs: dict[int, IndexRun] = {}
    for n in order:
        store.reset_index()
        # from an empty index directory (bench search's figures of it go with it)
        shutil.rmtree(bcfg.index_path, ignore_errors=True)
        Path(str(bcfg.index_path) + ".json").unlink(missing_ok=True)
        step = f"round {r + 1}/{rounds}: " if rounds > 1 else ""
        say(f"{step}index phase with {n} slave(s) …")

        def line(rep: IndexReport, n: int = n, step: str = step) -> None:
            show(
                f"{step}{n} slave(s): indexed {rep.indexed:,}/{pages:,}, "
                f"{rep.pages_per_s:.1f} pages/s, {rep.wall_s:.0f} s"
            )

        run = run_index(bcfg, n, progress=line)
        if run.report.indexed != pages:
            raise BenchmarkError(f"{n} slave(s) indexed {run.report.indexed} of {pages} pages")
        runs[n] = run
    return runs


def _index_table(
    pages: int, slaves: Sequence[int], seed: int, rounds: int, baseline: _OneProcess
) -> ScalingResult:
    """The empty table of an index benchmark: its title, parameters and columns."""
    raw_rate = baseline.raw_rate(pages)
    mb = baseline.megabytes
    return ScalingResult(
        bench="index",
        title=f"index benchmark: {pages:,} pages, {mb:.1f} MB of text, {os.cpu_count()} cores",
        head=[
            f"  % raw: of raw jieba's pages/s ({raw_rate:.1f}, mean of the runs before and "
            "after); CPU ms/page of the index phase: the slaves' tokenizing threads"
        ],
        unit="pages",
        per="page",
        parameters={
            "pages": pages,
            "slaves": list(slaves),
            "seed": seed,
            "rounds": rounds,
            "megabytes": mb,
            "raw_jieba_pages_per_s": raw_rate,
        },
        columns=[
            Column("pct_raw", "% raw", ".0f"),
            Column("master_cpu_ms", "master CPU ms/page", ".2f"),
            Column("master_core", "master % of a core", ".0%"),
            Column("merges", "commits", "d"),
            Column("index_bytes_per_page", "index bytes/page", ".0f"),
            Column("vs_jieba_tantivy", "CPU × jieba-rs+Tantivy", ".2f"),
        ],
    )


def _add_index_rows(
    result: ScalingResult,
    pages: int,
    rounds: int,
    baseline: _OneProcess,
    rounds_run: list[dict[int, IndexRun]],
) -> None:
    """The one-process rows, then each slave count's median run, all against raw jieba."""
    for label, (wall, cpu) in (("before", baseline.raw_before), ("after", baseline.raw_after)):
        result.rows.append(
            Row(None, pages, wall, cpu, label=f"raw jieba.lcut, 1 process ({label})")
        )
    ours_s, ours_cpu = baseline.ours
    result.rows.append(Row(None, pages, ours_s, ours_cpu, label="srcrawl tokenizer, 1 process"))
    both_s, both_cpu = baseline.with_tantivy
    result.rows.append(Row(None, pages, both_s, both_cpu, label="jieba-rs + Tantivy, 1 process"))
    result.rows += median_of_rounds(
        [{n: _index_row(n, run, pages) for n, run in runs.items()} for runs in rounds_run]
    )
    if rounds > 1:
        result.columns.append(Column("speedups", "speedup per round"))
        result.head.append(
            f"  {rounds} rounds, the order of slave counts reversed every other round; each "
            "count's row is its run of median pages/s, its speedup that of the median runs"
        )
    raw_rate = baseline.raw_rate(pages)
    for row in result.rows:
        row.extra["pct_raw"] = 100 * row.throughput / raw_rate if raw_rate else None
        if row.slaves is not None and both_cpu:  # the index phase's CPU, master included
            cpu = (row.cpu_s or 0.0) + row.extra["master_cpu_ms"] * pages / 1000
            row.extra["vs_jieba_tantivy"] = cpu / both_cpu


def _index_row(slaves: int, run: IndexRun, pages: int) -> Row:
    r = run.report
    return Row(
        slaves,
        r.indexed,
        r.wall_s,
        run.slave_cpu_s or None,
        extra={
            "master_cpu_ms": 1000 * run.master_cpu_s / pages,
            "master_core": run.master_cpu_s / r.wall_s if r.wall_s else None,
            "merges": r.merges,
            "merge_share": r.merge_s / r.wall_s if r.wall_s else None,
            "index_bytes_per_page": run.index_bytes / r.indexed if r.indexed else None,
        },
    )


# -- bench search --------------------------------------------------------------
def build_index_once(bcfg: Config, pages: int, seed: int, slaves: int, say: Progress) -> dict:
    """The corpus indexed in the scratch store and index directory (both kept for later
    runs); the figures of the run that built it (kept beside it)."""
    store = prepare_corpus(bcfg, pages, seed, say)
    figures = Path(str(bcfg.index_path) + ".json")
    built = (
        figures.exists()
        and store.indexed_pages() == pages
        and not store.unindexed_pages(None, 1)
        and IndexReader(bcfg.index_path).num_docs() == pages
    )
    if built:
        return {**json.loads(figures.read_text()), "reused": True}
    say(f"indexing {pages:,} pages with {slaves} slave(s) …")
    store.reset_index()
    shutil.rmtree(bcfg.index_path, ignore_errors=True)
    run = run_index(bcfg, slaves)
    figures.write_text(json.dumps(run.as_json()))
    return {**run.as_json(), "reused": False}


@dataclass
class LatencySet:
    label: str
    ms: list[float]
    cpu_ms: list[float]  # this thread's CPU time a query: what other load changes less
    modes: dict[str, int]
    found_at_1: int
    found_in_top: int

    def quantile(self, q: int, cpu: bool = False) -> float:
        values = self.cpu_ms if cpu else self.ms
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1]

    def line(self) -> str:
        n = len(self.ms)
        modes = ", ".join(f"{k} {v}" for k, v in sorted(self.modes.items()))
        return (
            f"  {self.label:16} p50 {self.quantile(50):6.2f} ms  p95 {self.quantile(95):6.2f} ms  "
            f"max {max(self.ms):6.1f} ms  (CPU p50 {self.quantile(50, True):5.2f} ms "
            f"p95 {self.quantile(95, True):5.2f} ms)  | {modes}; "
            f"source page 1st {self.found_at_1}/{n}, top 10 {self.found_in_top}/{n}"
        )


@dataclass
class SearchBenchmark:
    pages: int
    queries: int
    build: dict
    sets: list[LatencySet] = field(default_factory=list)

    def render(self) -> str:
        b = self.build
        when = "an earlier run" if b.get("reused") else "this run"
        head = [
            f"search benchmark: {self.queries} queries on {self.pages:,} indexed pages",
            f"  index (built by {when} in {b['wall_s']:.0f} s): "
            f"{b['index_bytes_per_page']:,.0f} bytes/page with positions; build CPU "
            f"{b['cpu_ms_per_page']:.2f} ms/page (slaves {b['slave_cpu_ms_per_page']:.2f}, "
            f"master {b['master_cpu_ms_per_page']:.2f})",
        ]
        return "\n".join([*head, *(s.line() for s in self.sets)])


def make_queries(store: Store, tok: Tokenizer, n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` (query, page it was drawn from): 1–3 distinct terms of a random page."""
    rng = random.Random(f"queries-{seed}")
    fps = [p.fp for p in store.iter_pages(batch=5000)]
    out: list[tuple[str, int]] = []
    while len(out) < n:
        fp = rng.choice(fps)
        [(_fp, _at, _url, title, text)] = store.index_documents([fp])
        tokens = tok.tokens(document_text(title, text))
        distinct = list(dict.fromkeys(tokens))
        if not distinct:
            continue
        k = min(len(distinct), rng.choice((1, 2, 2, 3)))
        out.append((" ".join(rng.sample(distinct, k)), fp))
    return out


def engine_alone(tokens: list[str]) -> tantivy.Query:
    """The plainest ranked form of a query in Tantivy: every token required, in the title
    or the body, BM25 summed; no field weights, lone characters, second tier, prior,
    duplicates or pages read. What the engine takes for it bounds what srcrawl can."""
    s, must, should = schema(), tantivy.Occur.Must, tantivy.Occur.Should
    Query = tantivy.Query

    def word(t: str) -> tantivy.Query:  # (frequencies only: BM25 reads no positions)
        fields = [(should, Query.term_query(s, f, stem(t), "freq")) for f in _PLAIN]
        return Query.boolean_query(fields)

    return Query.boolean_query([(must, word(t)) for t in dict.fromkeys(tokens)])


_PLAIN = ("title", "body")


def _time_engine_alone(
    reader: IndexReader, tok: Tokenizer, queries: list[tuple[str, int]]
) -> LatencySet:
    ms, cpu, found, first, top = [], [], 0, 0, 0
    searcher = reader.searcher()  # one, taken once: no reader's reload inside a timing
    for query, fp in queries:
        tokens = tok.tokens(query)
        t0, c0 = time.perf_counter(), time.thread_time()
        hits = searcher.search(engine_alone(tokens), 10, count=False).hits
        ms.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
        fps = searcher.fast_field_values("fp", [a for _s, a in hits])
        found += bool(fps)
        first += bool(fps) and fps[0] == fp
        top += fp in fps
    return LatencySet("Tantivy alone", ms, cpu, {"and": found}, first, top)


def _time_same_search(index_dir: Path, queries: list[tuple[str, int]]) -> LatencySet:
    """Tantivy doing srcrawl's search (its every-word query, built before timing) and
    making its own snippets (benchmarks/search_cpu.py): the goal's measure of the engine,
    beside which srcrawl's search is judged."""
    from srcrawl.benchmarks.search_cpu import TantivyAlone

    alone = TantivyAlone(index_dir)
    ms, cpu, found, first, top = [], [], 0, 0, 0
    for text, fp in queries:
        query = alone.query(text)
        t0, c0 = time.perf_counter(), time.thread_time()
        hits = alone.search(query)
        ms.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
        fps = alone.searcher.fast_field_values("fp", [a for _s, a in hits])
        found += bool(fps)
        first += bool(fps) and fps[0] == fp
        top += fp in fps
    return LatencySet("Tantivy, its snippets", ms, cpu, {"and": found}, first, top)


def _time_queries(label: str, searcher: Searcher, queries: list[tuple[str, int]]) -> LatencySet:
    ms, cpu, modes, first, top = [], [], {}, 0, 0
    for query, fp in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        result = searcher.search(query, top=10)
        ms.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
        modes[result.mode] = modes.get(result.mode, 0) + 1
        fps = [h.fp for h in result.hits]
        first += bool(fps) and fps[0] == fp
        top += fp in fps
    return LatencySet(label, ms, cpu, modes, first, top)


def run_search_benchmark(
    cfg: Config,
    *,
    pages: int,
    queries: int = 100,
    slaves: int = 2,
    seed: int = 1,
    say: Progress = print,
) -> SearchBenchmark:
    bcfg = bench_config(cfg, pages, seed)
    try:
        build = build_index_once(bcfg, pages, seed, slaves, say)
        store = bcfg.store()
        tok = Tokenizer()
        tok.warm_up()
        qs = make_queries(store, tok, queries, seed)
        result = SearchBenchmark(pages, queries, build)
        store.replace_ranks([])
        searcher = Searcher(store, bcfg.index_path, tokenizer=tok)
        _time_queries("warm-up", searcher, qs)  # the index's files into the page cache
        result.sets.append(_time_engine_alone(searcher.reader, tok, qs))
        result.sets.append(_time_same_search(bcfg.index_path, qs))
        result.sets.append(_time_queries("BM25", searcher, qs))
        rng = random.Random(f"ranks-{seed}")
        fps = [p.fp for p in store.iter_pages(batch=5000)]
        raw = [rng.paretovariate(1.2) for _ in fps]
        total = sum(raw)
        store.replace_ranks(zip(fps, (r / total for r in raw), strict=True))
        result.sets.append(_time_queries("BM25 + PageRank", searcher, qs))
        store.replace_ranks([])
        return result
    finally:
        _drop_job_keys(bcfg)
        bcfg.close()
