"""Running the test web beside a test: in a child process (the default) or a thread.

The child process keeps the server off the test's GIL. The listening sockets
are bound here, before the child starts, and handed to it, so the ports are
known (and the URLs of the model right) before anything runs, and no other
process can take them in between. The child serves until its stdin closes
(this process ended or called :meth:`TestWeb.stop`), SIGTERM or SIGINT, then
flushes the access log and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from srcrawl.core.defaults import (
    DEFAULT_TESTWEB_HOSTS,
    DEFAULT_TESTWEB_LOG_FLUSH,
    DEFAULT_TESTWEB_PAGES,
    DEFAULT_TESTWEB_SEED,
)
from srcrawl.core.errors import SrcrawlError
from srcrawl.testweb.accesslog import read_access_log
from srcrawl.testweb.generator import generate
from srcrawl.testweb.model import TestWebError, Web
from srcrawl.testweb.server import TestWebServer, bind_sockets, free_loopback_sockets

START_TIMEOUT = 60.0
"""Seconds the child may take to start serving (it unpickles the whole model)."""
STOP_TIMEOUT = 10.0
_READY = b"ready\n"


# The test webs served by child processes of this process. The server
# stops when its stdin pipe reaches EOF, that is when every process holding
# the pipe's write end has closed it or died; a child forked from this
# process (the local master and slaves, srcrawl.app.local) would hold it too, and
# keep the server alive after this process died. Forked children let go.
_SERVED: weakref.WeakSet[TestWeb] = weakref.WeakSet()


def _release_pipes_in_child() -> None:
    for web in list(_SERVED):
        proc = web._proc
        if proc is None or proc.stdin is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, proc.stdin.fileno())  # the fd stays valid: later closes are harmless
            os.close(null)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_release_pipes_in_child)


class TestWeb:
    """A synthetic web served on loopback for the duration of a ``with`` block.

    >>> with TestWeb.generate(hosts=4, pages=50, seed=7) as tw:  # doctest: +SKIP
    ...     requests.get(tw.seed_urls[0])
    """

    __test__ = False

    def __init__(
        self,
        web: Web,
        *,
        latency_ms: float = 0.0,
        access_log: str | Path | None = None,
        in_process: bool = False,
        flush_interval: float = DEFAULT_TESTWEB_LOG_FLUSH,
        sockets: Sequence[socket.socket] | None = None,
        prerender: bool = False,
    ) -> None:
        """Serve ``web`` on its own addresses and ports (``sockets``: already bound ones);
        ``prerender``: render every page before serving (see :class:`~.server.Site`)."""
        self.web = web
        self.prerender = prerender
        self.latency_ms = latency_ms
        self.access_log = Path(access_log) if access_log else None
        self.in_process = in_process
        self.flush_interval = flush_interval
        self._sockets = list(sockets) if sockets is not None else None
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    @classmethod
    def generate(
        cls,
        hosts: int = DEFAULT_TESTWEB_HOSTS,
        pages: int = DEFAULT_TESTWEB_PAGES,
        seed: int = DEFAULT_TESTWEB_SEED,
        *,
        addresses: bool = False,
        address: str = "127.0.0.1",
        latency_ms: float = 0.0,
        access_log: str | Path | None = None,
        in_process: bool = False,
        flush_interval: float = DEFAULT_TESTWEB_LOG_FLUSH,
        prerender: bool = False,
        **options: Any,
    ) -> TestWeb:
        """A generated web on ports the kernel picked (``options`` go to :func:`generate`);
        ``address``: the loopback address of every host (``::1``: IPv6) unless ``addresses``."""
        if hosts < 1:
            raise TestWebError("a web needs at least one host")
        if addresses:
            socks = [free_loopback_sockets(1, f"127.0.0.{i + 2}")[0] for i in range(hosts)]
        else:
            socks = free_loopback_sockets(hosts, address)
        try:
            ports = [s.getsockname()[1] for s in socks]
            web = generate(
                hosts, pages, seed, ports=ports, addresses=addresses, address=address, **options
            )
        except BaseException:
            for s in socks:
                s.close()
            raise
        return cls(
            web,
            latency_ms=latency_ms,
            access_log=access_log,
            in_process=in_process,
            flush_interval=flush_interval,
            sockets=socks,
            prerender=prerender,
        )

    # ---- the model, for convenience

    @property
    def seed_urls(self) -> list[str]:
        return self.web.seed_urls

    def base_url(self, host_index: int) -> str:
        return self.web.base_url(host_index)

    @property
    def special(self) -> dict[str, str]:
        return self.web.special

    @property
    def server_pid(self) -> int | None:
        """The server process (None when it runs in this process)."""
        return self._proc.pid if self._proc is not None else None

    def log_entries(self) -> list[dict]:
        """The access log so far (complete once stopped; otherwise up to a flush behind)."""
        if self.access_log is None:
            raise TestWebError("this test web keeps no access log")
        return read_access_log(self.access_log) if self.access_log.exists() else []

    # ---- lifecycle

    def start(self) -> TestWeb:
        """Start serving; returns once every host accepts connections."""
        socks = self._sockets if self._sockets is not None else bind_sockets(self.web)
        self._sockets = None
        try:
            if self.in_process:
                self._start_thread(socks)
            else:
                self._start_child(socks)
        finally:
            if not self.in_process:
                for s in socks:
                    s.close()
        self._wait_ports()
        return self

    def stop(self) -> None:
        """Stop serving; the access log is complete afterwards."""
        if self._proc is not None:
            _SERVED.discard(self)
            proc, self._proc = self._proc, None
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._thread is not None:
            assert self._loop is not None and self._stop_event is not None
            self._loop.call_soon_threadsafe(self._stop_event.set)
            self._thread.join(timeout=STOP_TIMEOUT)
            self._thread = None

    def __enter__(self) -> TestWeb:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_child(self, socks: list[socket.socket]) -> None:
        fds = [s.fileno() for s in socks]
        payload = pickle.dumps(
            {
                "web": self.web,
                "fds": fds,
                "latency_ms": self.latency_ms,
                "access_log": str(self.access_log) if self.access_log else None,
                "flush_interval": self.flush_interval,
                "prerender": self.prerender,
            }
        )
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "srcrawl.testweb"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=fds,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        _SERVED.add(self)
        try:
            self._proc.stdin.write(struct.pack(">Q", len(payload)) + payload)
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # the child died; reported below
        line = _readline_within(self._proc.stdout, START_TIMEOUT)
        if line != _READY:
            self.stop()
            raise TestWebError("the test web server process did not start (see its stderr)")

    def _start_thread(self, socks: list[socket.socket]) -> None:
        started = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._stop_event = asyncio.Event()
            try:
                server = TestWebServer(
                    self.web,
                    latency_ms=self.latency_ms,
                    access_log=self.access_log,
                    flush_interval=self.flush_interval,
                    prerender=self.prerender,
                )
                await server.start(socks)
            except BaseException as e:
                failure.append(e)
                for s in socks:
                    s.close()
                started.set()
                return
            started.set()
            try:
                await self._stop_event.wait()
            finally:
                await server.stop()
                for s in socks:
                    s.close()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(main())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="testweb", daemon=True)
        self._thread.start()
        started.wait(START_TIMEOUT)
        if failure:
            self._thread.join(timeout=STOP_TIMEOUT)
            self._thread = None
            raise TestWebError(f"the test web server did not start: {failure[0]}")

    def _wait_ports(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        for host in self.web.hosts:
            while True:
                try:
                    socket.create_connection((host.address, host.port), timeout=5).close()
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise TestWebError(f"{host.origin} does not answer: {e}") from e
                    time.sleep(0.05)


def _readline_within(stream, timeout: float) -> bytes:
    result: list[bytes] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else b""


def child_main() -> int:
    """Entry of the server process started by :class:`TestWeb` (see the module docstring)."""
    stdin = sys.stdin.buffer
    header = stdin.read(8)
    if len(header) != 8:
        return 2
    job = pickle.loads(stdin.read(struct.unpack(">Q", header)[0]))
    socks = [socket.socket(fileno=fd) for fd in job["fds"]]
    try:
        server = TestWebServer(
            job["web"],
            latency_ms=job["latency_ms"],
            access_log=job["access_log"],
            flush_interval=job["flush_interval"],
            prerender=job["prerender"],
        )
    except SrcrawlError as e:
        print(f"srcrawl testweb: {e}", file=sys.stderr)
        return 2

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def watch_parent() -> None:
            stdin.read()  # returns at EOF: the parent closed the pipe or died
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch_parent, daemon=True).start()
        await server.start(socks)
        sys.stdout.buffer.write(_READY)
        sys.stdout.buffer.flush()
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(main())
    return 0
