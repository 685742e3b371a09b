"""``srcrawl bench outage``: ``pagerank`` and ``index`` with their embedded Redis SIGKILLed
mid-run, many runs in a row.

Each run is the real command in a process of its own, as a user runs it, with
two local slaves, on a home of its own (so its own embedded Redis, AOF on) and a
store made for it: a synthetic power-law web for ``pagerank``, pages of Chinese
and English text for ``index``. Once the run is under way (PageRank: past an
iteration drawn for the run; the index: once its slaves have taken a drawn
number of its tasks, some still queued) the embedded redis-server is SIGKILLed,
and kept from coming back for a time drawn for the run (up to ``down_max``
seconds: the lock under which the command restarts it is held meanwhile, as a
slow restart on a loaded machine would: a few seconds outlast a Redis client's
own retries, while ten or more would outlast the masters' leases). The command
must restart it, wait the outage out in the master and in every slave, and
finish as if nothing happened: exit 0, and an exact result. PageRank's ranks
equal networkx's on the same graph (L1 ≤ 1e-6); the index holds every page
exactly once and the store has none left to index. The figure that matters is
how many runs pass.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from srcrawl.core import embedded
from srcrawl.core.urls import fingerprint
from srcrawl.settings.config import Config

PHASES = ("pagerank", "index")
RANK_PAGES = 6000
RANK_LINKS = 30_000
RANK_TOL = 1e-6
"""The largest L1 distance from networkx's ranks a run may have."""
RANK_FLAGS = ["--iterations", "1000", "--tol", "0", "--slaves", "2", "--shards", "4"]
"""A thousand short iterations, each a bulk write of every shard's piece: an outage
falls on one of them or on the acks around it."""
INDEX_PAGES = 60
INDEX_REPEAT = 1500
"""Copies of the sentence in a page: jieba takes a while, so the pass is killed mid-way."""
INDEX_FLAGS = ["--slaves", "2", "--batch", "2"]
SENTENCE = "我来到北京清华大学，他来到了网易杭研大厦。The quick brown fox. "
DOWN_MAX = 6.0
"""The longest a run keeps the killed server from being started again, in seconds."""
RUN_TIMEOUT = 600.0
KILL_TIMEOUT = 120.0


@dataclass
class OutageRun:
    run: int
    phase: str
    exit_code: int
    killed: bool
    """The embedded redis-server was SIGKILLed while the command ran."""
    restarted: bool
    """A new redis-server was started (another pid) and the command said Redis was back."""
    exact: bool
    down: float
    """Seconds the killed server was kept from being started again."""
    detail: str
    """What was checked: the L1 distance from networkx, or pages missing and doubled."""
    seconds: float
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed and self.restarted and self.exact


def _env(directory: Path, job: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    env.update(
        SRCRAWL_JOB=job,
        SRCRAWL_HOME=str(directory / "home"),  # no SRCRAWL_REDIS_URL: the embedded Redis
        SRCRAWL_DB_URL=f"sqlite:///{directory}/store.db",
        PYTHONUNBUFFERED="1",  # its iteration lines as they come, not when it exits
    )
    return env


class _Lines:
    """The lines a process writes to a pipe, read by a thread as they come."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def join(self) -> str:
        self._thread.join(timeout=30)
        return "\n".join(self.lines)


# -- the stores ------------------------------------------------------------------
def rank_reference(cfg: Config, seed: int) -> dict[int, float]:
    """Store the run's synthetic web; networkx's ranks of it (fingerprint → rank)."""
    import networkx as nx  # the test extra: pip install 'srcrawl[test]'

    from srcrawl.benchmarks.pagerank import synthetic_web, write_web

    web = synthetic_web(RANK_PAGES, RANK_LINKS, seed=seed)
    write_web(cfg.store(), web)
    fps = web.fps.tolist()
    g = nx.DiGraph()
    g.add_nodes_from(fps)
    g.add_edges_from(
        (fps[s], fps[d]) for s, d in zip(web.src.tolist(), web.dst.tolist(), strict=True)
    )
    return nx.pagerank(g, alpha=0.85, tol=1e-12, max_iter=100_000)


def index_pages(cfg: Config) -> list[int]:
    """Store the pages the index run indexes; their fingerprints."""
    from srcrawl.sql.pages import Page

    urls = [f"http://127.0.0.1:9/outage/{i}" for i in range(INDEX_PAGES)]
    cfg.store().put_pages(
        Page(
            fp=fingerprint(u),
            url=u,
            host="127.0.0.1:9",
            fetched_at=1.0,
            title=f"page {i}",
            text=SENTENCE * INDEX_REPEAT + f" page{i}",
        )
        for i, u in enumerate(urls)
    )
    return [fingerprint(u) for u in urls]


# -- the checks ------------------------------------------------------------------
def ranks_distance(cfg: Config, reference: dict[int, float]) -> float:
    """L1 distance between the stored ranks and ``reference`` (inf when a page lacks one)."""
    got = cfg.store().page_ranks(list(reference))
    if got.keys() != reference.keys():
        return float("inf")
    return sum(abs(got[fp] - reference[fp]) for fp in reference)


def indexed_fps(cfg: Config) -> list[int]:
    """Every live document's page, sorted (a page indexed twice shows twice)."""
    import tantivy

    from srcrawl.indexer.engine import IndexReader

    reader = IndexReader(cfg.index_path)
    reader.reload()
    searcher = reader.searcher()
    hits = searcher.search(tantivy.Query.all_query(), 1_000_000).hits
    return sorted(searcher.fast_field_values("fp", [a for _s, a in hits]))


# -- one run ---------------------------------------------------------------------
def index_result(cfg: Config, fps: list[int]) -> tuple[bool, str]:
    """Whether the index holds every page of ``fps`` once and none is left; what it holds."""
    got = indexed_fps(cfg)
    doubled = len(got) - len(set(got))
    left = len(cfg.store().unindexed_pages(None, len(fps)))
    exact = not (doubled or left) and set(got) == set(fps)
    return exact, f"{len(set(got))}/{len(fps)} pages, {doubled} doubled, {left} unindexed"


def _kill_server(home: Path, down: float) -> int:
    """SIGKILL the embedded server and keep it down ``down`` seconds; its pid."""
    with embedded.locked(home):
        pid = int((home / "redis.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        time.sleep(down)
    return pid


class _Progress:
    """How far a run is, to kill its server mid-run: PageRank past iteration ``at``; the
    index once its slaves have taken ``at`` tasks and some are still queued (the store's
    marks would not do: the master merges in halving steps, and one of them may be the
    whole pass, which leaves no work for the outage to fall on)."""

    def __init__(self, phase: str, cfg: Config, at: int) -> None:
        self.phase, self.cfg, self.at = phase, cfg, at
        self.peak = 0
        self._client: redis.Redis | None = None

    def under_way(self, lines: list[str]) -> bool:
        if self.phase == "pagerank":
            return any(line.startswith(f"iteration {self.at:3d} ") for line in lines)
        if self._client is None:
            url = (self.cfg.home / "redis.url").read_text().strip()
            if not url.startswith("redis://"):
                return False  # the command is writing it yet
            self._client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            queued = int(self._client.llen(self.cfg.keys.srq("index")))
        except redis.RedisError:
            return False
        self.peak = max(self.peak, queued)
        return 0 < queued <= self.peak - self.at

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _run_and_kill(
    phase: str, flags: list[str], env: dict[str, str], progress: _Progress, down: float
) -> tuple[int, int | None, str]:
    """Run ``phase``; once ``progress`` says it is under way, SIGKILL the embedded server
    and keep it down ``down`` seconds. (exit code, the pid killed or None, stderr)."""
    home = Path(env["SRCRAWL_HOME"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "srcrawl.app.cli", phase, *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = _Lines(proc.stdout), _Lines(proc.stderr)
    killed = None
    try:
        deadline = time.monotonic() + KILL_TIMEOUT
        while proc.poll() is None and time.monotonic() < deadline:
            if (home / "redis.url").exists() and progress.under_way(out.lines):
                killed = _kill_server(home, down)
                break
            time.sleep(0.02)
        code = proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        progress.close()
    out.join()
    return code, killed, err.join()


def one_run(
    run: int,
    phase: str,
    directory: Path,
    *,
    seed: int = 0,
    down_max: float = DOWN_MAX,
    down: float | None = None,
) -> OutageRun:
    """Run ``phase`` in ``directory`` (empty) with its embedded Redis killed mid-run and
    kept down up to ``down_max`` seconds (``down``: that long, not a drawn time)."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}")
    rng = random.Random(seed * 1000 + run)
    env = _env(directory, f"outage-{phase}-{run}")
    cfg = Config.load(env=env)
    home = directory / "home"
    try:
        if phase == "pagerank":
            reference = rank_reference(cfg, seed=seed + run)
            at, flags = rng.randint(3, 900), RANK_FLAGS
        else:
            fps = index_pages(cfg)
            at, flags = rng.randint(1, INDEX_PAGES // 5), INDEX_FLAGS  # tasks of 2 pages
        drawn = round(rng.uniform(0.0, down_max), 1)
        down = drawn if down is None else down
        t0 = time.monotonic()
        code, killed, stderr = _run_and_kill(phase, flags, env, _Progress(phase, cfg, at), down)
        seconds = time.monotonic() - t0
        restarted = (
            killed is not None
            and (home / "redis.pid").exists()
            and int((home / "redis.pid").read_text().strip()) != killed
            and "Redis is back" in stderr
        )
        if phase == "pagerank":
            distance = ranks_distance(cfg, reference)
            exact, detail = distance <= RANK_TOL, f"L1 {distance:.1e}"
        else:
            exact, detail = index_result(cfg, fps)
        result = OutageRun(
            run, phase, code, killed is not None, restarted, exact, down, detail, seconds
        )
        if not result.ok:  # what the command said, to tell why
            result.stderr_tail = "\n".join(stderr.splitlines()[-15:])
        return result
    finally:
        cfg.close()
        embedded.stop(home)


def run_outage_benchmark(
    phase: str,
    runs: int,
    *,
    say: Callable[[str], None] = lambda _s: None,
    on_run: Callable[[OutageRun], None] = lambda _r: None,
    seed: int = 0,
    down_max: float = DOWN_MAX,
) -> list[OutageRun]:
    """``runs`` runs of ``phase`` in a row, each in a temporary directory of its own;
    ``on_run`` is told of each as it ends."""
    done: list[OutageRun] = []
    for run in range(runs):
        passed = sum(r.ok for r in done)
        say(f"{phase}: run {run + 1} of {runs} ({passed} of {len(done)} passed so far)")
        directory = Path(tempfile.mkdtemp(prefix=f"srcrawl-outage-{phase}-"))
        try:
            done.append(one_run(run, phase, directory, seed=seed, down_max=down_max))
            on_run(done[-1])
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return done


def render(runs: list[OutageRun]) -> str:
    lines = ["phase       run  exit  killed  down s  restarted  exact  seconds  result"]
    for r in runs:
        lines.append(
            f"{r.phase:<10}{r.run:>4}  {r.exit_code:>4}  {_yes(r.killed):>6}  {r.down:>6.1f}  "
            f"{_yes(r.restarted):>9}  {_yes(r.exact):>5}  {r.seconds:>7.1f}  {r.detail}"
        )
    for r in runs:
        if r.stderr_tail:
            lines.append(f"{r.phase} run {r.run} exited {r.exit_code}:\n{r.stderr_tail}")
    for phase in dict.fromkeys(r.phase for r in runs):
        mine = [r for r in runs if r.phase == phase]
        codes = sorted({r.exit_code for r in mine})
        lines.append(
            f"{phase}: {sum(r.ok for r in mine)} of {len(mine)} runs passed "
            f"(exit 0, Redis killed and restarted, exact); exit codes seen: {codes}"
        )
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
