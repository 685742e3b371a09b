"""PageRank end to end: the real store, a real Redis, real slaves (threads or processes).

Expected ranks come from elsewhere: a linear solve with numpy for a
6-node graph, networkx (run to convergence) for graphs of 10,000+ pages.
"""

from __future__ import annotations

import contextlib
import gc
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

from srcrawl.app.local import LocalSlaves
from srcrawl.core.errors import LeaseHeld
from srcrawl.core.keys import Keys, lease_acquirer_key
from srcrawl.pagerank.errors import PageRankError
from srcrawl.pagerank.graph import Graph, load_graph
from srcrawl.pagerank.job import RankOptions, rank_graph, rank_job
from srcrawl.pagerank.master import RankMaster, RankParams, RankResult
from srcrawl.pagerank.protocol import GraphHeader, MapTask, ShardDone, pack_vector
from srcrawl.pagerank.shards import Shard, cut_shards
from srcrawl.pagerank.slave import RankHandler
from srcrawl.pagerank.transport import TransientWriter
from srcrawl.queues.envelope import decode
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.slave.runtime import Slave
from srcrawl.sql.pages import Page
from srcrawl.sql.store import Store

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
    slaves = [
        Slave.from_config(cfg, [handler.from_config(cfg)], block_timeout=0.1) for _ in range(n)
    ]
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


@pytest.mark.slow
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


@pytest.mark.slow
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


ONE_HOST = {fp: "a.test" for fp in (-9, 3, 11, 40)}
DEGENERATE = {
    "one page": ({5: "a.test"}, [], {}),
    "no links": ({1: "a.test", 2: "b.test", 3: "c.test"}, [], {}),
    "only self-links": ({1: "a.test", 2: "b.test", 3: "c.test"}, [(1, 1), (2, 2), (3, 3)], {}),
    "only links to pages never stored": ({1: "a.test", 2: "b.test"}, [(1, 99), (2, 98)], {}),
    "one host, internal links skipped": (
        ONE_HOST,
        [(-9, 3), (3, 11), (11, 40), (40, -9)],
        {"skip_internal": True},
    ),
}


@pytest.mark.parametrize("shape", DEGENERATE, ids=list(DEGENERATE))
def test_a_graph_without_edges_gives_every_page_the_same_rank(
    shape: str, redis_url, keys, tmp_path
) -> None:
    pages, links, options = DEGENERATE[shape]
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), pages, links)
    with thread_slaves(cfg, 2):
        result = rank_job(cfg, CONVERGED, RankOptions(shards=3, **options))
    assert result.converged
    assert np.abs(result.ranks - 1.0 / len(pages)).max() <= 1e-12
    assert l1(result, networkx_ranks(pages, links, **options)) <= 1e-9
    assert cfg.store().count("ranks") == len(pages)
    cfg.close()


@pytest.mark.slow
def test_shards_without_in_links_beside_others_match_networkx(redis_url, keys, tmp_path) -> None:
    pages = {fp: f"h{fp % 3}.test" for fp in range(1, 13)}
    links = [(fp, 1) for fp in range(2, 13)] + [(1, 2)]  # every link ends in the first shard
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), pages, links)
    with thread_slaves(cfg, 2):
        result = rank_job(cfg, CONVERGED, RankOptions(shards=4))
    assert result.converged
    assert l1(result, networkx_ranks(pages, links)) <= 1e-9
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


def test_runs_one_after_another_leave_no_connection_open(redis_url, keys, tmp_path) -> None:
    # `pagerank --every` makes a master per run: each run's sockets must close with it,
    # not when the garbage collector finds them (it is off here)
    pages, links = random_web(500, seed=3)
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), pages, links)
    graph = load_graph(cfg.store())
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    with thread_slaves(cfg, 1):
        rank_graph(cfg, graph, RankParams(iterations=3))  # the clients a first run opens
        gc.disable()
        try:
            before = fds()
            for _ in range(4):
                rank_graph(cfg, graph, RankParams(iterations=3))
            after = fds()
        finally:
            gc.enable()
    assert after <= before, (before, after)
    cfg.close()


class Meddling(RankHandler):
    """A slave that sends, around each true result, results that must be ignored:
    before it one of the previous iteration and one of another graph, after it
    a repeat; each with an L1 change no true result can have."""

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        answers = super().handle(tasks)
        self.flush()  # the true answers go out here, not with the acknowledgement
        nrq = self.keys.nrq("pagerank")
        for raw in answers:
            d = ShardDone.from_message(decode(raw))
            self.client.rpush(
                nrq,
                ShardDone(d.version, d.iteration - 1, d.shard, 1e6).encode(),
                ShardDone(d.version + 1, d.iteration, d.shard, 1e6).encode(),
                raw,
                ShardDone(d.version, d.iteration, d.shard, 1e6).encode(),
            )
        return []


def test_stale_and_repeated_results_are_ignored(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    with thread_slaves(cfg, 2, handler=Meddling):
        result = rank_job(cfg, CONVERGED, RankOptions(shards=3))
    assert np.abs(result.ranks - six_expected()).sum() <= 1e-9
    assert result.converged and max(r.delta for r in result.reports) <= 2.0
    # the last iteration's trailing repeats are never read; all others are dropped
    assert result.dropped >= 3 * 3 * (len(result.reports) - 1)
    cfg.close()


# -- failures ----------------------------------------------------------------------


class Forgetful(RankHandler):
    """Loses its first task after claiming a shard: no piece, no answer, the task
    gone (as a slave that retired with a claimed shard leaves things)."""

    forgot = False

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        answers = super().handle(tasks)
        if not Forgetful.forgot and answers:
            Forgetful.forgot = True
            with self._pending_lock:
                self._pending.clear()
            return []
        return answers


@pytest.mark.slow
def test_a_shard_claimed_and_forgotten_is_offered_again(
    redis_url, keys, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr("srcrawl.pagerank.master.DEFAULT_PAGERANK_STALL_TIMEOUT", 0.5)
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    with thread_slaves(cfg, 2, handler=Forgetful):
        result = rank_job(cfg, CONVERGED, RankOptions(shards=3))
    assert Forgetful.forgot
    assert np.abs(result.ranks - six_expected()).sum() <= 1e-9 and result.converged
    cfg.close()


VICTIM = """
import sys, time
from srcrawl.settings.config import Config
from srcrawl.pagerank.protocol import MapTask
from srcrawl.pagerank.slave import RankHandler
from srcrawl.slave.runtime import Slave

class Slow(RankHandler):
    # lingers over the tasks of one round, so that it can be caught holding one
    def handle(self, tasks):
        if any(MapTask.decode(t).iteration == int(sys.argv[1]) for t in tasks):
            time.sleep(0.2)
        return super().handle(tasks)

cfg = Config.load()
Slave.from_config(cfg, [Slow.from_config(cfg)], heartbeat_interval=0.2, heartbeat_ttl=1.0).run()
"""


def stored_web(cfg: Config, n: int, *, seed: int, shards: int) -> tuple[Graph, list[Shard]]:
    """A random web of ``n`` pages written to the store, read back and cut in shards."""
    pages, links = random_web(n, seed=seed)
    put_web(cfg.store(), pages, links)
    graph = load_graph(cfg.store())
    return graph, cut_shards(graph.src, graph.dst, graph.n, shards)


def _worker_of(client, keys: Keys, pid: int) -> str | None:
    for wid, record in client.hgetall(keys.workers).items():
        if json.loads(record).get("pid") == pid:
            return wid.decode()
    return None


def _kill_while_holding_a_task(client, keys: Keys, victim: subprocess.Popen, iteration: int) -> int:
    """SIGKILL ``victim`` while it holds a map task of ``iteration``; return how many
    tasks it held."""
    q = PhaseQueues(client, keys, "pagerank")
    deadline = time.monotonic() + 60
    worker = None
    while time.monotonic() < deadline:
        worker = worker or _worker_of(client, keys, victim.pid)
        if worker and client.llen(q.srq.processing_key(worker)):
            victim.send_signal(signal.SIGSTOP)  # frozen: it can no longer ack
            tasks = client.lrange(q.srq.processing_key(worker), 0, -1)
            if any(MapTask.decode(t).iteration == iteration for t in tasks):
                held = len(tasks)
                victim.kill()
                victim.wait()
                return held
            victim.send_signal(signal.SIGCONT)
    raise AssertionError("the victim never held a task")


@pytest.mark.slow
@pytest.mark.parametrize("iteration", [0, 3], ids=["in the load round", "mid-iteration"])
def test_a_slave_killed_holding_a_task_changes_nothing(
    redis_url, redis_client, keys, tmp_path, python, iteration
) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    graph, shards = stored_web(cfg, 20_000, seed=4, shards=8)
    params = RankParams(iterations=40)
    with LocalSlaves(cfg, 1, ["pagerank"]):
        clean = RankMaster(redis_client, keys).run(graph, shards, params)
    assert clean.requeued == 0

    victim = subprocess.Popen([python, "-c", VICTIM, str(iteration)], env=cfg.child_env())
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
        held = _kill_while_holding_a_task(redis_client, keys, victim, iteration)
        with LocalSlaves(cfg, 1, ["pagerank"]):
            t.join(timeout=120)
    finally:
        if victim.poll() is None:
            victim.kill()
    assert not t.is_alive() and "error" not in outcome, outcome
    result = outcome["result"]
    assert held >= 1 and result.requeued >= held
    assert len(result.reports) == 40
    assert result.load is not None and result.load.loaded == len(shards)
    assert np.array_equal(result.ranks, clean.ranks)  # bit for bit: each shard summed once
    q = PhaseQueues(redis_client, keys, "pagerank")
    assert len(q.srq) == 0 and len(q.nrq) == 0
    cfg.close()


@pytest.mark.slow
def test_slaves_that_missed_the_load_round_load_shards_as_they_claim_them(
    redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    graph, shards = stored_web(cfg, 5_000, seed=8, shards=6)
    params = RankParams(iterations=12)
    with thread_slaves(cfg, 2):
        clean = RankMaster(redis_client, keys).run(graph, shards, params)
    assert clean.load is not None and clean.load.loaded == 6

    # no slave answers within the stall timeout: the round gives up, the
    # iterations wait for slaves, which load every shard as they claim it
    loads = []
    master = RankMaster(redis_client, keys, reap_interval=0.1, on_load=loads.append)
    master.collector.stall_timeout = 0.5
    outcome: dict = {}
    t = threading.Thread(target=lambda: outcome.update(result=master.run(graph, shards, params)))
    t.start()
    deadline = time.monotonic() + 30
    while not loads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loads and loads[0].loaded == 0 and loads[0].shards == 6
    with thread_slaves(cfg, 2) as late:
        t.join(timeout=60)
        stats = [s.handlers[0].stats() for s in late]
    assert not t.is_alive() and np.array_equal(outcome["result"].ranks, clean.ranks)
    assert sum(st["shard_loads"] for st in stats) >= 6

    # the slave of the load round leaves before the first iteration; one that
    # never saw the round does every iteration
    first = Slave.from_config(cfg, [RankHandler.from_config(cfg)], block_timeout=0.1)
    runner = threading.Thread(target=first.run, daemon=True)
    runner.start()
    joined: list[Slave] = []

    def swap(report) -> None:
        first.stopping.set()
        runner.join(timeout=10)
        joined.append(Slave.from_config(cfg, [RankHandler.from_config(cfg)], block_timeout=0.1))
        threading.Thread(target=joined[0].run, daemon=True).start()

    result = RankMaster(redis_client, keys, on_load=swap).run(graph, shards, params)
    joined[0].stopping.set()
    assert result.load is not None and result.load.loaded == 6
    assert first.handlers[0].stats()["shard_loads"] == 6
    assert first.handlers[0].stats()["shards"] == 0  # loaded, computed nothing
    assert joined[0].handlers[0].stats()["shard_loads"] == 6
    assert np.array_equal(result.ranks, clean.ranks)
    cfg.close()


def test_the_master_gives_up_when_its_slaves_are_gone(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    graph = load_graph(cfg.store())
    master = RankMaster(cfg.redis(), cfg.keys, reap_interval=0.1, slaves_alive=lambda: False)
    with pytest.raises(PageRankError, match="every slave"):
        master.run(graph, cut_shards(graph.src, graph.dst, graph.n, 2), RankParams())
    # it cleaned up after itself: no shards, vector, tasks or lock left behind; the tag
    # counter stays, and the lease's last acquirer (who may take a lapsed lease back)
    left = set(cfg.redis().keys(f"{cfg.keys.prefix}:pagerank:*"))
    acquirer = lease_acquirer_key(cfg.keys.master_lease("pagerank"))
    assert left == {cfg.keys.trq("pagerank").encode(), acquirer.encode()}
    cfg.close()


def test_a_second_master_of_the_job_is_refused(redis_url, redis_client, keys, tmp_path) -> None:
    redis_client.set(keys.master_lease("pagerank"), "master-99", px=5000)
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    graph = load_graph(cfg.store())
    with pytest.raises(LeaseHeld, match=r"another pagerank master \(master-99\)"):
        RankMaster(redis_client, keys).run(
            graph, cut_shards(graph.src, graph.dst, 6, 1), RankParams()
        )
    assert redis_client.get(keys.master_lease("pagerank")) == b"master-99"
    cfg.close()


def test_a_corrupt_shard_fails_the_run_with_a_clear_error(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    graph = load_graph(cfg.store())
    master = RankMaster(cfg.redis(), cfg.keys)
    publish = master._publish

    def corrupt(version, *rest) -> None:
        publish(version, *rest)
        key = cfg.keys.rank_shard(version, 0)
        cfg.redis().delete(key)
        cfg.redis().rpush(key, b'{"v":1,"kind":"shard"}', b"xx")

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
        [python, "-m", "srcrawl.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
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


@pytest.mark.slow
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
    handler = RankHandler.from_config(cfg)
    bad, gone = handler.handle([b"garbage", MapTask(41, 1).encode()])
    assert decode(bad).kind == "error" and decode(bad).payload == b"garbage"
    assert decode(gone).kind == "stale" and decode(gone).get("iteration") == 1
    assert handler.stats()["stale"] == 1
    cfg.close()


def _publish_cycle(client, keys: Keys, version: int) -> tuple[list, np.ndarray]:
    """Header, 2 shards and first pieces of 0→1, 0→2, 1→2, 2→0 (node 3 dangles), as a
    master publishes them; returns the shards and the next ranks worked out by hand."""
    src, dst = np.array([0, 0, 1, 2], np.int32), np.array([1, 2, 2, 0], np.int32)
    shards = cut_shards(src, dst, 4, 2)
    assert len(shards) == 2
    header = GraphHeader(0.5, np.array([0, shards[1].lo, 4]), np.array([2, 1, 1, 0]))
    client.set(keys.rank_graph(version), header.pack(version))
    first = np.array([0.4, 0.3, 0.2, 0.1])
    for s in shards:
        client.rpush(keys.rank_shard(version, s.index), *s.pack(version))
        client.set(keys.rank_piece(version, 1, s.index), bytes(pack_vector(first[s.lo : s.hi])))
    client.sadd(keys.rank_unclaimed(version, 1), *[s.index for s in shards])
    # x = [0.2, 0.3, 0.2, 0]; sums = [0.2, 0.2, 0.5, 0]; constant = (0.5·0.1 + 0.5) / 4
    return shards, np.array([0.1, 0.1, 0.25, 0.0]) + 0.1375


def _claim_and_check(handler, task, shards, expected, redis_client, keys) -> int:
    """One task of iteration 1 of version 5: the shard it claimed, its delta and piece checked."""
    old = np.array([0.4, 0.3, 0.2, 0.1])
    [answer] = handler.handle([task])
    done = ShardDone.from_message(decode(answer))
    s = shards[done.shard]
    assert redis_client.get(keys.rank_piece(5, 2, s.index)) is None  # not before flush
    handler.flush()
    span = slice(s.lo, s.hi)
    assert done.delta == pytest.approx(np.abs(expected[span] - old[span]).sum(), rel=1e-15)
    piece = np.frombuffer(redis_client.get(keys.rank_piece(5, 2, s.index)), dtype="<f8")
    np.testing.assert_allclose(piece, expected[span], rtol=1e-15)
    assert redis_client.ttl(keys.rank_piece(5, 2, s.index)) > 0
    return s.index


@pytest.mark.slow
def test_a_task_claims_a_shard_and_writes_its_piece_while_the_iteration_is_open(
    redis_url, redis_client, keys, tmp_path, monkeypatch
) -> None:
    from srcrawl.core.embedded import free_port

    # one slave takes every shard here, held or not (see the test after this one)
    monkeypatch.setattr("srcrawl.pagerank.slave.DEFAULT_PAGERANK_STEAL_AFTER", 0.0)
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    shards, expected = _publish_cycle(redis_client, keys, 5)
    handler = RankHandler.from_config(cfg)
    task = MapTask(5, 1).encode()
    claimed = [
        _claim_and_check(handler, task, shards, expected, redis_client, keys) for _ in shards
    ]
    assert sorted(claimed) == [0, 1] and handler.stats()["pieces_read"] == 2
    assert handler.handle([task]) == []  # every shard of the iteration is taken
    # a shard offered again (its slave died) is computed again: the same bytes
    stored = redis_client.get(keys.rank_piece(5, 2, 1))
    redis_client.sadd(keys.rank_unclaimed(5, 1), 1)
    [again] = handler.handle([task])
    handler.flush()
    assert ShardDone.from_message(decode(again)).shard == 1
    assert redis_client.get(keys.rank_piece(5, 2, 1)) == stored
    # the next iteration starts from the pieces this slave computed: nothing to read;
    # it claims the shard it computed last before any other
    redis_client.sadd(keys.rank_unclaimed(5, 2), 0, 1)
    [nxt] = handler.handle([MapTask(5, 2).encode()])
    assert ShardDone.from_message(decode(nxt)).shard in (0, 1)
    assert handler.stats()["pieces_read"] == 2 and handler.stats()["shard_loads"] == 2
    handler.flush()
    # another slave prefers the shard it holds
    other = RankHandler.from_config(cfg)
    redis_client.sadd(keys.rank_unclaimed(5, 1), 1)
    other.handle([task])
    redis_client.sadd(keys.rank_unclaimed(5, 1), 0, 1)
    assert [ShardDone.from_message(decode(a)).shard for a in other.handle([task])] == [1]
    other.flush()
    # a write that keeps failing is tried a few times, then left for the next flush
    redis_client.sadd(keys.rank_unclaimed(5, 1), 1)
    handler.bulk = TransientWriter(redis.Redis(port=free_port(), socket_connect_timeout=1))
    handler.handle([task])
    with pytest.raises(redis.ConnectionError):
        handler.flush()
    assert handler.stats()["retries"] == 3
    # once the master closed the iteration (deleted its pieces) nothing is written
    handler.bulk = TransientWriter(redis_client)
    redis_client.delete(*[keys.rank_piece(5, i, s.index) for i in (1, 2, 3) for s in shards])
    handler.flush()
    assert redis_client.get(keys.rank_piece(5, 2, 1)) is None
    assert handler.stats()["late"] == 1
    # a slave which has none of the pieces finds the iteration gone
    redis_client.sadd(keys.rank_unclaimed(5, 1), 1)
    [gone] = RankHandler.from_config(cfg).handle([task])
    assert decode(gone).kind == "stale" and "gone" in decode(gone).get("reason")
    cfg.close()


def test_a_slave_leaves_the_shards_others_hold_to_them_for_a_while(
    redis_url, redis_client, keys, tmp_path, monkeypatch
) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    _publish_cycle(redis_client, keys, 6)
    srq, unclaimed = keys.srq("pagerank"), keys.rank_unclaimed(6, 1)
    task = MapTask(6, 1).encode()
    a, b = RankHandler.from_config(cfg), RankHandler.from_config(cfg)
    [x] = [ShardDone.from_message(decode(m)).shard for m in a.handle([task])]
    [y] = [ShardDone.from_message(decode(m)).shard for m in b.handle([task])]
    assert {x, y} == {0, 1}
    # only a's shard is left: b hands its task back rather than read that shard
    redis_client.sadd(unclaimed, x)
    assert b.handle([task]) == []
    assert redis_client.lrange(srq, 0, -1) == [task] and redis_client.sismember(unclaimed, x)
    assert b.stats()["deferred"] == 1 and b.stats()["shard_loads"] == 1
    assert [
        ShardDone.from_message(decode(m)).shard for m in a.handle(redis_client.lpop(srq, 1))
    ] == [x]
    # past the steal delay (its holder died, or is slow) it takes the shard
    redis_client.sadd(unclaimed, x)
    assert b.handle([task]) == [] and redis_client.llen(srq) == 1
    monkeypatch.setattr("srcrawl.pagerank.slave.DEFAULT_PAGERANK_STEAL_AFTER", 0.0)
    assert [ShardDone.from_message(decode(m)).shard for m in b.handle([task])] == [x]
    assert b.stats()["shard_loads"] == 2 and b.stats()["deferred"] == 2
    # in the load round no shard is anyone's: a takes y, loads it, computes nothing
    monkeypatch.setattr("srcrawl.pagerank.slave.DEFAULT_PAGERANK_STEAL_AFTER", 60.0)
    redis_client.sadd(keys.rank_unclaimed(6, 0), y)
    [loaded] = a.handle([MapTask(6, 0).encode()])
    assert ShardDone.from_message(decode(loaded)) == ShardDone(6, 0, y, 0.0)
    assert a.stats()["shard_loads"] == 2 and a.stats()["shards"] == 2
    a.flush()
    assert redis_client.get(keys.rank_piece(6, 1, y)) is not None  # the first ranks only
    assert redis_client.get(keys.rank_piece(6, 2, y)) is None
    cfg.close()


class Clumsy(RankHandler):
    """A slave whose every ``fail_every``-th write of a piece fails for a passing reason
    (a server busy with a script: BUSY). A lost connection never gets here: the slave's
    client waits Redis out itself."""

    fail_every = 2

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        super().__init__(client, keys)
        self.writes = 0
        write = self.bulk.set_while

        def flaky(*args, **kwargs):
            self.writes += 1
            if self.writes % self.fail_every == 0:
                raise redis.ResponseError("BUSY Redis is busy running a script")
            return write(*args, **kwargs)

        self.bulk.set_while = flaky


class Broken(Clumsy):
    fail_every = 1


@pytest.mark.slow
def test_a_piece_write_is_tried_again_then_fails_the_run_clearly(redis_url, keys, tmp_path) -> None:
    cfg = sqlite_cfg(redis_url, keys, tmp_path)
    put_web(cfg.store(), SIX, SIX_LINKS)
    with thread_slaves(cfg, 1, handler=Clumsy) as slaves:
        result = rank_job(cfg, CONVERGED, RankOptions(shards=3))
        retries = slaves[0].handlers[0].stats()["retries"]
    assert result.converged and retries >= len(result.reports)
    assert np.abs(result.ranks - six_expected()).sum() <= 1e-9
    graph = load_graph(cfg.store())
    with (
        thread_slaves(cfg, 1, handler=Broken),
        pytest.raises(PageRankError, match=r"(?s)a slave failed in iteration 1: .*BUSY"),
    ):
        rank_graph(cfg, graph, RankParams(), shards=2)
    cfg.close()


def test_only_a_dead_worker_of_this_phase_makes_the_master_offer_shards_again(
    redis_client, keys
) -> None:
    # A task of this phase may have claimed a shard, so its death puts every
    # missing shard up again; a dead slave of another phase (the job's crawl)
    # gets its tasks back and costs no offer.
    from srcrawl.pagerank.master import Tally
    from srcrawl.queues.workers import Worker

    rank_q, crawl_q = (
        PhaseQueues(redis_client, keys, "pagerank"),
        PhaseQueues(redis_client, keys, "crawl"),
    )
    master = RankMaster(redis_client, keys)
    master.lease.acquire()  # its offers are fenced by the lease
    empty = np.zeros(0, np.int32)
    tally = Tally(7, 2, [Shard(i, 0, 0, empty, empty) for i in range(3)])
    result = RankResult(np.zeros(0, np.int64), np.zeros(0))

    Worker(redis_client, keys, "crawler", [crawl_q.srq], ttl=0.1).beat()
    crawl_q.srq.push([b"a crawl task"])
    crawl_q.srq.pop("crawler", 1)
    time.sleep(0.3)
    master.collector.reap(tally, result)
    assert len(crawl_q.srq) == 1 and len(rank_q.srq) == 0 and result.requeued == 0

    Worker(redis_client, keys, "ranker", [rank_q.srq], ttl=0.1).beat()
    rank_q.srq.push([MapTask(7, 2).encode()])
    rank_q.srq.pop("ranker", 1)
    time.sleep(0.3)
    master.collector.reap(tally, result)
    assert result.requeued == 1
    assert len(rank_q.srq) == 1 + 3  # its task back, and one task per missing shard
    assert redis_client.smembers(keys.rank_unclaimed(7, 2)) == {b"0", b"1", b"2"}
