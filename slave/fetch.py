"""HTTP fetching for crawl slaves: one request, one :class:`FetchResult`, never an exception.

Requests go straight to one ``requests`` transport adapter (``HTTPAdapter``)
shared by the fetch threads: its urllib3 pool manager is thread-safe and
keeps a connection alive per host for whichever thread fetches from that
host next (the master keeps one request in flight per host, so each host
goes from thread to thread). A ``Session`` would add nothing a crawler uses
(cookies, proxies and .netrc from the environment, redirect following,
hooks) yet cost more CPU than urllib3 itself, per request. Redirects are not
followed: a 3xx comes back with its absolute ``Location`` in ``redirect``,
and the master decides whether the target is in scope and unseen. Bodies are
streamed and cut at ``max_bytes`` *decoded* bytes, so neither a 10 MB page
nor a gzip bomb costs more than the cap; urllib3 (≥ 2.7) decompresses only
as much as is read.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from srcrawl.defaults import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FETCH_DEADLINE,
    DEFAULT_FETCH_HOST_POOLS,
    DEFAULT_FETCH_THREADS,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_USER_AGENT,
)

ERROR_SCHEME = "scheme"
"""The URL is not http or https; no request was sent."""
ERROR_BAD_URL = "bad_url"
"""The URL cannot be requested (no host, bad port, bad IPv6 literal, …)."""
ERROR_TIMEOUT = "timeout"
"""Connecting, waiting for bytes, or the whole fetch took too long."""
ERROR_CONNECT = "connect"
"""No connection (refused, unknown host, reset) or it closed before any response."""
ERROR_BAD_RESPONSE = "bad_response"
"""What came back is not HTTP (garbage status line, malformed headers)."""
ERROR_TRUNCATED = "truncated"
"""The connection ended before the body did (short Content-Length, broken chunking)."""
ERROR_DECODING = "decoding"
"""The body's Content-Encoding (gzip, deflate) does not decode."""
ERROR_TLS = "tls"
"""The TLS handshake or certificate check failed."""
ERROR_BAD_REDIRECT = "bad_redirect"
"""A 3xx whose Location is malformed or not http(s)."""

_CHUNK = 64 * 1024
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.5,*/*;q=0.1"


@dataclass(slots=True)
class FetchResult:
    """The outcome of one fetch.

    ``status`` is the HTTP status, 0 when no response arrived. ``body`` holds
    at most ``max_bytes`` decoded bytes (``truncated`` says the response had
    more). ``error`` is None or one of the ``ERROR_*`` names; a body read
    before an error is kept. ``redirect`` is the absolute Location of a 3xx.
    """

    url: str
    status: int = 0
    content_type: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    truncated: bool = False
    elapsed_ms: float = 0.0
    redirect: str | None = None
    error: str | None = None
    detail: str = ""
    """A human-readable account of ``error`` (for logs, not for decisions)."""

    @property
    def ok(self) -> bool:
        """A 2xx response whose body arrived whole (or up to the cap)."""
        return self.error is None and 200 <= self.status < 300


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps (arguments, causes, contexts, reasons)."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
        for linked in (e.__cause__, e.__context__, getattr(e, "reason", None)):
            if isinstance(linked, BaseException):
                stack.append(linked)


def _classify(exc: BaseException) -> str:
    """Map an exception raised while fetching to an ``ERROR_*`` name."""
    if isinstance(exc, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
        return ERROR_TIMEOUT
    if isinstance(exc, (requests.exceptions.SSLError, urllib3.exceptions.SSLError)):
        return ERROR_TLS
    if isinstance(exc, (requests.exceptions.ContentDecodingError, urllib3.exceptions.DecodeError)):
        return ERROR_DECODING
    if isinstance(
        exc,
        (
            requests.exceptions.InvalidURL,
            requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema,
            urllib3.exceptions.LocationValueError,
            UnicodeError,
            ValueError,
        ),
    ):
        return ERROR_BAD_URL
    if isinstance(exc, (requests.exceptions.ChunkedEncodingError, http.client.IncompleteRead)):
        return ERROR_TRUNCATED
    # requests wraps urllib3 wraps http.client: look at the whole chain for
    # what the server actually did.
    for e in _chain(exc):
        if isinstance(e, http.client.IncompleteRead):
            return ERROR_TRUNCATED
        if isinstance(e, http.client.RemoteDisconnected):
            return ERROR_CONNECT  # accepted, then closed without a word
        if isinstance(e, (http.client.HTTPException, urllib3.exceptions.HeaderParsingError)):
            return ERROR_BAD_RESPONSE
        if isinstance(e, urllib3.exceptions.ProtocolError) and "IncompleteRead" in str(e):
            return ERROR_TRUNCATED
    return ERROR_CONNECT


def _closed_by_server(exc: BaseException) -> bool:
    """Whether ``exc`` says the server closed the connection before any response."""
    return any(isinstance(e, http.client.RemoteDisconnected) for e in _chain(exc))


class _Adapter(HTTPAdapter):
    """requests' transport adapter, less the cookies and the proxies.

    A crawler keeps no cookies, yet ``HTTPAdapter.build_response`` parses
    every response's ``Set-Cookie`` into a new cookie jar (through
    ``http.cookiejar``'s mock request and response): about a tenth of a
    fetch's CPU. The rest of the response is built as it builds it.
    """

    # A crawler talks to each host itself, never through a proxy: these two
    # hooks (requests documents them for subclasses) skip select_proxy, which
    # parses the URL again on each call, twice a request.
    def get_connection_with_tls_context(
        self,
        request: requests.PreparedRequest,
        verify: Any,
        proxies: Any = None,
        cert: Any = None,
    ) -> Any:
        try:
            host, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
        except ValueError as e:
            raise requests.exceptions.InvalidURL(e, request=request) from e
        return self.poolmanager.connection_from_host(**host, pool_kwargs=pool_kwargs)

    def request_url(self, request: requests.PreparedRequest, proxies: Any) -> str:
        return request.path_url

    def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        response = requests.Response()
        response.status_code = resp.status
        response.headers = CaseInsensitiveDict(resp.headers)
        response.raw = resp
        response.reason = resp.reason
        response.url = req.url
        response.request = req
        response.connection = self
        return response


class Fetcher:
    """Fetches URLs over http(s) with kept-alive connections, caps and timeouts.

    ``connect_timeout`` and ``read_timeout`` bound connecting and each wait
    for bytes; ``deadline`` bounds the whole fetch. Idle connections are
    kept to the ``host_pools`` hosts fetched from last, up to ``threads``
    per host (the fetch threads sharing this fetcher: under the ``hash``
    queue policy they may all fetch from one host at once). Safe to share
    between threads.
    """

    def __init__(
        self,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        user_agent: str = DEFAULT_USER_AGENT,
        *,
        deadline: float = DEFAULT_FETCH_DEADLINE,
        host_pools: int = DEFAULT_FETCH_HOST_POOLS,
        threads: int = DEFAULT_FETCH_THREADS,
    ) -> None:
        if connect_timeout <= 0 or read_timeout <= 0 or deadline <= 0:
            raise ValueError("fetch timeouts must be positive")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_bytes = max_bytes
        self.user_agent = user_agent
        self.deadline = deadline
        self._headers = CaseInsensitiveDict(
            {
                "User-Agent": user_agent,
                "Accept": _ACCEPT,
                # Only codecs whose streaming decoders honour read limits.
                "Accept-Encoding": "gzip, deflate",
            }
        )
        # No Session, so no proxies: a crawler talks to each host itself (the
        # environment's HTTP(S)_PROXY and .netrc were never applied before either)
        self._adapter = _Adapter(
            pool_connections=host_pools, pool_maxsize=max(1, threads), max_retries=0
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._adapter.close()

    def fetch(self, url: str) -> FetchResult:
        """GET ``url`` once, without following redirects; never raises."""
        result = FetchResult(url=url)
        try:
            scheme = urlsplit(url).scheme.lower()
        except ValueError as e:
            return self._failed(result, ERROR_BAD_URL, e)
        if scheme not in ("http", "https"):
            result.error, result.detail = ERROR_SCHEME, f"scheme {scheme!r} is not fetched"
            return result
        started = time.monotonic()
        try:
            try:
                response = self._get(url)
            except requests.ConnectionError as e:
                # a kept-alive connection the server had closed meanwhile: what a
                # browser does, send the GET once more on a new connection
                if not _closed_by_server(e):
                    raise
                response = self._get(url)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            result.elapsed_ms = (time.monotonic() - started) * 1000
            return self._failed(result, _classify(e), e)
        try:
            result.status = response.status_code
            result.headers = dict(response.headers.lower_items())
            result.content_type = result.headers.get("content-type", "")
            if 300 <= result.status < 400:
                self._redirect(result, response)
            else:
                self._read_body(result, response, started)
        finally:
            response.close()
            result.elapsed_ms = (time.monotonic() - started) * 1000
        return result

    def _get(self, url: str) -> requests.Response:
        request = requests.PreparedRequest()
        request.prepare_method("GET")
        request.prepare_url(url, None)  # the checks and IDNA encoding Session.get does
        request.headers = self._headers.copy()
        return self._adapter.send(
            request, stream=True, timeout=(self.connect_timeout, self.read_timeout)
        )

    @staticmethod
    def _failed(result: FetchResult, error: str, exc: BaseException) -> FetchResult:
        result.error = error
        result.detail = f"{type(exc).__name__}: {exc}"[:300]
        return result

    @staticmethod
    def _redirect(result: FetchResult, response: requests.Response) -> None:
        location = response.headers.get("location")
        if location is None:
            return
        try:
            target = urljoin(result.url, location.strip())
            parts = urlsplit(target)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"redirect to {location!r}")
        except ValueError as e:
            Fetcher._failed(result, ERROR_BAD_REDIRECT, e)
            return
        result.redirect = target

    def _read_body(self, result: FetchResult, response: requests.Response, started: float) -> None:
        """Stream the body into ``result`` up to the cap, the deadline or an error."""
        raw = response.raw
        limit = self.max_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                # read1 returns whatever has arrived, so the deadline is
                # checked even when a server drips bytes; one byte past the
                # cap tells a capped body from one that ends exactly at it.
                chunk = raw.read1(min(_CHUNK, limit + 1 - size), decode_content=True)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    result.truncated = True
                    break
                if time.monotonic() - started > self.deadline:
                    result.error = ERROR_TIMEOUT
                    result.detail = f"body not complete after {self.deadline:g} s"
                    break
        except (
            requests.RequestException,
            urllib3.exceptions.HTTPError,
            http.client.HTTPException,
            OSError,
            ValueError,
        ) as e:
            self._failed(result, _classify(e), e)
        body = b"".join(chunks)
        result.body = body[:limit] if size > limit else body
