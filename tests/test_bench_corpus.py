"""`srcrawl bench search --corpus`: the plain BM25 baseline, the judging of answers, the
query files, and the whole harness (a real crawl, index and PageRank with Redis and
SQLite) on a small corpus written here."""

from __future__ import annotations

import json
import math
import shutil
import uuid
from pathlib import Path

import pytest

from srcrawl.benchmarks.bm25 import BM25
from srcrawl.benchmarks.index import BenchmarkError
from srcrawl.benchmarks.known_queries import (
    BUILTIN,
    builtin_query_file,
    check_answers,
    corpus_path,
    expand_corpora,
    rank_of_answer,
    read_query_file,
)
from srcrawl.benchmarks.real_corpora import CorpusResult, Outcome, Overall

from .conftest import cli_env, run_cli


def test_bm25_matches_a_hand_computed_case() -> None:
    # N = 3, lengths 2, 3, 1: avgdl 2; "a" and "c" each in 2 pages: idf = ln(1 + 1.5/2.5)
    bm25 = BM25([["a", "b"], ["a", "a", "c"], ["c"]])
    idf = math.log(1.6)
    assert bm25.idf("a") == pytest.approx(idf)
    assert bm25.idf("zzz") == pytest.approx(math.log(1 + 3.5 / 0.5))
    # page 0: tf 1, dl 2 → 1·2.2 / (1 + 1.2·(0.25 + 0.75·2/2)) = 2.2/2.2 = 1
    # page 1: tf 2, dl 3 → 2·2.2 / (2 + 1.2·(0.25 + 0.75·3/2)) = 4.4/3.65
    assert bm25.scores(["a"]).tolist() == pytest.approx([idf, idf * 4.4 / 3.65, 0.0])
    assert bm25.top(["a"], 10) == [1, 0]  # the page without the term is not a hit
    # "c": page 1 (tf 1, dl 3) 2.2/2.65; page 2 (tf 1, dl 1) 2.2/(1 + 1.2·0.625) = 2.2/1.75
    assert bm25.scores(["c", "zzz", "c"]).tolist() == pytest.approx(
        [0.0, idf * 2.2 / 2.65, idf * 2.2 / 1.75]
    )
    assert bm25.top(["c"], 1) == [2]
    assert BM25([["x"], ["x"]]).top(["x"], 10) == [0, 1]  # a tie: the lower index first


def test_answers_are_judged_by_their_path_and_scored() -> None:
    assert corpus_path("http://127.0.0.1:8000/") == "index.html"
    assert corpus_path("http://127.0.0.1:8000/ref/") == "ref/index.html"
    assert corpus_path("http://127.0.0.1:8000/a%20b.html?x=1#top") == "a b.html"
    urls = ["http://h/x.html", "http://h/ref/", "http://h/y.html"]
    assert rank_of_answer(("ref/index.html",), urls) == 2
    assert rank_of_answer(("y.html", "x.html"), urls) == 1  # either right answer counts
    assert rank_of_answer(("z.html",), urls) is None
    result = CorpusResult("c", "dir", pages=3, documents=3, seconds={})
    result.outcomes = [
        Outcome("q1", ("a",), srcrawl=["a", "b"], bm25=["b", "c", "a"]),
        Outcome("q2", ("b",), srcrawl=["c", "d", "e", "b"], bm25=["b"]),
        Outcome("q3", ("c",), srcrawl=[], bm25=["a", "b", "c"]),
    ]
    # a hit standing for a duplicate of the answer finds it at that hit's rank
    folded = Outcome("q4", ("c",), srcrawl=["a", "b"], bm25=[], srcrawl_similar=[[], ["c"]])
    assert folded.srcrawl_rank == 2 and folded.as_json()["srcrawl_similar"] == [[], ["c"]]
    assert Outcome("q5", ("c",), srcrawl=["a"], bm25=[]).srcrawl_rank is None
    assert result.figures("srcrawl") == pytest.approx(
        {"success@1": 1 / 3, "success@3": 1 / 3, "mrr@10": (1 + 1 / 4) / 3}
    )
    assert result.figures("bm25") == pytest.approx(
        {"success@1": 1 / 3, "success@3": 1.0, "mrr@10": (1 / 3 + 1 + 1 / 3) / 3}
    )
    # two corpora together: pooled, the 3 + 1 queries count alike; the mean weighs each corpus
    other = CorpusResult("d", "dir", pages=1, documents=1, seconds={})
    other.outcomes = [Outcome("q", ("a",), srcrawl=["a"], bm25=[])]
    both = Overall([result, other])
    assert both.pooled("srcrawl") == pytest.approx(
        {"success@1": 2 / 4, "success@3": 2 / 4, "mrr@10": (1 + 1 / 4 + 1) / 4}
    )
    assert both.mean("srcrawl")["success@1"] == pytest.approx((1 / 3 + 1) / 2)
    assert both.as_json()["pooled"]["bm25"]["success@3"] == pytest.approx(3 / 4)
    assert "all 2 corpora (4 queries)" in both.render()


def test_a_bad_query_file_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "q.tsv"
    bad.write_text("# corpus: x\nfine query\ta.html\nno tab here\n", encoding="utf-8")
    with pytest.raises(BenchmarkError, match=r"q\.tsv:3: expected 'query<TAB>answer path'"):
        read_query_file(bad)
    bad.write_text("# only a comment\n", encoding="utf-8")
    with pytest.raises(BenchmarkError, match="no queries"):
        read_query_file(bad)
    bad.write_text("cats\ta.html|sub/b.html\ndogs\tgone.html\n", encoding="utf-8")
    qf = read_query_file(bad)
    assert qf.queries[0].answers == ("a.html", "sub/b.html") and qf.package is None
    (tmp_path / "a.html").write_text("<title>a</title>")
    with pytest.raises(BenchmarkError, match=r"2 answer\(s\) not in the corpus.*line 1: sub/b"):
        check_answers(qf, tmp_path)


def test_the_shipped_query_files() -> None:
    files = {name: read_query_file(builtin_query_file(name)) for name in BUILTIN}
    en, zh = files["django-en"], files["debian-handbook-zh"]
    assert en.package == ("python-django-doc", "3:3.2.25-0+deb12u7")
    assert zh.package == ("debian-handbook", "11.20220922")
    assert len(en.queries) >= 40 and len(zh.queries) >= 30
    for qf in files.values():
        assert qf.name == qf.path.stem and qf.seed.endswith(".html")
        assert len({q.query for q in qf.queries}) == len(qf.queries)  # no query twice
    # the commands' help names every one
    from srcrawl.benchmarks.commands.search import bench_search

    corpus_help = next(p.help for p in bench_search.params if p.name == "corpora")
    assert all(name in corpus_help for name in BUILTIN)


def test_every_shipped_corpus_is_a_debian_package_with_30_queries() -> None:
    """Every .tsv shipped is a corpus `all` runs: it parses, names the package and version
    it was written on and the folder inside it, and has enough queries to be scored."""
    shipped = {p.stem for p in builtin_query_file(BUILTIN[0]).parent.glob("*.tsv")}
    assert shipped == set(BUILTIN)
    assert expand_corpora(["all"]) == list(BUILTIN)
    assert expand_corpora(["flask-en", "all", "flask-en"])[0] == "flask-en"  # each once
    assert len(expand_corpora(["flask-en", "all"])) == len(BUILTIN)
    assert expand_corpora(["/some/dir"]) == ["/some/dir"]
    languages = {"en": 0, "zh": 0}
    for name in BUILTIN:
        qf = read_query_file(builtin_query_file(name))
        assert qf.package is not None and qf.package[1][0].isdigit(), name
        assert qf.header.get("root", "").startswith("usr/share/"), name
        assert len(qf.queries) >= 30, name
        assert all(q.answers and all(a.endswith(".html") for a in q.answers) for q in qf.queries)
        languages[name.rsplit("-", 1)[1]] += 1
    assert languages["en"] >= 5 and languages["zh"] >= 3  # several manuals in each language


PAGES = {
    "index.html": (
        "Garden handbook",
        '<a href="roses.html">Roses</a> <a href="pests/">Pests</a>'
        ' <a href="tools.html">Tools</a> <a href="zh.html">中文</a>',
    ),
    "roses.html": ("Roses", "Prune roses in early spring. Roses like sun."),
    "pests/index.html": ("Pests", "Aphids and slugs eat young leaves; pick slugs at night."),
    "tools.html": ("Tools", "A spade, a rake and pruning shears. Keep the shears sharp."),
    "zh.html": ("浇水", "夏天早晨给花园浇水，避免中午浇水。"),
}
QUERIES = [
    ("prune roses", "roses.html"),
    ("slugs", "pests/index.html"),
    ("sharp shears", "tools.html|roses.html"),
    ("花园 浇水", "zh.html"),
    ("submarine", "tools.html"),  # in no page: a miss for both
]


def _write_corpus(root: Path) -> None:
    for path, (title, body) in PAGES.items():
        f = root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        links = "" if path == "index.html" else '<a href="/index.html">Home</a>'
        f.write_text(
            f"<html><head><title>{title}</title></head><body><p>{body}</p>{links}</body></html>",
            encoding="utf-8",
        )
    lines = ["# corpus: garden", *(f"{q}\t{a}" for q, a in QUERIES)]
    (root / "queries.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.slow
def test_a_small_corpus_is_crawled_indexed_and_scored(redis_url: str, tmp_path: Path) -> None:
    corpus = tmp_path / "garden"
    _write_corpus(corpus)
    env = cli_env(redis_url, f"corpus-{uuid.uuid4().hex[:8]}", tmp_path)
    out = tmp_path / "figures.json"
    # the base code is this checkout: it crawls, indexes and ranks the corpus on its own
    checkout = str(Path(__file__).resolve().parents[1])
    args = ["--corpus", str(corpus), "--rounds", "2", "--base", checkout, "--json", str(out)]
    run = run_cli(["bench", "search", *args], env)
    assert run.returncode == 0, run.stderr
    assert "$ srcrawl crawl http://127.0.0.1:" in run.stderr  # the real commands ran
    assert "$ srcrawl index --slaves 2  (base code)" in run.stderr
    (got,) = json.loads(out.read_text())["corpora"]
    assert got["corpus"] == "garden" and got["queries"] == len(QUERIES)
    assert got["pages"] == got["documents"] == len(PAGES) and got["unindexed_answers"] == []
    assert set(got["seconds"]) == {"crawl_s", "index_s", "rank_s", "bm25_build_s"}
    ranks = {o["query"]: (o["srcrawl_rank"], o["bm25_rank"]) for o in got["outcomes"]}
    assert ranks == {
        "prune roses": (1, 1),
        "slugs": (1, 1),
        "sharp shears": (1, 1),
        "花园 浇水": (1, 1),
        "submarine": (None, None),
    }
    # BM25 over the stored text: only tools.html holds "sharp" and "shears"
    shears = next(o for o in got["outcomes"] if o["query"] == "sharp shears")
    assert shears["bm25"] == ["tools.html"]
    for system in ("srcrawl", "bm25"):
        assert got[system] == pytest.approx({"success@1": 0.8, "success@3": 0.8, "mrr@10": 0.8})
    assert "corpus garden" in run.stdout and "'submarine' -> tools.html  [-/-]" in run.stdout
    # the search's CPU: each code's and Tantivy alone's (and with its Chinese snippets
    # made), two passes over the 5 queries
    cpu = got["search_cpu"]
    assert set(cpu) == {"srcrawl", "tantivy_alone", "tantivy_alone_chinese_snippets", "base"}
    for figures in cpu.values():
        assert 0 < figures["p50_ms"] <= figures["p95_ms"] < 1000
    assert got["base"] == got["srcrawl"] and cpu["base"]["failed"] == []  # the same code
    assert "search CPU ms p50/p95 (10 searches): srcrawl " in run.stdout


@pytest.mark.slow
def test_bad_corpus_arguments_say_what_is_wrong(redis_url: str, tmp_path: Path) -> None:
    env = cli_env(redis_url, f"corpus-{uuid.uuid4().hex[:8]}", tmp_path)
    run = run_cli(["bench", "search", "--corpus", str(tmp_path / "nowhere")], env)
    assert run.returncode == 2 and "neither all, a shipped corpus (django-en, " in run.stderr
    corpus = tmp_path / "c"
    _write_corpus(corpus)
    (corpus / "roses.html").unlink()
    run = run_cli(["bench", "search", "--corpus", str(corpus)], env)
    assert run.returncode == 2 and "not in the corpus" in run.stderr and "roses.html" in run.stderr
    # no Debian tools: the error names the command that fetches the package
    env["PATH"] = str(tmp_path / "empty")
    run = run_cli(["bench", "search", "--corpus", "django-en"], env)
    assert run.returncode == 2, run.stderr
    assert "apt-get download python-django-doc=3:3.2.25-0+deb12u7" in run.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs Debian's apt-get")
def test_the_debian_corpora_are_crawled_whole(redis_url: str, tmp_path: Path) -> None:
    """Both shipped corpora through the harness: every answer page is crawled and indexed,
    and the plain BM25 baseline finds most answers (the data and the judging are sound)."""
    env = cli_env(redis_url, f"corpus-{uuid.uuid4().hex[:8]}", tmp_path)
    out = tmp_path / "figures.json"
    run = run_cli(
        [
            "bench",
            "search",
            "--corpus",
            "django-en",
            "--corpus",
            "debian-handbook-zh",
            "--json",
            str(out),
        ],
        env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    for got in json.loads(out.read_text())["corpora"]:
        assert got["unindexed_answers"] == [], got["corpus"]
        assert got["documents"] >= 120, got["corpus"]
        assert got["bm25"]["success@3"] >= 0.85, got["corpus"]


def test_a_step_of_the_base_code_runs_that_code_not_the_checkout_it_is_started_in(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `python -c` puts its working directory first on the path: a step started in this
    # checkout would import this checkout's srcrawl, whatever PYTHONPATH names
    from srcrawl.benchmarks.real_corpora import _step
    from srcrawl.benchmarks.search_cpu import CodeJob
    from srcrawl.benchmarks.startup import code_at
    from srcrawl.settings.config import Config

    base = tmp_path / "base"
    (base / "srcrawl" / "app").mkdir(parents=True)
    (base / "srcrawl" / "__init__.py").write_text("")
    (base / "srcrawl" / "app" / "__init__.py").write_text("")
    (base / "srcrawl" / "app" / "cli.py").write_text(
        "import srcrawl\ndef main():\n    print(srcrawl.__file__)\n"
    )
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # this checkout's root
    cfg = Config.load(redis_url=redis_url, home=tmp_path)
    job = CodeJob(code_at("base", base), runs / "pages.db", runs / "index", runs / "warc")
    _seconds, out = _step(cfg, ["status"], lambda _line: None, job)
    assert Path(out.strip()) == base / "srcrawl" / "__init__.py"
