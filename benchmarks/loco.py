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

import itertools
import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

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
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import open_store

Progress = Callable[[str], None]

GRID: dict[str, tuple[float, ...]] = {
    "title": (0.0, 1.0, 3.0, 6.0),
    "anchor": (0.0, 1.0, 2.0, 4.0),
    "boiler": (0.0, 0.2, 0.5, 1.0),
    "ident": (0.0, 1.0, 4.0, 8.0),
    "exact": (0.0, 0.25, 0.5, 0.75),
    "rank": (0.0, 0.1, 0.2, 0.5),
    "some_words": (0.0, 0.25, 0.5),
    "hub": (0.0, 0.2, 0.4, 0.6),
    "near": (0.0, 0.5, 1.0, 2.0),
    "meaning": (0.0, 0.25, 0.5, 0.75, 1.0),
    "tie": (0.0, 0.1, 0.3, 0.6, 1.0),
    "shared_idf": (0.0, 0.25, 0.5, 1.0),
}
"""Each signal's values tried (0: the signal off; the default among them). The body's
weight is what the others are weighed against, so it is not varied."""
OFF = 0.0
TIE = 1e-9  # mean MRRs closer than this are a tie

JOINT_GRID: dict[str, tuple[float, ...]] = {
    "title": (0.0, 1.0, 3.0),
    "anchor": (1.0, 2.0),
    "near": (0.0, 1.0),
    "shared_idf": (0.0, 0.5),
    "some_words": (0.25, 0.5),
}
"""The weights chosen together (``--joint``): those whose value chosen alone split the
corpora left out about evenly, as a change of one can hinge on another (a title weighed
less leaves more to the anchor text; words near each other tell more once a page short
of a word counts more). Every combination of their values is measured."""
LONG_GRID: dict[str, tuple[float, ...]] = {
    "long_title": (1.0, 0.5, 0.0),
    "long_anchor": (2.0, 1.0, 0.5, 0.0),
    "some_words_rise": (0.0, 1.0),
}
"""The weights of long queries (``--long``), chosen together: the title's and the anchor
text's in a query of LONG_QUERY_WORDS words or more (their first values those of shorter
queries: the same weights whatever the length), and the share of a page short of a word
rising with the query's words."""
BEFORE_LONG = replace(
    DEFAULT_WEIGHTS,
    long_title=DEFAULT_WEIGHTS.title,
    long_anchor=DEFAULT_WEIGHTS.anchor,
    some_words_rise=0.0,
)
"""The weights before long queries had their own (commit 03be885), the rest as now."""
BEFORE_JOINT = replace(
    BEFORE_LONG,
    title=3.0,
    anchor=2.0,
    long_title=3.0,
    long_anchor=2.0,
    near=0.0,
    shared_idf=0.0,
    some_words=0.25,
    exact=0.0,
    meaning=0.0,
)
"""The weights of the joint grid before they were chosen together (commit 820442b), when
neither a word as typed nor a query's meaning counted."""
KNOWN_WEB = "known-item-web"
"""The known-item test web (benchmarks/ranking.py), one more corpus of the joint choice:
pages named by their title, the words of the links to them (words also in the text of
the pages that link) and a menu label, the navigational queries of the open web that
the manuals' queries seldom are. Without it, the weights chosen on the manuals alone
find a page by the words that link to it for one query in six."""


@dataclass(frozen=True)
class Figures:
    """One value's figures on one corpus."""

    mrr: float  # MRR@10
    s3: float  # success@3


def figures_of(ranks: Sequence[int | None]) -> Figures:
    sc = Scores(list(ranks))
    return Figures(sc.mrr, sc.success(3))


# -- the choice ------------------------------------------------------------------
K = TypeVar("K", float, tuple)


def choose(figures: Mapping[str, Mapping[K, Figures]], left_out: str, default: K) -> K:
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


class RankCache:
    """The ranks of the answers of ``qf``'s corpus, by weights, kept in the corpus's cache
    file as they are measured (a cache of another build of the corpus is dropped)."""

    def __init__(self, cfg: Config, qf: QueryFile, slaves: int, say: Progress) -> None:
        self.qf, self.say = qf, say
        self.jcfg = built_corpus(cfg, qf, slaves, say)
        self.path = loco_home(cfg) / f"{qf.name}.json"
        self.cache: dict[str, Any] = {"job": self.jcfg.job, "ranks": {}}
        if self.path.is_file():
            old = json.loads(self.path.read_text())
            if old.get("job") == self.jcfg.job:
                self.cache = old

    def figures(self, weights: RankWeights, label: str) -> Figures:
        key = _key(weights)
        if key not in self.cache["ranks"]:
            self.say(f"corpus {self.qf.name}: {label}")
            self.cache["ranks"][key] = answer_ranks(self.jcfg, self.qf, weights)
            self.path.write_text(json.dumps(self.cache))
        return figures_of(self.cache["ranks"][key])

    def close(self) -> None:
        self.jcfg.close()


def corpus_figures(
    cfg: Config,
    qf: QueryFile,
    grid: Mapping[str, Sequence[float]],
    slaves: int,
    say: Progress,
) -> dict[str, dict[float, Figures]]:
    """signal → value → figures on ``qf``'s corpus (the ranks kept, :class:`RankCache`)."""
    ranks = RankCache(cfg, qf, slaves, say)
    try:
        return {
            signal: {v: ranks.figures(weights_with(signal, v), f"{signal}={v:g}") for v in values}
            for signal, values in grid.items()
        }
    finally:
        ranks.close()


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


# -- the weights chosen together -----------------------------------------------------
Setting = tuple[tuple[str, float], ...]
"""One combination of the joint grid's values: (signal, value) in the grid's order."""


@dataclass
class JointLeftOut:
    """One corpus left out of the joint choice."""

    corpus: str
    chosen: Setting
    at_chosen: Figures
    at_default: Figures


@dataclass
class JointResult:
    """The weights chosen together without each corpus in turn, judged on that corpus."""

    default: Setting
    rows: list[JointLeftOut]
    means: dict[Setting, float]  # each combination's mean MRR@10 over every corpus

    def beats_default(self) -> tuple[int, int, int]:
        return _tally((r.at_chosen.mrr, r.at_default.mrr) for r in self.rows)

    def verdict(self) -> str:
        better, _same, _worse = self.beats_default()
        if better > len(self.rows) / 2:
            chosen = statistics.mode(r.chosen for r in self.rows)
            return "change the defaults to " + _setting_text(chosen)
        return f"keep the defaults: the weights chosen are better on {better} of {len(self.rows)}"

    def as_json(self) -> dict[str, Any]:
        return {
            "default": dict(self.default),
            "beats_default": self.beats_default(),
            "verdict": self.verdict(),
            "left_out": [
                {
                    "corpus": r.corpus,
                    "chosen": dict(r.chosen),
                    "chosen_figures": asdict(r.at_chosen),
                    "default_figures": asdict(r.at_default),
                }
                for r in self.rows
            ],
            "best_means": [
                {"weights": dict(k), "mean_mrr": m}
                for k, m in sorted(self.means.items(), key=lambda kv: -kv[1])[:5]
            ],
        }


def _setting_text(setting: Setting) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in setting)


def settings_of(grid: Mapping[str, Sequence[float]]) -> list[Setting]:
    """Every combination of ``grid``'s values."""
    return [tuple(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def joint_leave_one_out(
    figures: Mapping[str, Mapping[Setting, Figures]], default: Setting
) -> JointResult:
    """The combination with the best mean MRR@10 without each corpus in turn (a tie: the
    default, then the first in the grid), judged on that corpus against the default."""
    rows = []
    for corpus in figures:
        chosen = choose(figures, corpus, default)
        f = figures[corpus]
        rows.append(JointLeftOut(corpus, chosen, f[chosen], f[default]))
    first = next(iter(figures.values()))
    means = {k: statistics.fmean(f[k].mrr for f in figures.values()) for k in first}
    return JointResult(default, rows, means)


def render_joint(result: JointResult) -> str:
    better, same, worse = result.beats_default()
    lines = [
        f"weights chosen together ({_setting_text(result.default)} by default): {result.verdict()}",
        f"  chosen vs default: better on {better}, same on {same}, worse on {worse}",
        "  best mean MRR@10 over every corpus: "
        + "; ".join(
            f"{_setting_text(k)}: {m:.4f}"
            for k, m in sorted(result.means.items(), key=lambda kv: -kv[1])[:3]
        )
        + f"; the defaults: {result.means[result.default]:.4f}",
        f"  {'corpus left out':<22}MRR@10 (s@3): chosen / default   chosen",
    ]
    for r in result.rows:
        cells = f"{r.at_chosen.mrr:.3f} ({r.at_chosen.s3:.3f}) / {r.at_default.mrr:.3f} "
        cells += f"({r.at_default.s3:.3f})"
        lines.append(f"  {r.corpus:<22}{cells}   {_setting_text(r.chosen)}")
    return "\n".join(lines)


def run_joint(
    cfg: Config,
    query_files: Sequence[QueryFile],
    *,
    grid: Mapping[str, Sequence[float]] = JOINT_GRID,
    slaves: int,
    say: Progress,
) -> JointResult:
    """The weights of ``grid`` chosen together by leaving each corpus out in turn."""
    default = tuple((k, float(getattr(DEFAULT_WEIGHTS, k))) for k in grid)
    settings = joint_settings(grid, default)
    corpora: list[QueryFile | str] = [*query_files, KNOWN_WEB]
    figures = {
        (c if isinstance(c, str) else c.name): _settings_figures(cfg, c, settings, slaves, say)
        for c in corpora
    }
    return joint_leave_one_out(figures, default)


def joint_settings(grid: Mapping[str, Sequence[float]], default: Setting) -> list[Setting]:
    """Every combination of ``grid``'s values, and the defaults when they are not one
    (long_title's 0.1, beside the grid's 0 it was chosen as): what they are judged
    against is measured too."""
    settings = settings_of(grid)
    return settings if default in settings else [*settings, default]


def _settings_figures(
    cfg: Config, qf: QueryFile | str, settings: Sequence[Setting], slaves: int, say: Progress
) -> dict[Setting, Figures]:
    """Each combination's figures on ``qf``'s corpus or the known-item test web (the ranks
    kept, :class:`RankCache`, :class:`KnownWebRanks`)."""
    ranks = KnownWebRanks(cfg, say) if isinstance(qf, str) else RankCache(cfg, qf, slaves, say)
    try:
        return {
            setting: ranks.figures(
                replace(DEFAULT_WEIGHTS, **dict(setting)), f"weights {i}/{len(settings)}"
            )
            for i, setting in enumerate(settings, 1)
        }
    finally:
        ranks.close()


class KnownWebRanks:
    """The ranks of the known-item test web's answers, by weights: its pages stored and
    indexed once (by this code's ``srcrawl index``) under the benchmark's home, the
    ranks kept in a cache file as they are measured."""

    def __init__(self, cfg: Config, say: Progress) -> None:
        from srcrawl.benchmarks.ranking import known_item_store
        from srcrawl.benchmarks.startup import _index_copy, index_dir_of, this_code

        directory = loco_home(cfg) / "runs" / KNOWN_WEB
        directory.mkdir(parents=True, exist_ok=True)
        pages_db, marker = directory / "known-2-60-1.db", directory / "built.json"
        self.db = pages_db.with_name("index-this.db")
        self.index = index_dir_of(self.db)
        self.path = loco_home(cfg) / f"{KNOWN_WEB}.json"
        if not marker.is_file() or not self.index.is_dir():
            say(f"storing and indexing the known-item test web in {directory}")
            self.path.unlink(missing_ok=True)  # ranks of another build
            items = known_item_store(pages_db, 2, 60, 1)
            _index_copy(cfg, this_code(), pages_db, say)
            marker.write_text(json.dumps([[q.query, q.url] for q in items]))
        self.queries = [(q, url) for q, url in json.loads(marker.read_text())]
        self.cache: dict[str, list[int | None]] = (
            json.loads(self.path.read_text()) if self.path.is_file() else {}
        )
        self.store = open_store(DatabaseURL(kind="sqlite", path=str(self.db)))
        self.say = say

    def figures(self, weights: RankWeights, label: str) -> Figures:
        from srcrawl.benchmarks.ranking import rank_of
        from srcrawl.indexer.search import Searcher

        key = _key(weights)
        if key not in self.cache:
            self.say(f"{KNOWN_WEB}: {label}")
            searcher = Searcher(self.store, self.index, weights=weights)
            self.cache[key] = [
                rank_of(url, [h.url for h in searcher.search(query, top=TOP).hits])
                for query, url in self.queries
            ]
            self.path.write_text(json.dumps(self.cache))
        return figures_of(self.cache[key])

    def close(self) -> None:
        self.store.close()
