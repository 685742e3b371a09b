"""A private MariaDB for the tests: a fresh data directory, a free loopback port and a unix
socket in a scratch directory, started from the machine's server binaries and stopped by
the caller. The session's store server (tests/conftest.py) and the TLS server of
tests/test_secure_transport.py are both started here."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pymysql

from srcrawl.core.embedded import free_port

START_TIMEOUT = 60.0  # a first start on two busy cores; a quiet machine takes ~2 s
INSTALL = "mariadb-install-db"
SERVER = "mariadbd"


def binaries() -> tuple[str, str] | str:
    """mariadb-install-db and mariadbd, or why they are not here."""
    # /usr/sbin is not on every user's PATH
    found = [shutil.which(n) or shutil.which(n, path="/usr/sbin") for n in (INSTALL, SERVER)]
    if not all(found):
        return (
            f"no {INSTALL} / {SERVER} here: install mariadb-server "
            "(scripts/test does it), or name a server in SRCRAWL_TEST_MYSQL_URL"
        )
    return found[0], found[1]  # type: ignore[return-value]


def serve(args: list[str], ready: Callable[[], bool], log: Path) -> subprocess.Popen | str:
    """Start a server and wait until ``ready``: the process, or why it did not start."""
    with open(log.with_suffix(".out"), "wb") as out:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(Exception):
            if ready():
                return proc
        time.sleep(0.05)
    stop(proc)
    said = log.with_suffix(".out").read_text(errors="replace")
    said += log.read_text(errors="replace") if log.exists() else ""
    return f"{args[0]} did not start (exit {proc.returncode}): {said[-1500:]}"


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class MariaDB:
    """A running private server: root has no password, over the socket and on 127.0.0.1."""

    proc: subprocess.Popen
    port: int
    socket: str
    datadir: Path

    def root(self) -> pymysql.connections.Connection:
        return pymysql.connect(unix_socket=self.socket, user="root", connect_timeout=2)

    def stop(self) -> None:
        stop(self.proc)


def start(directory: Path, extra: tuple[str, ...] = ()) -> MariaDB | str:
    """A new MariaDB in ``directory`` (``extra``: more server options), or why not."""
    found = binaries()
    if isinstance(found, str):
        return found
    install_db, mariadbd = found
    # as root the server refuses to run unless told which user to be
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    datadir = directory / "data"
    made = subprocess.run(
        [
            install_db,
            "--no-defaults",
            f"--datadir={datadir}",
            "--skip-test-db",
            "--auth-root-authentication-method=normal",
            *as_root,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if made.returncode != 0:
        return (
            f"{install_db} failed (exit {made.returncode}): {(made.stdout + made.stderr)[-1500:]}"
        )
    port, socket = free_port(), str(directory / "mysqld.sock")
    args = [
        mariadbd,
        "--no-defaults",
        f"--datadir={datadir}",
        f"--socket={socket}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--pid-file={directory / 'mysqld.pid'}",
        f"--log-error={directory / 'error.log'}",
        "--skip-log-bin",
        # small and unsynced: a scratch server of the tests, thrown away at the end
        "--innodb-buffer-pool-size=64M",
        "--innodb-flush-log-at-trx-commit=2",
        "--max-connections=500",
        *as_root,
        *extra,
    ]

    def ready() -> bool:
        pymysql.connect(unix_socket=socket, user="root", connect_timeout=2).close()
        return True

    proc = serve(args, ready, directory / "error.log")
    if isinstance(proc, str):
        return proc
    return MariaDB(proc=proc, port=port, socket=socket, datadir=datadir)
