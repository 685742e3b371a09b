"""`srcrawl health ROLE`: a container's healthcheck says whether the service of its host
does its job. Real processes (slave, master, ranker, portal), a real Redis, SQLite.

Tests may run as root, whom mode bits do not stop: an unwritable WARC directory is made
in ways that hold for root too: a path under a regular file, and a directory of mode 555
checked by a root that has given up the capabilities that pass over mode bits (what any
root may do, in a plain container too), as a container's user finds a volume it cannot
write.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from srcrawl.app.health import recent_store_error
from srcrawl.core.defaults import STORE_ERROR_FRESH

from .conftest import cli_env, run_cli
from .test_fetch_policy import page, serve
from .test_lifecycle import CLI


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "a")  # noqa: SIM115 - the child holds it
    return subprocess.Popen(
        [*CLI, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


# linux/capability.h: what lets root past a file's mode bits, and how a process gives them up
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3
PR_CAPBSET_DROP = 24
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _bound_by_mode_bits() -> None:
    """Run in the child before its exec: root keeps its uid but loses CAP_DAC_OVERRIDE and
    kin, so mode bits bind it as they bind any user. An exec as root is given every
    capability of the bounding set and of the inheritable one: they leave both."""
    libc = ctypes.CDLL(None, use_errno=True)
    caps = (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER)
    for cap in caps:
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:  # needs CAP_SETPCAP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    header, data = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for cap in caps:
        data[0].inheritable &= ~(1 << cap)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def health(role: str, env: dict[str, str], *more: str, mode_bits: bool = False):  # type: ignore[no-untyped-def]
    """`srcrawl health ROLE`; with ``mode_bits``, as a root whom mode bits bind (any other
    user they bind already), as a container's user meets a volume it may not write."""
    if not mode_bits or os.geteuid() != 0:
        return run_cli(["health", role, *more], env, timeout=60)
    try:
        return subprocess.run(
            [*CLI, "health", role, *more],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_bound_by_mode_bits,
        )
    except subprocess.SubprocessError as e:  # the child could not give them up
        pytest.skip(f"this root cannot give up CAP_DAC_OVERRIDE (no CAP_SETPCAP?): {e}")


def until(role: str, env: dict[str, str], code: int, log: Path, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    """The first answer of `srcrawl health ROLE` with exit ``code``."""
    deadline = time.monotonic() + timeout
    while True:
        r = health(role, env)
        if r.returncode == code:
            return r
        assert time.monotonic() < deadline, (
            r.returncode,
            r.stdout,
            r.stderr,
            log.read_text()[-2000:],
        )
        time.sleep(0.3)


@pytest.mark.slow
def test_a_slave_is_healthy_while_it_beats_and_its_warc_directory_is_writable(
    redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    (tmp_path / "warc").mkdir(mode=0o777)
    env["SRCRAWL_WARC_DIR"] = str(tmp_path / "warc")
    log = tmp_path / "slave.log"
    slave = start(["slave", "start", "--threads", "2"], env, log)
    try:
        r = until("slave", env, 0, log)
        assert r.stdout.startswith("healthy: 1 slave(s) on") and r.stderr == ""

        (tmp_path / "a-file").write_text("not a directory")
        broken = {**env, "SRCRAWL_WARC_DIR": str(tmp_path / "a-file" / "warc")}
        r = health("slave", broken)
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr.startswith("unhealthy: cannot write WARC files in ")
        assert "Not a directory" in r.stderr and len(r.stderr.splitlines()) == 1

        # the container's case: a volume the slave's user may not write (mode 555)
        (tmp_path / "volume").mkdir(mode=0o555)
        ro = {**env, "SRCRAWL_WARC_DIR": str(tmp_path / "volume")}
        r = health("slave", ro, mode_bits=True)
        assert r.returncode == 1, r.stderr
        assert "Permission denied" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
        # the same check on a directory its mode lets it write: healthy, so what failed
        # above was the mode alone (and not the capabilities given up for it)
        (tmp_path / "rw-volume").mkdir(mode=0o755)
        rw = {**env, "SRCRAWL_WARC_DIR": str(tmp_path / "rw-volume")}
        r = health("slave", rw, mode_bits=True)
        assert r.returncode == 0, r.stderr
    finally:
        stop(slave)
    r = health("slave", env)
    assert r.returncode == 1 and "beats" in r.stderr


@pytest.mark.slow
def test_a_slave_that_cannot_store_what_it_fetched_is_unhealthy(redis_url, keys, tmp_path) -> None:
    web = serve({"/": page(b"<a href='/a'>a</a>"), "/a": page(b"<p>a</p>")})
    seed = f"http://127.0.0.1:{web.server_address[1]}/"
    env = cli_env(redis_url, keys.job, tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    slave_env = {**env, "SRCRAWL_WARC_DIR": str(tmp_path / "a-file" / "warc")}
    (tmp_path / "warc").mkdir()
    env["SRCRAWL_WARC_DIR"] = str(tmp_path / "warc")  # the check's own probe passes
    log = tmp_path / "crawl.log"
    master = start(["master", "start", seed, "--delay", "0", "--keep-running"], env, log)
    slave = start(["slave", "start", "--threads", "2"], slave_env, log)
    try:
        r = _store_error(env, log)  # what the slave itself found, in its heartbeat
        assert "cannot store what it fetched" in r.stderr and "WARC" in r.stderr, r.stderr
    finally:
        stop(slave)
        stop(master)
        web.shutdown()
        web.server_close()


def _store_error(env: dict[str, str], log: Path):  # type: ignore[no-untyped-def]
    """The first answer of `srcrawl health slave` that names a failed store write."""
    deadline = time.monotonic() + 30
    while True:
        r = health("slave", env)
        if "cannot store" in r.stderr:
            return r
        assert time.monotonic() < deadline, (r.stderr, log.read_text()[-2000:])
        time.sleep(0.3)


@pytest.mark.slow
def test_a_master_ranker_and_indexer_are_healthy_while_they_hold_or_wait_for_their_lease(
    redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    log = tmp_path / "roles.log"
    assert health("master", env).returncode == 1  # none runs
    master = start(["master", "start", "--keep-running"], env, log)
    ranker = start(["pagerank", "--every", "1h", "--poll", "0.5s", "--slaves", "0"], env, log)
    indexer = start(["index", "--follow", "--slaves", "0"], env, log)
    try:
        r = until("master", env, 0, log)
        assert "waits for" in r.stdout  # no crawl yet: it waits for its first seeds
        web = serve({"/": page(b"<p>one page</p>")})
        seeded = run_cli(["seed", f"http://127.0.0.1:{web.server_address[1]}/"], env)
        assert seeded.returncode == 0, seeded.stderr
        deadline = time.monotonic() + 30
        while "holds" not in (r := health("master", env)).stdout:
            assert time.monotonic() < deadline, (r.stdout, r.stderr, log.read_text()[-2000:])
            time.sleep(0.3)
        assert f"crawl master on {socket.gethostname()} holds" in r.stdout
        r = until("ranker", env, 0, log)
        assert "pagerank master" in r.stdout and "waits for" in r.stdout
        r = until("indexer", env, 0, log)
        assert f"index master on {socket.gethostname()} holds" in r.stdout
        web.shutdown()
        web.server_close()
    finally:
        stop(master)
        stop(ranker)
        stop(indexer)
    for role in ("master", "ranker", "indexer"):
        r = health(role, env)  # the word it left names a process that is gone
        assert r.returncode == 1 and "holds or waits" in r.stderr, r.stderr


@pytest.mark.slow
def test_the_portal_is_healthy_while_healthz_answers(redis_url, keys, tmp_path) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/healthz"
    r = health("portal", env, "--url", url)
    assert r.returncode == 1 and "does not answer" in r.stderr
    log = tmp_path / "portal.log"
    portal = start(["serve", "--port", str(port), "--workers", "1"], env, log)
    try:
        r = until_portal(env, url, log)
        assert r.stdout == f"healthy: {url} answers 200\n"
    finally:
        stop(portal)


def until_portal(env: dict[str, str], url: str, log: Path):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while (r := health("portal", env, "--url", url)).returncode != 0:
        assert time.monotonic() < deadline, (r.stderr, log.read_text()[-2000:])
        time.sleep(0.3)
    return r


def test_a_check_that_cannot_reach_redis_or_is_misconfigured_answers_1(tmp_path) -> None:
    env = cli_env("redis://127.0.0.1:1", "job", tmp_path)  # nothing listens there
    r = health("slave", env)
    assert r.returncode == 1 and r.stderr.startswith("unhealthy: cannot reach Redis")
    r = health("master", {**env, "SRCRAWL_DB_URL": "sqlite:/x"})  # malformed: not exit 2
    assert r.returncode == 1 and "SRCRAWL_DB_URL is malformed" in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_a_failed_store_write_fails_the_check_until_it_is_old_and_nothing_was_written() -> None:
    # a slave with work retries at once and clears it; an idle one would carry it for good
    now = 1_000_000.0
    fresh = {"store_error": "crawl: disk full", "store_error_at": now - 10}
    assert recent_store_error(fresh, now) == "crawl: disk full"
    old = {**fresh, "store_error_at": now - STORE_ERROR_FRESH - 1}
    assert recent_store_error(old, now) is None
    assert recent_store_error({"store_error_at": now}, now) is None
    assert recent_store_error({"store_error": "x", "store_error_at": "?"}, now) == "x"


@pytest.mark.slow
def test_a_slave_whose_object_store_does_not_answer_is_unhealthy(
    s3, redis_url, keys, tmp_path
) -> None:
    env = {**cli_env(redis_url, keys.job, tmp_path), **s3.env()}
    env["SRCRAWL_WARC_DIR"] = "s3://health-warc/crawls"
    log = tmp_path / "slave.log"
    slave = start(["slave", "start", "--threads", "2"], env, log)
    try:
        r = until("slave", env, 0, log)
        assert r.stdout.rstrip().endswith("s3://health-warc/crawls answers"), r.stdout
        s3.pause()  # the store hangs: the slave would hold every row it fetches
        try:
            t0 = time.monotonic()
            r = health("slave", env)
            took = time.monotonic() - t0
        finally:
            s3.resume()
        assert r.returncode == 1 and took < 30, (r.returncode, took)
        assert r.stderr.startswith("unhealthy: the object store of s3://health-warc/crawls")
        assert len(r.stderr.splitlines()) == 1
    finally:
        stop(slave)
