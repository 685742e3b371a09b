"""Process lifecycle of local runs: signals, parent death, burst slaves, Redis outages.

Real processes and real signals: `srcrawl crawl` / `srcrawl demo` as a user
runs them, the slaves and master they start, and a Redis server killed
under them. Leftover processes are looked for with psutil.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from srcrawl.core import embedded
from srcrawl.core.defaults import DEFAULT_RETRY_BACKOFF
from srcrawl.core.urls import host_of
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb

CLI = [sys.executable, "-m", "srcrawl.app.cli"]
FAST = [
    "--delay",
    "0.05",
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    "1",
    "--robots-defer",
    "0.3",
    "--threads",
    "4",
]


@pytest.fixture(scope="module")
def web():
    # slow enough that a crawl of depth 3 is still running when it is signalled
    with TestWeb.generate(hosts=3, pages=25, seed=5, latency_ms=40) as tw:
        yield tw


def expected(tw: TestWeb, seeds: list[str], depth: int) -> dict[str, int]:
    scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=depth))
    return tw.web.expected_crawl(seeds, depth, lambda url: scope.reject(url, 0) is None)


def env_for(tmp_path: Path, job: str, redis_url: str | None, *, db: bool = True) -> dict[str, str]:
    """The environment of a command; without ``redis_url`` it starts the embedded Redis."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    env.update(SRCRAWL_JOB=job, SRCRAWL_HOME=str(tmp_path / "home"))
    if db:
        env["SRCRAWL_DB_URL"] = f"sqlite:///{tmp_path}/crawl.db"
    if redis_url:
        env["SRCRAWL_REDIS_URL"] = redis_url
    return env


def start(
    args: list[str], env: dict[str, str], *, sigint_ignored: bool = False
) -> subprocess.Popen:
    """A command in its own session and process group, as a terminal gives it.

    ``sigint_ignored``: as a shell starts a background job (``srcrawl crawl &``).
    """

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen(
        [*CLI, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def leftovers(procs: list[psutil.Process], timeout: float = 30) -> list[psutil.Process]:
    """The processes of ``procs`` still alive (not zombies) after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def wait_for_pages(cfg: Config, n: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    client = cfg.redis()
    deadline = time.monotonic() + timeout
    while int(client.hget(cfg.keys.stats("crawl"), "pages") or 0) < n:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the crawl made no progress"
        time.sleep(0.05)


def kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "to_group", "background", "code"),
    [
        (signal.SIGINT, True, False, 130),
        (signal.SIGINT, True, True, 130),
        (signal.SIGINT, False, True, 130),
        (signal.SIGTERM, False, False, 143),
    ],
    ids=["ctrl-c", "ctrl-c-background-job", "sigint-to-parent", "sigterm-to-parent"],
)
def test_a_signalled_crawl_stops_every_child_and_says_how_to_resume(
    web, redis_url, keys, tmp_path, sig, to_group, background, code
) -> None:
    env = env_for(tmp_path, keys.job, redis_url)
    args = ["crawl", *web.seed_urls, "--depth", "3", "--slaves", "2", *FAST]
    crawl = start(args, env, sigint_ignored=background)
    cfg = Config.load(env=env)
    children: list[psutil.Process] = []
    try:
        wait_for_pages(cfg, 5, crawl)
        children = descendants(crawl.pid)
        assert len(children) == 3  # the master and two slaves
        if to_group:
            os.killpg(crawl.pid, sig)
        else:
            os.kill(crawl.pid, sig)
        _, err = crawl.communicate(timeout=60)
        assert crawl.returncode == code, err[-2000:]
        assert f"srcrawl --job {keys.job} crawl --resume" in err
        assert leftovers(children, timeout=5) == []
        # each child left cleanly: no live worker, no master lock
        from srcrawl.queues.workers import workers

        client = cfg.redis()
        assert [w.id for w in workers(client, cfg.keys) if w.alive] == []
        assert client.get(cfg.keys.master_lease("crawl")) is None
    finally:
        if crawl.poll() is None:
            crawl.kill()
        kill_all(children)
        cfg.close()


@pytest.mark.slow
def test_the_children_of_a_killed_crawl_stop_too(web, redis_url, keys, tmp_path) -> None:
    env = env_for(tmp_path, keys.job, redis_url)
    crawl = start(["crawl", *web.seed_urls, "--depth", "3", "--slaves", "2", *FAST], env)
    cfg = Config.load(env=env)
    children: list[psutil.Process] = []
    try:
        wait_for_pages(cfg, 5, crawl)
        children = descendants(crawl.pid)
        assert len(children) == 3
        crawl.kill()
        crawl.wait()
        assert leftovers(children) == []
        # they stopped as if told to: finished their batch and handed back the rest
        from srcrawl.queues.workers import workers

        assert [w.id for w in workers(cfg.redis(), cfg.keys) if w.alive] == []
        # and the crawl resumes to the exact reachable set
        r = subprocess.run(
            [*CLI, "crawl", "--resume", "--slaves", "2"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        pages = cfg.store().iter_pages()
        assert {p.url: p.depth for p in pages} == expected(web, web.seed_urls, 3)
    finally:
        kill_all(children)
        cfg.close()


@pytest.mark.slow
def test_a_terminated_demo_leaves_nothing_behind(tmp_path) -> None:
    env = env_for(tmp_path, "demo", None, db=False)
    demo = start(["demo", "--slaves", "2"], env)
    found: list[psutil.Process] = []
    try:
        # wait until its crawl step runs: the demo, its test web, the crawl, a master, 2 slaves
        deadline = time.monotonic() + 90
        while not _crawl_step_runs(demo.pid, slaves=2):
            assert demo.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        found = descendants(demo.pid)
        os.kill(demo.pid, signal.SIGTERM)
        _, err = demo.communicate(timeout=60)
        assert demo.returncode == 143, err[-2000:]
        assert leftovers(found) == []
    finally:
        if demo.poll() is None:
            demo.kill()
        kill_all(found)
        embedded.stop(tmp_path / "home")


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _crawl_step_runs(demo_pid: int, slaves: int) -> bool:
    """The demo's `srcrawl crawl` step has its master and ``slaves`` slaves running."""
    try:
        steps = [p for p in psutil.Process(demo_pid).children() if " crawl " in _cmdline(p)]
        return any(len(step.children()) >= 1 + slaves for step in steps)
    except psutil.Error:
        return False


@pytest.mark.slow
def test_the_demo_shows_progress_and_how_to_look_at_the_result(tmp_path) -> None:
    env = env_for(tmp_path, "demo", None, db=False)
    try:
        r = subprocess.run(
            [*CLI, "demo", "--slaves", "2"], env=env, capture_output=True, text=True, timeout=300
        )
        if r.returncode == 0:
            _the_demo_s_serve_command_opens_its_result(r.stdout, env, tmp_path)
    finally:
        embedded.stop(tmp_path / "home")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "pages " in r.stderr and "pages/s" in r.stderr  # the crawl's progress line
    assert "iteration" in r.stdout  # what the pagerank step printed
    # failed URLs back off side by side, not holding their host: held, the web waits out
    # their back-offs (2 s, then 4 s) one after another, idle for some 30 s of the crawl
    # in all; side by side about 10 s. The bound sits between, far from both: a busy
    # machine stretches the idle time by seconds, not by half the crawl (the longest
    # stretch, 2 s against 4 s, left a busy machine no room)
    idle = re.search(
        r"the web had nothing in flight for ([\d.]+) s of it, the longest [\d.]+ s", r.stdout
    )
    assert idle and float(idle[1]) < 10 * DEFAULT_RETRY_BACKOFF, r.stdout[-3000:]
    db = f"sqlite:///{(tmp_path / 'home' / 'demo.db')}"
    assert f"srcrawl --job demo --db-url {db} status" in r.stdout
    assert f"srcrawl --job demo --db-url {db} search " in r.stdout
    assert "`srcrawl down` stops it" in r.stdout


def _the_demo_s_serve_command_opens_its_result(
    out: str, env: dict[str, str], tmp_path: Path
) -> None:
    """A first run (#44): the demo prints the `serve` command of its job and store, which
    finds what the demo's search found; a bare `srcrawl serve` (job default, the default
    store) says at start that it has no index and names that command."""
    db = f"sqlite:///{(tmp_path / 'home' / 'demo.db')}"
    command = f"srcrawl --job demo --db-url {db} serve"
    assert command in out, out[-2000:]
    query = re.search(r"srcrawl --job demo --db-url \S+ search (.+)", out)
    assert query, out[-2000:]
    bare = {k: v for k, v in env.items() if k != "SRCRAWL_JOB"}
    said = _serve_until_healthy(["serve"], bare)
    assert "warning: job 'default' has no index" in said and command in said, said
    args = command.split()[1:]
    said = _serve_until_healthy(args, env, q=query[1].strip("'"))
    assert "warning" not in said, said


def _serve_until_healthy(args: list[str], env: dict[str, str], q: str | None = None) -> str:
    """`srcrawl ARGS --port P --workers 1` until /healthz answers (and, given ``q``, until
    a search for it has hits); what it printed."""
    import socket

    import requests

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = start([*args, "--port", str(port), "--workers", "1"], env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the portal did not start"
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(url + "/healthz", timeout=10).status_code == 200:
                    break
            time.sleep(0.2)
        if q is not None:
            found = requests.get(url + "/api/search", params={"q": q}, timeout=30).json()
            assert found["hits"] and found["matches"] >= len(found["hits"]), found
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    return stdout + stderr


@pytest.mark.slow
def test_a_burst_slave_stays_until_the_crawl_has_no_work_left(
    web, redis_url, keys, tmp_path
) -> None:
    env = env_for(tmp_path, keys.job, redis_url)
    policy = [a for a in FAST if a not in ("--threads", "4")]
    master = start(["master", "start", *web.seed_urls, "--depth", "1", *policy], env)
    try:
        # started at once: srq is empty until the master has scheduled the seeds
        slave = subprocess.run(
            [*CLI, "slave", "start", "--burst", "--threads", "4"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert slave.returncode == 0, slave.stderr[-2000:]
        _, err = master.communicate(timeout=30)
        assert master.returncode == 0, err[-2000:]
    finally:
        if master.poll() is None:
            master.kill()
            master.wait()
    cfg = Config.load(env=env)
    assert {p.url: p.depth for p in cfg.store().iter_pages()} == expected(web, web.seed_urls, 1)
    cfg.close()


def test_the_master_says_once_when_no_slave_is_alive_and_once_when_one_is_back(
    web, redis_url, keys, tmp_path, caplog
) -> None:
    from srcrawl.master.crawl_master import CrawlMaster
    from srcrawl.master.crawl_run import start_crawl

    cfg = Config.load(env=env_for(tmp_path, keys.job, redis_url))
    start_crawl(cfg, web.seed_urls, CrawlStrategy())
    master = CrawlMaster.from_config(cfg)
    t0 = time.monotonic()
    with caplog.at_level("WARNING", logger="srcrawl.master"):
        for dt in (0, 10, 29):
            master.slaves.see(0, t0 + dt)
        assert caplog.messages == []
        for dt in (31, 40, 50):
            master.slaves.see(0, t0 + dt)
        assert len(caplog.messages) == 1
        assert "no crawl slave has been alive for 31 s" in caplog.messages[0]
        for dt in (51, 52):
            master.slaves.see(2, t0 + dt)
        assert caplog.messages[1:] == ["2 crawl slaves are alive again"]
        master.slaves.see(0, t0 + 53)  # a short gap is not worth a line
        assert len(caplog.messages) == 2
    cfg.close()


@pytest.mark.slow
def test_a_crawl_survives_its_embedded_redis_being_killed(web, keys, tmp_path) -> None:
    env = env_for(tmp_path, keys.job, None)  # the embedded Redis, with its AOF
    home = tmp_path / "home"
    crawl = start(["crawl", *web.seed_urls, "--depth", "3", "--slaves", "2", *FAST], env)
    cfg = Config.load(env=env)
    children: list[psutil.Process] = []
    try:
        wait_for_pages(cfg, 15, crawl)
        children = descendants(crawl.pid)
        pid = int((home / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        out, err = crawl.communicate(timeout=300)
        assert crawl.returncode == 0, err[-3000:]
        assert int((home / "redis.pid").read_text()) != pid  # started again
        # exactly the reachable set: nothing lost, nothing stored twice
        summary = json.loads(out)
        want = expected(web, web.seed_urls, 3)
        pages = list(cfg.store().iter_pages())
        assert len(pages) == len({p.url for p in pages})
        assert {p.url: p.depth for p in pages} == want
        assert summary["pages"] == len(want)
        # one sentence when Redis went, one when it came back; no tracebacks
        assert "Redis is unreachable" in err and "Redis is back after" in err
        assert "Traceback" not in err
        logs = [p.read_text() for p in (home / "logs" / keys.job / "crawl").iterdir()]
        assert any("Redis is unreachable" in text for text in logs)
        for text in logs:
            assert "Traceback" not in text, text[-3000:]
            assert text.count("Redis is unreachable") <= 1
    finally:
        if crawl.poll() is None:
            crawl.kill()
        kill_all(children)
        embedded.stop(home)


@pytest.mark.slow
def test_an_orphaned_slave_waits_for_redis_quietly_and_leaves_with_its_parent(
    keys, tmp_path
) -> None:
    server_dir = tmp_path / "redis"
    url, server = embedded.start_server(server_dir, appendonly=False, daemonize=False)
    env = env_for(tmp_path, keys.job, url)
    log = tmp_path / "slave.log"
    # a parent that starts a slave as every local run does, then waits
    parent_code = (
        "import time, os\n"
        "from srcrawl.app.local import spawn_child\n"
        "from srcrawl.app.roles import SlaveRole\n"
        f"out = open({str(log)!r}, 'ab')\n"
        "spawn_child(SlaveRole(phases=('crawl',)), dict(os.environ), output=out)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], env=env)
    slave = None
    try:
        deadline = time.monotonic() + 30
        while "serving" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
            time.sleep(0.1)
        [slave] = descendants(parent.pid)
        server.kill()
        server.wait()
        cpu0 = sum(slave.cpu_times()[:2])
        deadline = time.monotonic() + 30
        while "Redis is unreachable" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        # then a while of waiting, in which its retries (after 0.1, 0.2, 0.4, 0.8, 1.6 s)
        # would show a spin or a second line
        time.sleep(4)
        # waiting, not spinning: one line, no tracebacks, next to no CPU
        text = log.read_text()
        assert text.count("Redis is unreachable") == 1, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        assert sum(slave.cpu_times()[:2]) - cpu0 < 0.5
        parent.kill()
        parent.wait()
        assert leftovers([slave], timeout=15) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if slave is not None:
            kill_all([slave])
        if server.poll() is None:
            server.kill()


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signalled_pagerank_stops_its_slaves(redis_url, keys, tmp_path, sig, code) -> None:
    from srcrawl.sql.pages import Page

    env = env_for(tmp_path, keys.job, redis_url)
    cfg = Config.load(env=env)
    ring = list(range(1, 41))
    cfg.store().put_pages(
        Page(fp=fp, url=f"http://h{fp % 3}.test/{fp}", host=f"h{fp % 3}.test", fetched_at=1.0)
        for fp in ring
    )
    cfg.store().put_links([(fp, ring[i - 1]) for i, fp in enumerate(ring)])
    cfg.close()
    # never converges by itself: --tol 0 runs every one of the iterations
    rank = start(
        ["pagerank", "--slaves", "2", "--iterations", "1000000", "--tol", "0"],
        env,
        sigint_ignored=sig == signal.SIGINT,
    )
    children: list[psutil.Process] = []
    try:
        assert rank.stdout is not None
        for line in rank.stdout:
            if line.startswith("iteration"):
                break
        children = descendants(rank.pid)
        assert len(children) == 2
        os.kill(rank.pid, sig)
        _, err = rank.communicate(timeout=60)
        assert rank.returncode == code, err[-2000:]
        assert leftovers(children, timeout=5) == []
    finally:
        if rank.poll() is None:
            rank.kill()
        kill_all(children)


@pytest.mark.slow
def test_a_crawl_whose_embedded_redis_is_stopped_on_purpose_ends_cleanly(
    web, keys, tmp_path
) -> None:
    env = env_for(tmp_path, keys.job, None)
    crawl = start(["crawl", *web.seed_urls, "--depth", "3", "--slaves", "2", *FAST], env)
    cfg = Config.load(env=env)
    children: list[psutil.Process] = []
    try:
        wait_for_pages(cfg, 5, crawl)
        children = descendants(crawl.pid)
        down = subprocess.run([*CLI, "down"], env=env, capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        _, err = crawl.communicate(timeout=120)
        assert crawl.returncode == 2, err[-3000:]
        assert "srcrawl: the embedded Redis was stopped (`srcrawl down`)" in err
        assert "Traceback" not in err, err[-3000:]
        assert leftovers(children, timeout=15) == []
        for log in (tmp_path / "home" / "logs" / keys.job / "crawl").iterdir():
            assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        if crawl.poll() is None:
            crawl.kill()
        kill_all(children)
        embedded.stop(tmp_path / "home")


class Remembering:
    """A handler that remembers something of each batch (as the crawl its links)."""

    phase = "index"
    batch_size = 1
    threads = 1

    def __init__(self) -> None:
        self.forgotten = 0

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        return [t.upper() for t in tasks]

    def forget(self) -> None:
        self.forgotten += 1

    def stats(self) -> dict[str, float]:
        return {}


def test_results_refused_after_a_presumed_death_make_the_handler_forget(
    redis_url, redis_client, keys, tmp_path
) -> None:
    # A slave silent past its heartbeat TTL (a long Redis outage) is presumed
    # dead and its tasks requeued; when its acks are refused, the crawl
    # handler must forget the links it believes sent, or fetching the pages
    # again in this slave would not send them and the pages below are lost.
    from srcrawl.queues.protocol import PhaseQueues
    from srcrawl.slave.runtime import Slave

    cfg = Config.load(env=env_for(tmp_path, keys.job, redis_url))
    handler = Remembering()
    slave = Slave.from_config(cfg, [handler])
    q = PhaseQueues(redis_client, keys, "index")
    q.srq.push([b"a", b"b"])
    tasks = q.srq.pop(slave.id, 2)
    slave._ack(handler, q, [([tasks[0]], [b"A"])])
    assert handler.forgotten == 0
    q.srq.requeue(slave.id)  # what the master does to a worker presumed dead
    slave._ack(handler, q, [([tasks[1]], [b"B"])])
    assert handler.forgotten == 1
    assert q.nrq.pop("m", 10) == [b"A"]  # the refused result was not pushed
    assert q.srq.pop("other", 10) == [b"b"]  # its task runs again
    cfg.close()


@pytest.mark.slow
def test_a_terminated_index_stops_its_slaves(redis_url, keys, tmp_path) -> None:
    from srcrawl.sql.pages import Page

    env = env_for(tmp_path, keys.job, redis_url)
    cfg = Config.load(env=env)
    words = ["crawler", "index", "search", "rank", "page", "link", "host", "queue", "slave"]
    text = " ".join(words[(i * 7) % len(words)] + str(i % 97) for i in range(600))
    cfg.store().put_pages(
        Page(
            fp=fp,
            url=f"http://h.test/{fp}",
            host="h.test",
            status=200,
            fetched_at=1.0,
            content_type="text/html",
            title=f"page {fp}",
            text=text,
        )
        for fp in range(1, 20_001)
    )
    cfg.close()
    index = start(["index", "--slaves", "2"], env)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while len(children) < 2:
            assert index.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
            children = descendants(index.pid)
        os.kill(index.pid, signal.SIGTERM)
        _, err = index.communicate(timeout=60)
        assert index.returncode == 143, err[-2000:]
        assert leftovers(children, timeout=5) == []
    finally:
        if index.poll() is None:
            index.kill()
        kill_all(children)
