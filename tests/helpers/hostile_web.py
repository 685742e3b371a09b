"""A small hostile web server on loopback: responses that fail part way.

Plain sockets, one thread per connection, every response closes its
connection. Paths:

- ``/`` links to every page below (``/robots.txt`` is a 404: allow all)
- ``/drip.html``: headers, then one body byte a second (Content-Length 600)
- ``/headers.html``: a status line and one header, then silence
- ``/short.html``: Content-Length 5000, 1000 bytes, then the connection closes
- ``/flaky.html``: 503 the first time, then a page linking to ``/flaky-child.html``
- ``/heavy.html``: 700,000 unclosed ``<b>`` tags, then a link to ``/heavy-child.html``
- ``/slow.html``: a small page after ``slow`` seconds
- anything else ending in ``.html``: a small page
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

HEAVY_TAGS = 700_000
PAGES = ("drip", "headers", "short", "flaky")


def _page(body: str, status: str = "200 OK", extra: str = "") -> bytes:
    data = f"<html><head><title>t</title></head><body>{body}</body></html>".encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode() + data


class HostileWeb:
    """Serves the paths of the module docstring on 127.0.0.1, in a thread."""

    def __init__(self, *, pages: tuple[str, ...] = PAGES, slow: float = 0.5) -> None:
        self.pages = pages
        self.slow = slow
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._heavy = _page("<b>x" * HEAVY_TAGS + '<a href="/heavy-child.html">child</a>')

    def url(self, name: str) -> str:
        return f"{self.origin}/{name}.html"

    def __enter__(self) -> HostileWeb:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    request += chunk
                path = request.split(b" ", 2)[1].decode()
                with self._lock:
                    self.requests[path] += 1
                    seen = self.requests[path]
                self._respond(conn, path, seen)
            except OSError:
                pass  # the client gave up: that is the point of most of these

    def _respond(self, conn: socket.socket, path: str, seen: int) -> None:
        if path == "/drip.html":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 600\r\n"
                b"Connection: close\r\n\r\n<html><body>drip drip"
            )
            for _ in range(600):
                if self._stop.wait(1.0):
                    return
                conn.sendall(b"x")
        elif path == "/headers.html":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n")
            self._stop.wait(60)
        elif path == "/slow.html":
            time.sleep(self.slow)
            conn.sendall(_page("slow but fine"))
        else:
            conn.sendall(self._whole_response(path, seen))

    def _whole_response(self, path: str, seen: int) -> bytes:
        """The responses sent at once; ``seen``: the how-many-th request of ``path`` this is."""
        if path == "/":
            return _page("".join(f'<a href="/{p}.html">{p}</a> ' for p in self.pages))
        if path == "/short.html":
            return (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\n"
                b"Connection: close\r\n\r\n<html><body>short " + b"y" * 982
            )
        if path == "/flaky.html" and seen == 1:
            return _page("busy", "503 Service Unavailable", "Retry-After: 1\r\n")
        if path == "/flaky.html":
            return _page('flaky but fine <a href="/flaky-child.html">child</a>')
        if path == "/heavy.html":
            return self._heavy
        if path.endswith(".html"):
            return _page(f"page {path}")
        # /robots.txt among them: everything is allowed
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
