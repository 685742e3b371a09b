"""The scaling benchmarks' command line: bad --slaves and missing extras end with one
line and exit 2 before anything runs; a tiny `bench crawl --peer scrapy` writes its
table, its JSON and its plot."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Runs the CLI with some modules made unimportable, as if they were not installed.
WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "sys.argv = ['srcrawl', *sys.argv[2:]]\n"
    "from srcrawl.app.cli import main\n"
    "main()\n"
)


def run(args: list[str], cwd: Path, env: dict[str, str], *, without: str = "", timeout=300):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    full_env.update(env)
    cmd = [sys.executable, "-c", WITHOUT, without, *args]
    return subprocess.run(
        cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def env(tmp_path, redis_url, keys) -> dict[str, str]:
    return {
        "SRCRAWL_REDIS_URL": redis_url,
        "SRCRAWL_HOME": str(tmp_path / "home"),
        "SRCRAWL_JOB": keys.job,
    }


@pytest.mark.parametrize(
    "bench",
    # one bench in the fast tier: each case runs the command line
    [
        "crawl",
        pytest.param("index", marks=pytest.mark.slow),
        pytest.param("pagerank", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("counts", ["1,x", "0", "1,1", ""])
def test_bad_slave_counts_end_with_one_line(bench, counts, tmp_path, env) -> None:
    r = run(["bench", bench, "--slaves", counts], tmp_path, env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("srcrawl: --slaves: ") and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize(
    "bench",
    # one bench in the fast tier: each case runs the command line
    [
        "crawl",
        pytest.param("index", marks=pytest.mark.slow),
        pytest.param("pagerank", marks=pytest.mark.slow),
    ],
)
def test_plot_without_matplotlib_ends_with_one_line_before_running(bench, tmp_path, env) -> None:
    png = tmp_path / "out.png"
    r = run(
        ["bench", bench, "--slaves", "1", "--plot", str(png)], tmp_path, env, without="matplotlib"
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "pip install 'srcrawl[plot]'" in r.stderr, r.stderr
    assert not png.exists() and r.stdout == ""
    assert not (tmp_path / "home").exists()  # nothing ran: not even the embedded Redis


def test_peer_without_scrapy_ends_with_one_line(tmp_path, env) -> None:
    r = run(["bench", "crawl", "--peer", "scrapy"], tmp_path, env, without="scrapy")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "pip install 'srcrawl[peer]'" in r.stderr, r.stderr


@pytest.mark.slow
def test_bench_crawl_beside_scrapy_writes_table_json_and_plot(tmp_path, env) -> None:
    out_json, out_png = tmp_path / "crawl.json", tmp_path / "crawl.png"
    r = run(
        [
            "bench",
            "crawl",
            "--slaves",
            "2,1",
            "--hosts",
            "4",
            "--pages",
            "6",
            "--latency-ms",
            "5",
            "--threads",
            "2",
            "--depth",
            "3",
            "--peer",
            "scrapy",
            "--rounds",
            "2",
            "--json",
            str(out_json),
            "--plot",
            str(out_png),
        ],
        tmp_path,
        env,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(out_json.read_text())
    assert data["parameters"]["slaves"] == [2, 1] and data["parameters"]["peer"] == "scrapy"
    assert data["parameters"]["rounds"] == 2
    assert data["machine"]["cores"] == os.cpu_count()
    ours = {row["slaves"]: row for row in data["rows"] if row["series"] == "srcrawl"}
    peers = {row["slaves"]: row for row in data["rows"] if row["series"] == "scrapy"}
    assert set(ours) == set(peers) == {1, 2}
    pages = ours[1]["items"]
    assert pages > 3 * 6  # the three crawled hosts' pages and more
    for n in (1, 2):
        # the same web, seeds, depth and scope: the same pages
        assert ours[n]["items"] == peers[n]["items"] == pages
        assert peers[n]["concurrency"] == 2 * n
        assert ours[n]["vs_peer"] == pytest.approx(ours[n]["throughput"] / peers[n]["throughput"])
        assert ours[n]["cpu_s_per_item"] > 0 and peers[n]["cpu_s_per_item"] > 0
        assert ours[n]["links_judged"] >= pages  # every fetched page was judged once
        # each count's median run of two rounds, with both rounds' speedups
        assert len(ours[n]["round_speedups"]) == 2 and "round_speedups" not in peers[n]
    assert ours[1]["round_speedups"] == [1.0, 1.0]
    assert ours[1]["speedup"] == pytest.approx(1.0)
    assert ours[2]["efficiency"] == pytest.approx(ours[2]["speedup"] / 2)
    assert out_png.read_bytes().startswith(PNG_SIGNATURE)
    table = r.stdout.splitlines()
    assert table[0].startswith("crawl benchmark: 3 hosts crawled")
    assert table[1].startswith("  2 rounds, the order of slave counts reversed")
    assert "master URLs/s" in table[2] and "× scrapy" in table[2]
    assert "speedup per round" in table[2]
    assert [ln.split()[0] for ln in table[3:]] == ["2", "scrapy", "1", "scrapy"]
    assert "slave(s):" in r.stderr  # the progress line


@pytest.mark.slow
def test_bench_index_and_search_run_on_a_small_corpus(tmp_path, env) -> None:
    out_json = tmp_path / "index.json"
    r = run(
        [
            "bench",
            "index",
            "--pages",
            "40",
            "--slaves",
            "1,2",
            "--rounds",
            "2",
            "--json",
            str(out_json),
        ],
        tmp_path,
        env,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(out_json.read_text())["rows"]
    phase = {row["slaves"]: row for row in rows if row["series"] == "srcrawl"}
    assert sorted(phase) == [1, 2]
    for row in phase.values():
        assert row["items"] == 40 and row["throughput"] > 0 and row["index_bytes_per_page"] > 100
        assert len(row["round_speedups"]) == 2, row
        assert row["speedup"] == pytest.approx(row["throughput"] / phase[1]["throughput"])
    assert phase[1]["round_speedups"] == [1.0, 1.0]
    # the index phase's CPU beside jieba-rs and Tantivy alone's on the same pages
    alone = next(row for row in rows if row.get("label") == "jieba-rs + Tantivy, 1 process")
    assert alone["items"] == 40 and alone["cpu_s"] > 0
    for row in phase.values():
        assert row["vs_jieba_tantivy"] > 0, row
    # the second round runs the counts in the other order
    assert "round 2/2: index phase with 2 slave(s)" in r.stderr
    assert r.stderr.index("round 2/2: index phase with 2") < r.stderr.index(
        "round 2/2: index phase with 1"
    )
    assert "speedup per round" in r.stdout
    # the search benchmark indexes the same corpus once, then times known-item queries
    r = run(["bench", "search", "--pages", "40", "--queries", "5", "--slaves", "1"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert "p95" in r.stdout and "bytes/page with positions" in r.stdout, r.stdout
    for label in ("Tantivy alone", "Tantivy, its snippets", "BM25 + PageRank"):
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith(label + " "))
        assert "| and 5;" in line, line  # each query's every-word search found pages


@pytest.mark.slow
def test_bench_startup_times_each_command_for_each_code(tmp_path, env) -> None:
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "startup.json"
    r = run(
        [
            "bench",
            "startup",
            "--rounds",
            "2",
            "--pages",
            "10",
            "--base",
            str(root),
            "--json",
            str(out),
        ],
        tmp_path,
        env,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(row["command"].split()[1], row["code"]) for row in rows] == [
        ("--version", "this"),
        ("--version", "base"),
        ("search", "this"),
        ("search", "base"),
        ("search", "this"),
        ("search", "base"),
    ]
    assert all(len(row["walls"]) == 2 and 0 < row["min"] <= row["median"] for row in rows)
    assert r.stdout.count("srcrawl search") == 4 and "median" in r.stdout
    bad = run(["bench", "startup", "--base", str(tmp_path)], tmp_path, env)
    assert bad.returncode == 2 and "no srcrawl/__init__.py there" in bad.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_bench_serve_with_wrk_takes_a_fraction_of_a_second(tmp_path, env) -> None:
    """wrk refuses `-d0.5s`: the cell runs whole seconds and its rate is wrk's own."""
    r = run(
        [
            "bench",
            "serve",
            "--pages",
            "40",
            "--clients",
            "2",
            "--seconds",
            "0.5",
            "--spawns",
            "1",
            "--workers",
            "1",
            "--threads",
            "1",
            "--client",
            "wrk",
        ],
        tmp_path,
        env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] == ["now"]]
    served = [row for row in rows if row[2] == "2"]
    assert [row[1] for row in served] == ["en", "zh"], r.stdout
    for row in served:
        requests, req_s, errors = int(row[3]), float(row[6]), int(row[8])
        assert requests > 0 and errors == 0, row
        assert req_s == pytest.approx(requests, rel=0.2), row  # about one second a cell
    memory = re.search(r"RSS (\d+) MB .*its share, PSS, (\d+) MB", r.stdout)
    assert memory and 0 < int(memory[2]) <= int(memory[1]), r.stdout
    # beside the server's CPU a request: a search's in this process, on the same queries,
    # as `srcrawl search` runs it and as the portal does (grouped, facets, JSON)
    for lang in ("en", "zh"):
        for what in ("a search", "the portal's own search"):
            line = re.search(
                rf"in process, {lang}: ([\d.]+) ms CPU {what} .*CPU ([\d.]+)× it", r.stdout
            )
            assert line and float(line[1]) > 0 and float(line[2]) > 0, (what, r.stdout)


@pytest.mark.slow
def test_bench_crawl_gives_each_later_series_over_the_first_per_round(tmp_path, env) -> None:
    out_json = tmp_path / "crawl.json"
    r = run(
        [
            "bench",
            "crawl",
            "--slaves",
            "1",
            "--hosts",
            "4",
            "--pages",
            "6",
            "--latency-ms",
            "0",
            "--threads",
            "2",
            "--depth",
            "2",
            "--body-store",
            "sql,warc",
            "--rounds",
            "2",
            "--json",
            str(out_json),
        ],
        tmp_path,
        env,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(out_json.read_text())["rows"]
    sql, warc = rows  # the first series, then the later one
    assert "vs_first" not in sql
    ratios, median = warc["vs_first"].rsplit(" (", 1)
    per_round = [float(x) for x in ratios.split()]
    assert len(per_round) == 2 and all(x > 0 for x in per_round)
    assert float(median.rstrip(")")) == pytest.approx(sum(per_round) / 2, abs=0.01)
    assert "× --per-host 1 --body-store sql, per round (median)" in r.stdout
