"""An HTTP/1.1 server for the synthetic web on asyncio: one listening socket per host.

It implements what a crawler needs and nothing more: GET and HEAD, keep-alive
(HTTP/1.1 by default, HTTP/1.0 on request), pipelined requests answered in
order, request bodies skipped, Content-Length on every response, flow control
on large bodies. Each response waits ``latency_ms`` first (``asyncio.sleep``,
never blocking). Every request ends up in the access log
(:mod:`srcrawl.testweb.accesslog`).

The special behaviours come from the model: ``/robots.txt`` per host mode
(a ``flaky`` host answers 500 to its first ``robots_failures`` robots.txt
requests since the server started, counting every method), pages that stall,
and the truncated page.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import errno
import logging
import socket
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from http import HTTPStatus
from pathlib import Path

from srcrawl.core.defaults import DEFAULT_TESTWEB_LOG_FLUSH
from srcrawl.testweb import changes, content
from srcrawl.testweb.accesslog import AccessLog
from srcrawl.testweb.content import Response
from srcrawl.testweb.model import Host, TestWebError, Web
from srcrawl.testweb.urls import canonical, target_of

log = logging.getLogger("srcrawl.testweb")

MAX_HEAD_BYTES = 64 * 1024
"""Largest request head accepted (request line and headers)."""
RENDER_CACHE_SIZE = 4096
"""Rendered responses kept in memory (rendering a page costs more than serving it)."""
LISTEN_BACKLOG = 1024
WRITE_HIGH_WATER = 256 * 1024


def bind_sockets(web: Web, address: str | None = None) -> list[socket.socket]:
    """One listening socket per host of ``web``, bound to its loopback address and port
    (or to ``address`` and its port: ``0.0.0.0`` serves it from a container)."""
    socks: list[socket.socket] = []
    try:
        for host in web.hosts:
            where = address or host.address
            sock = socket.socket(_family(where), socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((where, host.port))
            except OSError as e:
                hint = " (choose another --port-base)" if e.errno == errno.EADDRINUSE else ""
                raise TestWebError(
                    f"cannot listen on {where}:{host.port}: {e.strerror}{hint}"
                ) from e
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def free_loopback_sockets(n: int, address: str = "127.0.0.1") -> list[socket.socket]:
    """``n`` listening sockets on ports the kernel picked (no race with other processes)."""
    socks = []
    for _ in range(n):
        sock = socket.socket(_family(address), socket.SOCK_STREAM)
        sock.bind((address, 0))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        socks.append(sock)
    return socks


@dataclass
class Request:
    method: str
    target: str
    keep_alive: bool
    start: float
    start_mono: float
    error: int | None = None
    http10: bool = False
    user_agent: str | None = None
    if_none_match: str | None = None
    if_modified_since: str | None = None


class Site:
    """Answers requests from the model: lookup, robots.txt modes, a cache of rendered pages.

    With ``prerender`` every stored page is rendered up front (a trap page
    still on first request): a benchmark then measures the crawler, not the
    rendering of the pages it fetches, and a big web takes longer to start.
    """

    def __init__(
        self, web: Web, cache_size: int = RENDER_CACHE_SIZE, *, prerender: bool = False
    ) -> None:
        self.web = web
        self.robots_requests = [0] * len(web.hosts)
        self._cache: OrderedDict[str, Response] = OrderedDict()
        self._cache_size = cache_size
        self._rendered: dict[str, Response] = {}
        if prerender:
            self._rendered = {url: content.render(web, page) for url, page in web.pages.items()}

    def url_of(self, host: Host, target: str) -> str | None:
        if target.startswith("/"):
            url = host.origin + target
            # a crawler asks for canonical URLs, and a page's URL is canonical
            return url if url in self.web.pages else canonical(url)
        if target.lower().startswith(("http://", "https://")):  # absolute-form
            url = canonical(target)
            return None if url is None else canonical(host.origin + target_of(url))
        return None

    def respond(self, host: Host, url: str, request: Request | None = None) -> Response:
        if url.endswith("/robots.txt") and target_of(url) == "/robots.txt":
            return self._robots(host)
        if self.web.changes is not None:
            return self._changing(url, request)
        rendered = self._rendered.get(url)
        if rendered is not None:
            return rendered
        served = self.web.files.get(url)
        if served is not None:
            return Response(200, served[0], served[1])
        cached = self._cache.get(url)
        if cached is not None:
            self._cache.move_to_end(url)
            return cached
        page = self.web.page(url)
        response = content.not_found() if page is None else content.render(self.web, page)
        self._cache[url] = response
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return response

    def _changing(self, url: str, request: Request | None) -> Response:
        """A page of a web with a change schedule: its live version, with validators,
        304 to a conditional GET whose copy is live, 404 or 410 once it is gone."""
        schedule = self.web.changes
        assert schedule is not None
        if schedule.sitemap and target_of(url) == changes.SITEMAP_PATH:
            site = url[: -len(changes.SITEMAP_PATH)]
            return Response(
                200, "application/xml", changes.live_sitemap(self.web, site, time.time())
            )
        version = changes.live_version(self.web, url, time.time())
        if version is None:
            return content.not_found(schedule.gone_status(url))
        page = self.web.page(url)
        if page is None:
            return content.not_found()
        tag = changes.etag(url, version)
        modified = changes.http_date(schedule.modified_at(url, version))
        if request is not None and changes.not_modified(
            schedule, url, version, request.if_none_match, request.if_modified_since
        ):
            return Response(304, None, b"", etag=tag, last_modified=modified)
        key = f"{url}#v{version}"
        cached = self._cache.get(key)
        if cached is None:
            cached = replace(
                content.render(self.web, page, version), etag=tag, last_modified=modified
            )
            self._cache[key] = cached
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return cached

    def _robots(self, host: Host) -> Response:
        self.robots_requests[host.index] += 1
        if host.robots_mode == "missing":
            return content.not_found()
        failing = self.robots_requests[host.index] <= host.robots_failures
        if host.robots_mode == "flaky" and failing:
            return content.server_error()
        if host.robots_mode == "hang" and failing:  # the headers never come in time
            return Response(200, "text/plain; charset=utf-8", b"", behavior="stall-headers")
        return Response(200, "text/plain; charset=utf-8", content.robots_body(host))


class _Clock:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def date_line(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._line = f"Date: {email.utils.formatdate(now, usegmt=True)}\r\n".encode()
        return self._line


_REASONS = {s.value: s.phrase for s in HTTPStatus}


class HttpConnection(asyncio.Protocol):
    """One client connection to one host: parses requests, answers them in order."""

    def __init__(self, server: TestWebServer, host: Host) -> None:
        self.server = server
        self.host = host
        self.host_name = f"{host.address}:{host.port}"
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.discard = 0
        self.pending: deque[Request] = deque()
        self.worker: asyncio.Task | None = None
        self.refusing = False
        self.lost = False
        self.paused = False
        self._waiters: list[asyncio.Future] = []

    # ---- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.server.connections.discard(self)
        self._wake()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self.refusing:
            return
        self.buf += data
        self._parse()
        if self.pending and self.worker is None:
            self.worker = asyncio.get_running_loop().create_task(self._work())

    # ---- parsing

    def _parse(self) -> None:
        while not self.refusing:
            if self.discard:
                n = min(self.discard, len(self.buf))
                del self.buf[:n]
                self.discard -= n
                if self.discard:
                    return
            while self.buf[:2] == b"\r\n":  # stray CRLF between requests is allowed
                del self.buf[:2]
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD_BYTES:
                    self._refuse(431)
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            del self.buf[: end + 4]
            self.pending.append(self._request(head))
            if self.pending[-1].error is not None:
                self.refusing = True

    def _request(self, head: str) -> Request:
        start, start_mono = time.time(), time.monotonic()
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
            return Request("", lines[0][:200], False, start, start_mono, error=400)
        method, target, version = parts
        connection = ""
        length = 0
        agent = None
        conditional: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                return Request(method, target, False, start, start_mono, error=400)
            name = name.strip().lower()
            if name == "connection":
                connection = value.strip().lower()
            elif name == "user-agent":
                agent = value.strip()
            elif name in ("if-none-match", "if-modified-since"):
                conditional[name.replace("-", "_")] = value.strip()
            elif name == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    return Request(method, target, False, start, start_mono, error=400)
            elif name == "transfer-encoding":
                return Request(method, target, False, start, start_mono, error=501)
        tokens = {t.strip() for t in connection.split(",")}
        keep_alive = "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens
        self.discard = max(0, length)
        error = None if method in ("GET", "HEAD") else 405
        return Request(
            method,
            target,
            keep_alive,
            start,
            start_mono,
            error=error,
            http10=version == "HTTP/1.0",
            user_agent=agent,
            **conditional,
        )

    def _refuse(self, status: int) -> None:
        self.buf.clear()
        self.pending.append(Request("", "", False, time.time(), time.monotonic(), error=status))
        self.refusing = True

    # ---- answering

    async def _work(self) -> None:
        try:
            while self.pending and not self.lost:
                request = self.pending.popleft()
                keep = await self.server.answer(self, request)
                if not keep:
                    self.close()
                    return
        except Exception:  # one broken exchange must never take the server down
            log.exception("%s: request failed", self.host_name)
            self.close()
        finally:
            self.worker = None

    def write(self, data: bytes) -> None:
        if not self.lost and self.transport is not None:
            self.transport.write(data)

    async def drain(self) -> None:
        while self.paused and not self.lost:
            await self._wait(None)

    async def wait_lost(self, timeout: float) -> bool:
        """Sleep ``timeout`` seconds or until the client goes away; True if it went away."""
        deadline = time.monotonic() + timeout
        while not self.lost:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self._wait(left)
        return True

    async def _wait(self, timeout: float | None) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait([fut], timeout=timeout)
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(fut)

    def _wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class TestWebServer:
    """Serves ``web`` on listening sockets (one per host, in host order)."""

    __test__ = False

    def __init__(
        self,
        web: Web,
        *,
        latency_ms: float = 0.0,
        access_log: str | Path | None = None,
        flush_interval: float = DEFAULT_TESTWEB_LOG_FLUSH,
        prerender: bool = False,
    ) -> None:
        if latency_ms < 0:
            raise TestWebError("latency must be >= 0 ms")
        self.web = web
        self.site = Site(web, prerender=prerender)
        self.latency = latency_ms / 1000.0
        self.log = AccessLog(access_log, flush_interval) if access_log else None
        self.connections: set[HttpConnection] = set()
        self._servers: list[asyncio.AbstractServer] = []
        self._flusher: asyncio.Task | None = None
        self._clock = _Clock()

    async def start(self, sockets: list[socket.socket] | None = None) -> None:
        """Listen on ``sockets`` (default: bind every host's address and port)."""
        socks = bind_sockets(self.web) if sockets is None else sockets
        if len(socks) != len(self.web.hosts):
            raise TestWebError(f"{len(socks)} sockets for {len(self.web.hosts)} hosts")
        loop = asyncio.get_running_loop()
        for host, sock in zip(self.web.hosts, socks, strict=True):
            server = await loop.create_server(
                lambda host=host: HttpConnection(self, host), sock=sock
            )
            self._servers.append(server)
        if self.log is not None:
            self._flusher = loop.create_task(self.log.run())

    async def stop(self) -> None:
        """Stop listening, end open connections (their requests are logged aborted), flush."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        workers = [c.worker for c in list(self.connections) if c.worker is not None]
        if workers:
            await asyncio.wait(workers, timeout=2.0)
        await asyncio.sleep(0)  # let aborted handlers record their entries
        if self._flusher is not None:
            self._flusher.cancel()
        if self.log is not None:
            self.log.close()

    async def serve(self, stop: asyncio.Event, sockets: list[socket.socket] | None = None) -> None:
        """Serve until ``stop`` is set."""
        await self.start(sockets)
        try:
            await stop.wait()
        finally:
            await self.stop()

    # ---- one request

    async def answer(self, conn: HttpConnection, request: Request) -> bool:
        """Send the response to ``request``; whether the connection stays open."""
        url = None
        if request.error is not None:
            response = Response(request.error, "text/plain; charset=utf-8", b"bad request\n")
        else:
            url = self.site.url_of(conn.host, request.target)
            if url is None:
                response = Response(400, "text/plain; charset=utf-8", b"bad request target\n")
            else:
                response = self.site.respond(conn.host, url, request)
        keep = request.keep_alive and request.error is None and response.behavior == "normal"
        sent, aborted = 0, False
        if self.latency:
            aborted = await conn.wait_lost(self.latency)
        behavior = response.behavior
        if behavior == "stall-headers" and not aborted:
            aborted = await conn.wait_lost(self.web.slow_seconds)
        if not aborted:
            body = b"" if request.method == "HEAD" else response.body
            if behavior == "stall-body":
                body = body[: len(body) // 2]
            conn.write(self._head(response, request, keep, len(response.body)) + body)
            sent = len(body)
            await conn.drain()
            if behavior == "stall-body":
                await conn.wait_lost(self.web.slow_seconds)
            aborted = conn.lost
        if self.log is not None:
            self.log.record(
                host=conn.host_name,
                host_index=conn.host.index,
                method=request.method,
                path=request.target,
                url=url,
                status=response.status,
                sent=sent,
                start=request.start,
                end=time.time(),
                start_mono=request.start_mono,
                end_mono=time.monotonic(),
                aborted=aborted,
                agent=request.user_agent,
            )
        return keep and not aborted

    def _head(self, response: Response, request: Request, keep: bool, length: int) -> bytes:
        status = response.status
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nServer: srcrawl-testweb\r\n"
        ]
        if response.content_type:
            lines.append(f"Content-Type: {response.content_type}\r\n")
        if response.location:
            lines.append(f"Location: {response.location}\r\n")
        if response.etag:
            lines.append(f"ETag: {response.etag}\r\nLast-Modified: {response.last_modified}\r\n")
        if status == 405:
            lines.append("Allow: GET, HEAD\r\n")
        declared = response.declared_length if response.declared_length is not None else length
        lines.append(f"Content-Length: {declared}\r\n")
        if not keep:
            lines.append("Connection: close\r\n")
        elif request.http10:
            lines.append("Connection: keep-alive\r\n")
        head = "".join(lines).encode("latin-1")
        return head + self._clock.date_line() + b"\r\n"
