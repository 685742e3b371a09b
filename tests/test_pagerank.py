"""PageRank end to end: the real store, a real Redis, real slaves (threads or processes).

Expected ranks come from elsewhere: a linear solve with numpy for a
6-node graph, networkx (run to convergence) for graphs of 10,000+ pages.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import redis

from srcrawl.config import Config, DatabaseURL
from srcrawl.keys import Keys
from srcrawl.local import LocalSlaves
from srcrawl.pagerank.errors import PageRankError
from srcrawl.pagerank.graph import load_graph
from srcrawl.pagerank.job import RankOptions, rank_graph, rank_job
from srcrawl.pagerank.master import RankMaster, RankParams, RankResult
from srcrawl.pagerank.protocol import MapTask, Partial
from srcrawl.pagerank.shards import cut_shards
from srcrawl.pagerank.slave import RankHandler
from srcrawl.queues.envelope import decode
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.slave.runtime import Slave
from srcrawl.sql.store import Page, Store

CONVERGED = RankParams(iterations=500, tol=1e-13)


def make_cfg(redis_url: str, db: DatabaseURL, keys: Keys, home: Path) -> Config:
    return Config(redis_url=redis_url, db=db, job=keys.job, home=home)


def sqlite_cfg(redis_url: str, keys: Keys, home: Path) -> Config:
    """A configuration of the test Redis and a SQLite store under ``home``."""
    return make_cfg(redis_url, DatabaseURL(kind="sqlite", path=str(home / "s.db")), keys, home)


def put_web(store: Store, pages: dict[int, str], links: list[tuple[int, int]]) -> None:
    """Store pages (fp -> host) and links through the normal write path."""
    store.put_pages(
        Page(fp=fp, url=f"http://{host}/{fp}", host=host, fetched_at=1.0)
        for fp, host in pages.items()
    )
    store.put_links(links)


@contextlib.contextmanager
def thread_slaves(cfg: Config, n: int, handler=RankHandler):
    """``n`` in-process slaves serving the pagerank phase, stopped after the block."""
    slaves = [Slave(cfg, [handler(cfg)], block_timeout=0.1) for _ in range(n)]
    threads = [threading.Thread(target=s.run, daemon=True) for s in slaves]
    for t in threads:
        t.start()
    try:
        yield slaves
    finally:
        for s in slaves:
            s.stopping.set()
        for t in threads:
            t.join(timeout=10)


def networkx_ranks(pages: dict[int, str], links: list[tuple[int, int]], **kw) -> dict[int, float]:
    """The reference: networkx on the same node and edge rules, run to convergence."""
    g = nx.DiGraph()
    g.add_nodes_from(pages)
    skip_internal = kw.pop("skip_internal", False)
    g.add_edges_from(
        (a, b)
        for a, b in links
        if a in pages and b in pages and a != b and not (skip_internal and pages[a] == pages[b])
    )
    return nx.pagerank(g, alpha=0.85, tol=1e-12, max_iter=100_000)


def l1(result: RankResult, expected: dict[int, float]) -> float:
    got = dict(zip(result.fps.tolist(), result.ranks.tolist(), strict=True))
    assert got.keys() == expected.keys()
    return sum(abs(got[fp] - expected[fp]) for fp in got)


def random_web(n: int, seed: int) -> tuple[dict[int, str], list[tuple[int, int]]]:
    """Two link communities, isolated pages, dangling pages, self-links, repeated
    links, and links to pages that were never stored."""
    rng = np.random.default_rng(seed)
    fps = [int(v) for v in np.unique(rng.integers(-(2**63), 2**63 - 1, size=n + 50))[:n]]
    pages = {fp: f"h{i % 37}.test" for i, fp in enumerate(fps)}
    a, b = fps[: n // 2], fps[n // 2 : n - 200]  # the last 200 pages: no links at all
    links: list[tuple[int, int]] = []
    for part in (a, b):
        ids = np.arange(len(part))
        src = rng.choice(ids, size=len(part) * 5, p=None)
        w = 1.0 / (ids + 1.0) ** 0.8
        dst = rng.choice(ids, size=len(part) * 5, p=w / w.sum())
        keep = src % 10 != 0  # a tenth of the pages dangle
        links += [(part[s], part[d]) for s, d in zip(src[keep], dst[keep], strict=True)]
    links += [(a[i], a[i]) for i in range(0, len(a), 7)]  # self-links
    links += links[:500]  # repeats
    links += [(a[i], 12345 + i) for i in range(100)]  # to pages never stored
    return pages, links


# -- a graph small enough to check by hand -------------------------------------

SIX = {
    -(2**63): "a.test",
    -5: "a.test",
    0: "b.test",
    7: "b.test",
    2**40: "c.test",
    2**63 - 1: "c.test",
}
A, B, C, D, E, F = sorted(SIX)
SIX_LINKS = [
    (A, B),
    (A, C),
    (B, C),
    (C, A),
    (D, C),
    (D, A),
    (D, D),
    (E, F),
    (E, A),
    (A, B),
    (A, 424242),
]


def six_expected(damping: float = 0.85) -> np.ndarray:
    """Solve r = d·(M r + dangling mass / n) + (1 - d)/n exactly, with numpy."""
    nodes = [A, B, C, D, E, F]
    edges = {(s, t) for s, t in SIX_LINKS if s != t and t in SIX}
    n = len(nodes)
    out = {s: sum(1 for e in edges if e[0] == s) for s in nodes}
    m = np.zeros((n, n))
    for s, t in edges:
        m[nodes.index(t), nodes.index(s)] = 1.0 / out[s]
    dangling = np.array([1.0 if out[s] == 0 else 0.0 for s in nodes])
    system = np.eye(n) - damping * m - damping / n * np.outer(np.ones(n), dangling)
    return np.linalg.solve(system, np.full(n, (1 - damping) / n))


def test_six_pages_match_the_linear_system(redis_url, keys, store, db_url, tmp_path) -> None:
    put_web(store, SIX, SIX_LINKS)
    cfg = make_cfg(redis_url, db_url, keys, tmp_path)
    expected = six_expected()
    assert abs(expected.sum() - 1.0) < 1e-12 and expected[5] > 0  # F: no out-links
    with thread_slaves(cfg, 2):
        result = rank_job(cfg, CONVERGED, RankOptions(shards=3))
    assert result.converged
    assert np.abs(result.ranks - expected).sum() <= 1e-9
    stored = dict(store.top_ranks())
    for fp, rank in zip([A, B, C, D, E, F], expected, strict=True):
        assert abs(stored[f"http://{SIX[fp]}/{fp}"] - rank) <= 1e-9
    top = [[A, B, C, D, E, F][i] for i in np.argsort(-expected)[:2]]
    assert [u for u, _ in store.top_ranks(2)] == [f"http://{SIX[fp]}/{fp}" for fp in top]
    job = store.get_job(keys.job, "pagerank")
    assert job["state"] == "complete" and job["stats"]["pages"] == 6
    assert job["stats"]["links"] == 8
    cfg.close()


def test_large_graph_matches_networkx(redis_url, keys, store, db_url, tmp_path) -> None:
    pages, links = random_web(12_000, seed=5)
    put_web(store, pages, links)
    cfg = make_cfg(redis_url, db_url, keys, tmp_path)
    with thread_slaves(cfg, 2):
        result = rank_job(cfg, CONVERGED, RankOptions(shards=5))
    assert result.converged and result.reports[-1].iteration < 500
    assert l1(result, networkx_ranks(pages, links)) <= 1e-6
    assert abs(result.ranks.sum() - 1.0) < 1e-9
    assert store.count("ranks") == 12_000
    cfg.close()


def test_skip_internal_matches_networkx_without_host_links(
    redis_url, redis_client, keys, tmp_path
) -> None:
    pages, links = random_web(10_000, seed=9)
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), pages, links)
    with thread_slaves(cfg, 1):
        internal = rank_job(cfg, CONVERGED, RankOptions(skip_internal=True))
        everything = rank_job(cfg, CONVERGED, RankOptions())
    assert l1(internal, networkx_ranks(pages, links, skip_internal=True)) <= 1e-6
    assert l1(everything, networkx_ranks(pages, links)) <= 1e-6
    assert np.abs(internal.ranks - everything.ranks).sum() > 1e-3  # the option matters
    cfg.close()


def test_tol_stops_early_and_iterations_cap(redis_url, keys, tmp_path) -> None:
    pages, links = random_web(2_000, seed=2)
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), pages, links)
    graph = load_graph(cfg.store())
    with thread_slaves(cfg, 1):
        loose = rank_graph(cfg, graph, RankParams(iterations=100, tol=1e-4))
        capped = rank_graph(cfg, graph, RankParams(iterations=3))
    deltas = [r.delta for r in loose.reports]
    assert loose.converged and deltas[-1] < 1e-4 <= min(deltas[:-1])
    assert 3 < len(deltas) < 100
    assert not capped.converged and len(capped.reports) == 3
    cfg.close()


class Meddling(RankHandler):
    """A slave that sends, around each true result, results that must be ignored:
    before it one of the previous iteration and one of another graph, after it
    a repeat with other sums."""

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        nrq = self.keys.nrq("pagerank")
        junk = []
        for raw in tasks:
            task = MapTask.decode(raw)
            shard = self._shard_of(task)
            sums = np.full(shard.hi - shard.lo, 1e6)
            junk.append((task, shard.lo, sums))
            self.bulk.rpush(
                nrq,
                Partial(task.version, task.iteration - 1, task.shard, shard.lo, sums).encode(),
                Partial(task.version + 1, task.iteration, task.shard, shard.lo, sums).encode(),
            )
        answers = super().handle(tasks)
        for task, lo, sums in junk:
            self.bulk.rpush(
                nrq, Partial(task.version, task.iteration, task.shard, lo, sums).encode()
            )
        return answers


def test_stale_and_repeated_results_are_ignored(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    with thread_slaves(cfg, 2, handler=Meddling):
        result = rank_job(cfg, CONVERGED, RankOptions(shards=3))
    assert np.abs(result.ranks - six_expected()).sum() <= 1e-9
    # the last iteration's trailing repeats are never read; all others are dropped
    assert result.dropped >= 3 * 3 * (len(result.reports) - 1)
    cfg.close()


# -- failures ----------------------------------------------------------------------

VICTIM = """
from srcrawl.config import Config
from srcrawl.pagerank.slave import RankHandler
from srcrawl.slave.runtime import Slave

cfg = Config.load()
Slave(cfg, [RankHandler(cfg)], heartbeat_interval=0.2, heartbeat_ttl=1.0).run()
"""


def _worker_of(client, keys: Keys, pid: int) -> str | None:
    for wid, record in client.hgetall(keys.workers).items():
        if json.loads(record).get("pid") == pid:
            return wid.decode()
    return None


def _kill_while_holding_a_task(client, keys: Keys, victim: subprocess.Popen) -> int:
    """SIGKILL ``victim`` while it holds a map task; return how many it held."""
    q = PhaseQueues(client, keys, "pagerank")
    deadline = time.monotonic() + 60
    worker = None
    while time.monotonic() < deadline:
        worker = worker or _worker_of(client, keys, victim.pid)
        if worker and client.llen(q.srq.processing_key(worker)):
            victim.send_signal(signal.SIGSTOP)  # frozen: it can no longer ack
            held = client.llen(q.srq.processing_key(worker))
            if held:
                victim.kill()
                victim.wait()
                return held
            victim.send_signal(signal.SIGCONT)
    raise AssertionError("the victim never held a task")


def test_a_slave_killed_mid_iteration_changes_nothing(
    redis_url, redis_client, keys, tmp_path, python
) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    pages, links = random_web(20_000, seed=4)
    put_web(cfg.store(), pages, links)
    graph = load_graph(cfg.store())
    shards = cut_shards(graph.src, graph.dst, graph.n, 8)
    params = RankParams(iterations=40)
    with LocalSlaves(cfg, 1, ["pagerank"]):
        clean = RankMaster(redis_client, keys).run(graph, shards, params)
    assert clean.requeued == 0

    victim = subprocess.Popen([python, "-c", VICTIM], env=cfg.child_env())
    master = RankMaster(redis_client, keys, reap_interval=0.2)
    outcome: dict = {}

    def run_master() -> None:
        try:
            outcome["result"] = master.run(graph, shards, params)
        except BaseException as e:  # surfaced by the assertion below
            outcome["error"] = e

    t = threading.Thread(target=run_master)
    t.start()
    try:
        held = _kill_while_holding_a_task(redis_client, keys, victim)
        with LocalSlaves(cfg, 1, ["pagerank"]):
            t.join(timeout=120)
    finally:
        if victim.poll() is None:
            victim.kill()
    assert not t.is_alive() and "error" not in outcome, outcome
    result = outcome["result"]
    assert held >= 1 and result.requeued >= held
    assert len(result.reports) == 40
    assert np.array_equal(result.ranks, clean.ranks)  # bit for bit: each shard summed once
    q = PhaseQueues(redis_client, keys, "pagerank")
    assert len(q.srq) == 0 and len(q.nrq) == 0
    cfg.close()


def test_the_master_gives_up_when_its_slaves_are_gone(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    graph = load_graph(cfg.store())
    master = RankMaster(cfg.redis(), cfg.keys, reap_interval=0.1, slaves_alive=lambda: False)
    with pytest.raises(PageRankError, match="every slave"):
        master.run(graph, cut_shards(graph.src, graph.dst, graph.n, 2), RankParams())
    # it cleaned up after itself: no shards, vector, tasks or lock left behind
    left = cfg.redis().keys(f"{cfg.keys.prefix}:pagerank:*")
    assert left == [cfg.keys.trq("pagerank").encode()]
    cfg.close()


def test_a_second_master_of_the_job_is_refused(redis_url, redis_client, keys, tmp_path) -> None:
    redis_client.set(keys.rank_master, "master-99", px=5000)
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    graph = load_graph(cfg.store())
    with pytest.raises(PageRankError, match="master-99"):
        RankMaster(redis_client, keys).run(
            graph, cut_shards(graph.src, graph.dst, 6, 1), RankParams()
        )
    assert redis_client.get(keys.rank_master) == b"master-99"
    cfg.close()


def test_a_corrupt_shard_fails_the_run_with_a_clear_error(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    graph = load_graph(cfg.store())
    master = RankMaster(cfg.redis(), cfg.keys)
    publish = master._publish

    def corrupt(version, shards) -> None:
        publish(version, shards)
        cfg.redis().set(cfg.keys.rank_shard(version, 0), b'{"v":1,"kind":"shard"}\nxx')

    master._publish = corrupt
    with thread_slaves(cfg, 1), pytest.raises(PageRankError, match="shard 0 is corrupt"):
        master.run(graph, cut_shards(graph.src, graph.dst, 6, 2), RankParams())
    cfg.close()


# -- the command line ----------------------------------------------------------------


def run_cli(
    python: str, home: Path, redis_url: str, job: str, *args: str
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "SRCRAWL_REDIS_URL": redis_url,
        "SRCRAWL_JOB": job,
        "SRCRAWL_HOME": str(home),
        "SRCRAWL_DB_URL": f"sqlite:///{home}/s.db",
    }
    return subprocess.run(
        [python, "-m", "srcrawl.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_cli_ranks_with_local_slaves_and_exports(redis_url, keys, tmp_path, python) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    cfg.close()
    done = run_cli(
        python,
        tmp_path,
        redis_url,
        keys.job,
        "pagerank",
        "--slaves",
        "2",
        "--iterations",
        "200",
        "--tol",
        "1e-14",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("graph: 6 pages, 8 links, 1 without out-links")
    iterations = [ln for ln in lines if ln.startswith("iteration")]
    assert len(iterations) > 10 and " s" in iterations[0] and "L1 change" in iterations[0]
    assert "converged" in lines[-1]
    export = run_cli(python, tmp_path, redis_url, keys.job, "export", "ranks")
    assert export.returncode == 0, export.stderr
    rows = [line.split("\t") for line in export.stdout.splitlines()]
    scores = [float(s) for _, s in rows]
    assert scores == sorted(scores, reverse=True) and len(rows) == 6
    expected = dict(zip([A, B, C, D, E, F], six_expected(), strict=True))
    for url, score in rows:
        assert abs(float(score) - expected[int(url.rsplit("/", 1)[1])]) < 1e-9
    top = run_cli(python, tmp_path, redis_url, keys.job, "export", "ranks", "--limit", "1")
    assert top.stdout.splitlines() == [export.stdout.splitlines()[0]]


def test_cli_refuses_bad_input_with_one_line(redis_url, keys, tmp_path, python) -> None:
    empty = run_cli(python, tmp_path, redis_url, keys.job, "pagerank", "--slaves", "0")
    assert empty.returncode == 2
    assert empty.stderr.strip() == "srcrawl: the store holds no pages: crawl some first"
    bad = run_cli(python, tmp_path, redis_url, keys.job, "pagerank", "--damping", "1.5")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--damping" in bad.stderr
    counts = run_cli(python, tmp_path, redis_url, keys.job, "bench", "pagerank", "--slaves", "x")
    assert counts.returncode == 2 and counts.stderr.startswith("srcrawl: --slaves")


def test_slave_answers_malformed_and_stale_tasks_without_raising(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    handler = RankHandler(cfg)
    bad, gone = handler.handle([b"garbage", MapTask(41, 1, 0).encode()])
    assert decode(bad).kind == "error" and decode(bad).payload == b"garbage"
    assert decode(gone).kind == "stale" and decode(gone).get("shard") == 0
    assert handler.stats()["stale"] == 1
    cfg.close()


def test_partial_sums_go_through_the_runtime_when_the_direct_push_fails(
    redis_url, redis_client, keys, tmp_path
) -> None:
    from srcrawl.embedded import free_port
    from srcrawl.pagerank.protocol import pack_vector

    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    src, dst = np.array([0, 1, 2], np.int32), np.array([1, 2, 0], np.int32)
    [shard] = cut_shards(src, dst, 3, 1)
    redis_client.set(keys.rank_shard(5, 0), shard.pack(5))
    redis_client.set(keys.rank_vector(5, 1), bytes(pack_vector(np.array([0.5, 0.25, 0.25]))))
    handler = RankHandler(cfg)
    assert handler.handle([MapTask(5, 1, 0).encode()]) == []  # pushed to nrq directly
    [direct] = redis_client.lrange(keys.nrq("pagerank"), 0, -1)
    assert Partial.from_message(decode(direct)).sums.tolist() == [0.25, 0.5, 0.25]
    handler.bulk = redis.Redis(port=free_port(), socket_connect_timeout=1)  # nothing listens
    [answer] = handler.handle([MapTask(5, 1, 0).encode()])
    assert decode(answer).kind == "partial" and decode(answer).payload == decode(direct).payload
    assert redis_client.llen(keys.nrq("pagerank")) == 1
    cfg.close()
