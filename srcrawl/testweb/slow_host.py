"""A host slow the way the open web is slow, served on loopback.

Every request of it is answered one way (its *kind*), held open for at most ``hold``
seconds, then the connection is closed:

- ``drip``: a 200 whose body comes one byte a second;
- ``headers``: a status line, then one header line a second, never the blank line;
- ``chunked``: a chunked 200 whose chunks come a second apart, never the last one;
- ``huge``: a 200 that promises 500 MB (Content-Length) and sends them as fast as it can;
- ``robots``: robots.txt is never answered (nothing at all is sent), pages are.

For every kind but ``robots``, robots.txt answers 404 at once, so the pages themselves are
what is slow. Each request is noted (path, start and end on ``time.monotonic()``), so a
test can tell what was in flight when.
"""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

KINDS = ("drip", "headers", "chunked", "huge", "robots")
"""The ways a slow host can be slow, in the order the isolation benchmark runs them."""

HUGE_BYTES = 500 * 1000 * 1000
_TICK = 1.0
"""Seconds between two bytes, header lines or chunks of a dripping answer."""
_PAGE = b"<html><head><title>slow</title></head><body><a href='/next'>next</a></body></html>"


@dataclass
class SlowRequest:
    path: str
    start: float
    end: float | None = None


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, kind: str, hold: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.kind = kind
        self.hold = hold
        self.stopping = threading.Event()
        self.requests: list[SlowRequest] = []
        self.lock = threading.Lock()


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        line = self.rfile.readline(8192)
        while True:  # the request's headers, up to the blank line
            h = self.rfile.readline(8192)
            if h in (b"\r\n", b"\n", b""):
                break
        parts = line.split()
        path = parts[1].decode("latin-1") if len(parts) > 1 else "/"
        note = SlowRequest(path, time.monotonic())
        with self.server.lock:
            self.server.requests.append(note)
        try:
            self._answer(path)
        except OSError:
            pass  # the client gave up: what a slow host sees all day
        finally:
            note.end = time.monotonic()

    def _send(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _waited(self, until: float) -> bool:
        """Sleep a tick; False once the hold is over or the server stops."""
        return not self.server.stopping.wait(_TICK) and time.monotonic() < until

    def _answer(self, path: str) -> None:
        kind, until = self.server.kind, time.monotonic() + self.server.hold
        if path == "/robots.txt":
            if kind == "robots":  # read, never answered
                while self._waited(until):
                    pass
                return
            self._send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        answer = {
            "robots": self._page,
            "drip": self._drip,
            "headers": self._headers,
            "chunked": self._chunked,
            "huge": self._huge,
        }[kind]
        answer(until)

    def _page(self, until: float) -> None:
        self._send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(_PAGE), _PAGE)
        )

    def _drip(self, until: float) -> None:
        self._send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(_PAGE)
        )
        for i in range(len(_PAGE)):
            self._send(_PAGE[i : i + 1])
            if not self._waited(until):
                return

    def _headers(self, until: float) -> None:
        self._send(b"HTTP/1.1 200 OK\r\n")
        n = 0
        while self._waited(until):
            n += 1
            self._send(b"X-Still-Coming-%d: yes\r\n" % n)

    def _chunked(self, until: float) -> None:
        self._send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        while self._waited(until):
            self._send(b"1\r\n \r\n")

    def _huge(self, until: float) -> None:
        self._send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % HUGE_BYTES
        )
        block, sent = b"<p>" + b"x" * 65533, 0
        self.connection.settimeout(1.0)  # a client that stopped reading: look up again
        while sent < HUGE_BYTES and time.monotonic() < until:
            if self.server.stopping.is_set():
                return
            try:
                self.wfile.write(block)
            except TimeoutError:
                continue
            sent += len(block)


class SlowHost:
    """A running slow host: its base URL, and the requests it had so far."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/"

    @property
    def requests(self) -> list[SlowRequest]:
        with self._server.lock:
            return list(self._server.requests)


@contextmanager
def slow_host(kind: str, hold: float = 120.0) -> Iterator[SlowHost]:
    """A slow host of ``kind`` (see KINDS) on loopback, each answer held up to ``hold`` s."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of slow host {kind!r} (one of {', '.join(KINDS)})")
    server = _Server(kind, hold)
    thread = threading.Thread(target=server.serve_forever, name=f"slow-{kind}", daemon=True)
    thread.start()
    try:
        yield SlowHost(server)
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()
