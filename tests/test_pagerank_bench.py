"""``srcrawl bench pagerank`` on a small graph: real store, Redis and slave processes."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from srcrawl.benchmarks.pagerank import run_pagerank_benchmark, synthetic_web
from srcrawl.pagerank.errors import PageRankError
from srcrawl.settings.config import Config
from srcrawl.sql.pages import Page


def bench_cfg(redis_url: str, job: str, tmp_path) -> Config:
    return Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": job,
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/bench.db",
            "SRCRAWL_HOME": str(tmp_path),
        }
    )


def test_synthetic_web_has_distinct_links_and_skewed_degrees() -> None:
    web = synthetic_web(5_000, 40_000, seed=3)
    assert web.n == 5_000 and len(np.unique(web.fps)) == 5_000
    keys = web.src.astype(np.int64) * web.n + web.dst
    assert len(keys) == 40_000 and len(np.unique(keys)) == 40_000
    assert not np.any(web.src == web.dst)
    indeg = np.bincount(web.dst, minlength=web.n)
    outdeg = np.bincount(web.src, minlength=web.n)
    assert indeg.max() > 20 * indeg.mean()  # a few pages draw many links
    assert (outdeg == 0).sum() > 0  # and some pages link nowhere
    again = synthetic_web(5_000, 40_000, seed=3)
    assert np.array_equal(again.src, web.src) and np.array_equal(again.fps, web.fps)


@pytest.mark.slow
def test_benchmark_times_each_slave_count_beside_the_baseline(redis_url, keys, tmp_path) -> None:
    cfg = bench_cfg(redis_url, keys.job, tmp_path)
    lines: list[str] = []
    result = run_pagerank_benchmark(
        cfg, nodes=3_000, edges=20_000, slave_counts=[1, 2], iterations=6, progress=lines.append
    )
    assert (result.parameters["nodes"], result.parameters["edges"]) == (3_000, 20_000)
    assert cfg.store().count("links") == 20_000  # it went through the store
    baseline, *runs = result.rows
    assert baseline.label == "scipy" and baseline.items == 6 and baseline.slaves is None
    assert [r.slaves for r in runs] == [1, 2]
    for run in runs:
        assert run.items == 6 and run.extra["l1_vs_baseline"] < 1e-12
        assert run.cpu_s is not None and run.cpu_s > 0
        assert run.extra["s_per_iteration"] == pytest.approx(run.seconds / 6)
        # the one-time steps are reported beside the iterations, not in them
        assert run.extra["publish_s"] > 0 and run.extra["shard_load_s"] > 0
        assert run.extra["shards_loaded"] == 1
    assert result.speedup(runs[0]) == pytest.approx(1.0)
    assert len([ln for ln in lines if ln.startswith("2 slave(s): iteration")]) == 6
    text = result.render()
    assert "3,000 pages, 20,000 links" in text and "scipy" in text
    assert len([ln for ln in text.splitlines() if ln.split()[0] in ("1", "2")]) == 2
    cfg.close()


def test_benchmark_refuses_a_store_that_holds_pages(redis_url, keys, tmp_path) -> None:
    cfg = bench_cfg(redis_url, keys.job, tmp_path)
    cfg.store().put_pages([Page(fp=1, url="http://a.test/", host="a.test", fetched_at=1.0)])
    with pytest.raises(PageRankError, match="holds 1 pages"):
        run_pagerank_benchmark(cfg, nodes=10, edges=20, slave_counts=[1], iterations=1)
    assert cfg.store().count("pages") == 1
    cfg.close()


@pytest.mark.slow
def test_bench_command_prints_the_table(redis_url, keys, tmp_path, python) -> None:
    env = {
        **os.environ,
        "SRCRAWL_REDIS_URL": redis_url,
        "SRCRAWL_JOB": keys.job,
        "SRCRAWL_HOME": str(tmp_path),
        "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/b.db",
    }
    done = subprocess.run(
        [
            python,
            "-m",
            "srcrawl.app.cli",
            "bench",
            "pagerank",
            "--nodes",
            "2000",
            "--edges",
            "9000",
            "--slaves",
            "1,2",
            "--iterations",
            "3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("pagerank benchmark: 2,000 pages, 9,000 links")
    assert any(ln.strip().startswith("graph load") for ln in lines)
    header = next(ln for ln in lines if ln.split()[0] == "slaves")
    assert "iterations/s" in header and "L1 vs baseline" in header
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.split()[0] in ("scipy", "1", "2")}
    assert rows.keys() == {"scipy", "1", "2"}
    assert float(rows["1"][-1]) < 1e-12  # the same ranks as the baseline
    assert rows["1"][4] == "1.00"  # speedup of the one-slave run
    assert len(rows["1"]) == len(rows["2"]) == 14 and len(rows["scipy"]) == 9
    assert "publish s" in header and "shard load s" in header
