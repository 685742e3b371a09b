"""Shared fixtures: a real Redis on a free port, the SQL stores, and a real SeaweedFS (an
S3 store for WARC objects, started only by the tests that ask for it).

The Redis server is started by the session (never port 6379) from the same
code as the embedded default. Every store test runs on SQLite and on MariaDB:
the session starts its own MariaDB from the machine's server binaries (a fresh
data directory, a free loopback port), unless SRCRAWL_TEST_MYSQL_URL names a
server; either way in a scratch database of its own.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pymysql
import pytest
import redis

from srcrawl.core import embedded
from srcrawl.core.keys import Keys
from srcrawl.settings.config import DatabaseURL
from srcrawl.sql.base import TABLES
from srcrawl.sql.store import Store, open_store
from srcrawl.testweb import TestWeb

MYSQL_ENV = "SRCRAWL_TEST_MYSQL_URL"
HELPERS = Path(__file__).parent / "helpers"
# test modules import the shared helpers (hostile_web, index_pages, …) by name
sys.path.insert(0, str(HELPERS))
# fixtures of the helpers, shared by the test modules that name them
pytest_plugins = ["broken_host", "chromium_browser"]
import mariadb_server  # noqa: E402  (a helper: found once HELPERS is on the path)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("redis")
    url, proc = embedded.start_server(directory, appendonly=False, daemonize=False)
    assert ":6379/" not in url
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory):
    """A real SeaweedFS (``weed server -s3``) on free loopback ports, for the session."""
    from srcrawl.lab.seaweedfs import SeaweedFS

    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs")).start()
    yield server
    server.stop()


@pytest.fixture
def s3(seaweedfs, monkeypatch: pytest.MonkeyPatch):
    """The session's SeaweedFS, its endpoint and keys in this process's AWS variables."""
    for name, value in seaweedfs.env().items():
        monkeypatch.setenv(name, value)
    return seaweedfs


@pytest.fixture
def redis_client(redis_url: str):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def keys() -> Keys:
    return Keys(f"t-{uuid.uuid4().hex[:10]}")


@pytest.fixture(scope="session")
def mysql_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseURL]:
    """The MySQL/MariaDB server of the session: the one SRCRAWL_TEST_MYSQL_URL names, else
    a MariaDB started here and stopped at the end. No binaries fails the run rather than
    skipping the MySQL tests: the test command (scripts/test) installs them."""
    url = os.environ.get(MYSQL_ENV)
    if url:
        yield DatabaseURL.parse(url)
        return
    server = mariadb_server.start(tmp_path_factory.mktemp("mariadb"))
    if isinstance(server, str):
        pytest.fail(f"the MySQL tests need a MariaDB: {server}", pytrace=False)
    try:
        yield DatabaseURL(kind="mysql", host="127.0.0.1", port=server.port, user="root")
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mysql_db(mysql_server: DatabaseURL) -> Iterator[DatabaseURL]:
    base = mysql_server
    name = f"srcrawl_test_{os.getpid()}"
    conn = pymysql.connect(host=base.host, port=base.port, user=base.user, password=base.password)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
    db = DatabaseURL(
        kind="mysql",
        host=base.host,
        port=base.port,
        user=base.user,
        password=base.password,
        database=name,
    )
    yield db
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()


def _empty(store: Store) -> Store:
    store.init_schema()
    with store.transaction() as cur:
        for table in TABLES:
            if table != "meta":
                cur.execute(f"DELETE FROM {table}")
        # what the index keeps in meta describes the tables just emptied
        cur.execute("DELETE FROM meta WHERE k <> 'schema_version'")
    return store


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> DatabaseURL:
    """Each store test runs once per backend."""
    if request.param == "sqlite":
        return DatabaseURL(kind="sqlite", path=str(tmp_path / "store.db"))
    return request.getfixturevalue("mysql_db")


@pytest.fixture
def store(db_url: DatabaseURL):
    s = _empty(open_store(db_url))
    yield s
    s.close()


@pytest.fixture
def python() -> str:
    return sys.executable


def cli_env(redis_url: str, job: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a `srcrawl` command run by a test: its own Redis, job, home and store.

    The store's directory is made first: srcrawl opens a named SQLite path only in a
    directory that exists.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    tmp_path.mkdir(parents=True, exist_ok=True)
    env.update(
        SRCRAWL_REDIS_URL=redis_url,
        SRCRAWL_JOB=job,
        SRCRAWL_HOME=str(tmp_path / "home"),
        SRCRAWL_DB_URL=f"sqlite:///{tmp_path}/crawl.db",
    )
    return env


def run_cli(
    args: list[str], env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess:
    """`srcrawl ARGS` in a new process with ``env``, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def stored_pages(env: dict[str, str]) -> list[dict]:
    """What `srcrawl export pages` prints for the store of ``env``, one dict a page."""
    out = run_cli(["export", "pages"], env)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


LOG_MARK = "/srcrawl-test-log-mark/"
"""The path of the requests :func:`logged_requests` makes (a 404), left out of what it returns."""


def logged_requests(web: TestWeb, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every request ``web`` answered before this call, from its access log.

    The server writes its log in batches, every flush interval: read after a fixed
    sleep, the log may still lack the crawl's last requests, and a check of them
    ("asked once", "no overlap", "gap ≥ delay") passes without them. So a request of
    our own goes last, and we wait for its line: the server logs each request as it
    ends, in that order, and writes the lines in order, so once ours is in the file
    every request that ended before it was sent is too.
    """
    mark = f"{LOG_MARK}{uuid.uuid4().hex}"
    origin = urlsplit(web.base_url(0))
    conn = http.client.HTTPConnection(origin.hostname or "", origin.port, timeout=10)
    try:
        conn.request("GET", mark)
        conn.getresponse().read()
    finally:
        conn.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = web.log_entries()
        if any(e["path"] == mark for e in entries):
            return [e for e in entries if not e["path"].startswith(LOG_MARK)]
        time.sleep(0.02)
    raise AssertionError(f"the access log did not show {mark} within {timeout} s")


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A real Redis Cluster of 3 primaries with one replica each, on free loopback ports."""
    from srcrawl.lab.testcluster import RedisClusterProcesses

    cluster = RedisClusterProcesses(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()
