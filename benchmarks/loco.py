"""`srcrawl bench loco`: each ranking weight chosen on other corpora, judged on the one left out.

For each signal of the ranking that is chosen at query time (a field of
:class:`RankWeights`), a small grid of values; each value's known-item
queries are answered on every real corpus of ``bench search --corpus``
(:mod:`real_corpora`), its other weights the defaults. Then, for each corpus
left out, the value with the best mean MRR@10 over the other corpora (ties:
the default) is the one chosen, and its MRR@10 and success@3 on the corpus
left out are set beside the default's and the signal's off (0). A signal
helps if, on most corpora left out, the value chosen without them does
better than the signal off; a default should change if, on most corpora left
out, the value chosen does better than it.

Each corpus is crawled, indexed and ranked once (under
``$SRCRAWL_HOME/bench/loco/runs/NAME``, kept across runs); each value's ranks
of the answers are kept in ``$SRCRAWL_HOME/bench/loco/NAME.json`` as they
are measured, so a run that stops goes on where it was.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from srcrawl.benchmarks.index import _drop_job_keys
from srcrawl.benchmarks.known_queries import QueryFile, check_answers, corpus_path
from srcrawl.benchmarks.ranking import Scores
from srcrawl.benchmarks.real_corpora import (
    TOP,
    corpus_config,
    crawl_index_rank,
    served,
    unpacked_package,
)
from srcrawl.indexer.search.weights import DEFAULT_WEIGHTS, RankWeights
from srcrawl.settings.config import Config

Progress = Callable[[str], None]

GRID: dict[str, tuple[float, ...]] = {
    "title": (0.0, 1.0, 3.0, 6.0),
    "anchor": (0.0, 1.0, 2.0, 4.0),
    "boiler": (0.0, 0.2, 0.5, 1.0),
    "ident": (0.0, 1.0, 4.0, 8.0),
    "rank": (0.0, 0.1, 0.2, 0.5),
    "some_words": (0.0, 0.25, 0.5),
    "hub": (0.0, 0.2, 0.4, 0.6),
    "near": (0.0, 0.5, 1.0, 2.0),
    "meaning": (0.0, 0.05, 0.1, 0.25, 0.5),
    "tie": (0.0, 0.1, 0.3, 0.6, 1.0),
    "shared_idf": (0.0, 0.25, 0.5, 1.0),
}
"""Each signal's values tried (0: the signal off; the default among them). The body's
weight is what the others are weighed against, so it is not varied."""
OFF = 0.0
TIE = 1e-9  # mean MRRs closer than this are a tie


@dataclass(frozen=True)
class Figures:
    """One value's figures on one corpus."""

    mrr: float  # MRR@10
    s3: float  # success@3


def figures_of(ranks: Sequence[int | None]) -> Figures:
    sc = Scores(list(ranks))
    return Figures(sc.mrr, sc.success(3))


# -- the choice ------------------------------------------------------------------
def choose(figures: Mapping[str, Mapping[float, Figures]], left_out: str, default: float) -> float:
    """The value with the best mean MRR@10 over every corpus but ``left_out`` (``figures``:
    corpus → value → figures); a tie is won by ``default``, then by the value first in
    the grid."""
    others = [c for c in figures if c != left_out]
    values = list(figures[others[0]])
    means = {v: statistics.fmean(figures[c][v].mrr for c in others) for v in values}
    best = max(means.values())
    tied = [v for v in values if means[v] >= best - TIE]
    return default if default in tied else tied[0]


@dataclass
class LeftOut:
    """One corpus left out of one signal's choice."""

    corpus: str
    chosen: float
    at_chosen: Figures
    at_default: Figures
    at_off: Figures


@dataclass
class SignalResult:
    """A signal's value chosen for each corpus left out, and what it did there."""

    signal: str
    default: float
    grid: tuple[float, ...]
    rows: list[LeftOut]
    means: dict[float, float]  # each value's mean MRR@10 over every corpus

    def helps(self) -> tuple[int, int, int]:
        """Corpora left out where the value chosen beats the signal off, ties, loses."""
        return _tally((r.at_chosen.mrr, r.at_off.mrr) for r in self.rows)

    def beats_default(self) -> tuple[int, int, int]:
        """Corpora left out where the value chosen beats the default, ties, loses."""
        return _tally((r.at_chosen.mrr, r.at_default.mrr) for r in self.rows)

    def default_helps(self) -> tuple[int, int, int]:
        """Corpora where the default beats the signal off, ties, loses."""
        return _tally((r.at_default.mrr, r.at_off.mrr) for r in self.rows)

    def verdict(self) -> str:
        """What the corpora left out say: another default, when the value chosen without
        them beats the default on most of them; else whether the signal helps, when the
        value chosen (or, chosen off, the default) beats it off on most of them."""
        n = len(self.rows)
        better, _same, _worse = self.beats_default()
        if better > n / 2:
            chosen = statistics.mode(r.chosen for r in self.rows)
            return f"change the default to {chosen:g}"
        won, _tied, lost = self.helps()
        if won > n / 2:
            return "helps"
        d_won, _d_tied, d_lost = self.default_helps()
        if d_won > n / 2:
            return "the default helps"
        if max(won, lost, d_won, d_lost) == 0:
            return "neutral"
        return f"does not help on most: better on {max(won, d_won)} of {n}"

    def as_json(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "default": self.default,
            "grid": list(self.grid),
            "helps": self.helps(),
            "beats_default": self.beats_default(),
            "default_helps": self.default_helps(),
            "verdict": self.verdict(),
            "mean_mrr": {f"{v:g}": m for v, m in self.means.items()},
            "left_out": [
                {
                    "corpus": r.corpus,
                    "chosen": r.chosen,
                    "chosen_figures": asdict(r.at_chosen),
                    "default_figures": asdict(r.at_default),
                    "off_figures": asdict(r.at_off),
                }
                for r in self.rows
            ],
        }


def _tally(pairs: Iterable[tuple[float, float]]) -> tuple[int, int, int]:
    better = same = worse = 0
    for a, b in pairs:
        if a > b + TIE:
            better += 1
        elif a < b - TIE:
            worse += 1
        else:
            same += 1
    return better, same, worse


def leave_one_out(
    signal: str, figures: Mapping[str, Mapping[float, Figures]], default: float
) -> SignalResult:
    """``signal``'s value chosen without each corpus in turn, judged on that corpus."""
    rows = []
    for corpus in figures:
        chosen = choose(figures, corpus, default)
        f = figures[corpus]
        rows.append(LeftOut(corpus, chosen, f[chosen], f[default], f[OFF]))
    grid = tuple(next(iter(figures.values())))
    means = {v: statistics.fmean(f[v].mrr for f in figures.values()) for v in grid}
    return SignalResult(signal, default, grid, rows, means)


def render(results: Sequence[SignalResult]) -> str:
    """Each signal's table: for each corpus left out, the value chosen and the MRR@10
    (success@3) there of it, of the default and of the signal off."""
    lines = []
    for s in results:
        won, tied, lost = s.helps()
        better, same, worse = s.beats_default()
        d_won, d_tied, d_lost = s.default_helps()
        lines += [
            f"{s.signal} (default {s.default:g}, grid {', '.join(f'{v:g}' for v in s.grid)}): "
            f"{s.verdict()}",
            f"  chosen vs off: better on {won}, same on {tied}, worse on {lost}; "
            f"chosen vs default: better on {better}, same on {same}, worse on {worse}; "
            f"default vs off: better on {d_won}, same on {d_tied}, worse on {d_lost}",
            "  mean MRR@10 over every corpus: "
            + ", ".join(f"{v:g}: {m:.4f}" for v, m in s.means.items()),
            f"  {'corpus left out':<22}{'chosen':>7}  MRR@10 (s@3): chosen / default / off",
        ]
        for r in s.rows:
            cells = " / ".join(
                f"{f.mrr:.3f} ({f.s3:.3f})" for f in (r.at_chosen, r.at_default, r.at_off)
            )
            lines.append(f"  {r.corpus:<22}{r.chosen:>7g}  {cells}")
    return "\n".join(lines)


# -- measuring -------------------------------------------------------------------
def weights_with(signal: str, value: float) -> RankWeights:
    return replace(DEFAULT_WEIGHTS, **{signal: value})


def _key(weights: RankWeights) -> str:
    """The cache key of ``weights``: its weights that are not 0 (a weight added later, off
    by default, leaves the keys measured before it as they were)."""
    return json.dumps({k: v for k, v in asdict(weights).items() if v}, sort_keys=True)


def loco_home(cfg: Config) -> Path:
    """Where the benchmark keeps its corpora's builds and answers."""
    return cfg.home / "bench" / "loco"


def built_corpus(cfg: Config, qf: QueryFile, slaves: int, say: Progress) -> Config:
    """The job of ``qf``'s corpus crawled, indexed and ranked, built on first use and
    kept (its store, WARC files and index) for the runs after."""
    assert qf.package is not None
    directory = loco_home(cfg) / "runs" / qf.name
    marker = directory / "built.json"
    if marker.is_file():
        built = json.loads(marker.read_text())
        jcfg = kept_job(cfg, directory, built["job"])
        if jcfg.index_path.is_dir():
            return jcfg
    tree, _version = unpacked_package(cfg, qf, say)
    check_answers(qf, tree)
    jcfg = corpus_config(cfg, qf.name, bench="loco")
    try:
        with served(tree) as base:
            say(f"corpus {qf.name}: {tree} served at {base}")
            crawl_index_rank(jcfg, base + qf.seed, slaves, say)
    finally:
        _drop_job_keys(jcfg)
    marker.write_text(json.dumps({"job": jcfg.job}))
    return jcfg


def kept_job(cfg: Config, directory: Path, job: str) -> Config:
    """The config of a job built before in ``directory`` (see :func:`corpus_config`)."""
    from srcrawl.sql.database_url import DatabaseURL

    return Config(
        redis_url=cfg.resolved_redis_url(),
        db=DatabaseURL(kind="sqlite", path=str(directory / "pages.db")),
        job=job,
        home=cfg.home,
        warc_dir=directory / "warc",
    )


def answer_ranks(jcfg: Config, qf: QueryFile, weights: RankWeights) -> list[int | None]:
    """The rank of each query's answer among srcrawl's top 10 with ``weights`` (a hit
    that stands for duplicates of the answer finds it, as in ``bench search --corpus``)."""
    from srcrawl.indexer.search import QueryError, Searcher

    searcher = Searcher(jcfg.store(), jcfg.index_path, weights=weights)
    ranks: list[int | None] = []
    for q in qf.queries:
        try:
            hits = searcher.search(q.query, top=TOP).hits
        except QueryError:
            hits = []
        rank = None
        for i, h in enumerate(hits, 1):
            if any(corpus_path(u) in q.answers for u in (h.url, *h.similar_urls)):
                rank = i
                break
        ranks.append(rank)
    return ranks


def corpus_figures(
    cfg: Config,
    qf: QueryFile,
    grid: Mapping[str, Sequence[float]],
    slaves: int,
    say: Progress,
) -> dict[str, dict[float, Figures]]:
    """signal → value → figures on ``qf``'s corpus; the ranks kept in the corpus's cache
    file as each value is measured (a cache of another build is dropped)."""
    jcfg = built_corpus(cfg, qf, slaves, say)
    cache_path = loco_home(cfg) / f"{qf.name}.json"
    cache: dict[str, Any] = {"job": jcfg.job, "ranks": {}}
    if cache_path.is_file():
        old = json.loads(cache_path.read_text())
        if old.get("job") == jcfg.job:
            cache = old
    out: dict[str, dict[float, Figures]] = {}
    try:
        for signal, values in grid.items():
            out[signal] = {}
            for value in values:
                weights = weights_with(signal, value)
                key = _key(weights)
                if key not in cache["ranks"]:
                    say(f"corpus {qf.name}: {signal}={value:g}")
                    cache["ranks"][key] = answer_ranks(jcfg, qf, weights)
                    cache_path.write_text(json.dumps(cache))
                out[signal][value] = figures_of(cache["ranks"][key])
    finally:
        jcfg.close()
    return out


def run_loco(
    cfg: Config,
    query_files: Sequence[QueryFile],
    *,
    grid: Mapping[str, Sequence[float]] = GRID,
    slaves: int,
    say: Progress,
) -> list[SignalResult]:
    """Every signal of ``grid`` chosen by leaving each corpus out in turn."""
    per_corpus = {qf.name: corpus_figures(cfg, qf, grid, slaves, say) for qf in query_files}
    results = []
    for signal in grid:
        figures = {c: per_corpus[c][signal] for c in per_corpus}
        results.append(leave_one_out(signal, figures, getattr(DEFAULT_WEIGHTS, signal)))
    return results
