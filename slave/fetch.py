"""HTTP fetching for crawl slaves: one request, one :class:`FetchResult`, never an exception.

Requests go through libcurl (``pycurl``). A fetch costs about a quarter of
the CPU it cost through requests and urllib3 (0.20 against 0.74 ms on a
kept-alive loopback connection, the test web's pages), and a crawl slave
is CPU-bound: that is most of its time a page. Two ways in, same result:

- :meth:`Fetcher.fetch` blocks the calling thread. Each thread has its own
  easy handle; the handles share one connection cache, so a connection to
  a host opened by one thread is reused by whichever thread fetches from
  that host next (the master keeps one request in flight per host).
- :class:`FetchMulti` runs many fetches at once in the calling thread (a
  libcurl multi handle): the crawl slave's way, with no thread hand-offs.

Redirects are not followed: a 3xx comes back with its absolute
``Location`` in ``redirect`` and its body unread; the master decides
whether the target is in scope and unseen. Bodies are cut at ``max_bytes``
*decoded* bytes, so neither a 10 MB page nor a gzip bomb costs more than
the cap (libcurl hands over at most 16 KB of inflated data at a time, and
the transfer stops at the cap). No cookies, no proxies from the
environment, HTTP/1.1, certificates checked against certifi's bundle.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import certifi
import pycurl

from srcrawl.core.defaults import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FETCH_DEADLINE,
    DEFAULT_FETCH_HOST_POOLS,
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_USER_AGENT,
)
from srcrawl.queues.crawl_protocol import ERROR_ADDRESS_REFUSED, ERROR_CONNECT
from srcrawl.slave.fetch_policy import FetchPolicy

ERROR_SCHEME = "scheme"
"""The URL is not http or https; no request was sent."""
ERROR_BAD_URL = "bad_url"
"""The URL cannot be requested (no host, bad port, bad IPv6 literal, …)."""
ERROR_TIMEOUT = "timeout"
"""Connecting, waiting for bytes, or the whole fetch took too long."""
# ERROR_CONNECT: no connection (refused, unknown host, reset) or it closed before any
# response; part of the crawl protocol (the master backs off the host for it).
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
ERROR_OUT_OF_SCOPE = "out_of_scope"
"""The URL's host is outside the crawl's scope (the fetch policy); no request was sent."""
# ERROR_ADDRESS_REFUSED: every address of the host is one the fetch policy
# refuses; no connection was made. The master counts it apart, so it is part
# of the crawl protocol.
POLICY_ERRORS = frozenset({ERROR_OUT_OF_SCOPE, ERROR_ADDRESS_REFUSED})
"""The errors of a request the crawl's fetch policy did not let out."""

BODY_COMPLETE = "complete"
"""The whole body arrived (or there was none to send)."""
BODY_CAPPED = "capped"
"""The body was cut at ``max_bytes`` by the fetcher: what was kept is usable."""
BODY_INCOMPLETE = "incomplete"
"""The transfer failed part way (timeout, short body, broken connection): the body is partial."""
BODY_NONE = "none"
"""No response arrived at all."""

_TRANSIENT_ERRORS = frozenset({ERROR_TIMEOUT, ERROR_CONNECT, ERROR_TRUNCATED})

_STALL_CHECK = 0.05
"""Seconds between checks for fetches that wait too long for bytes."""
_DRIVER_GRACE = 0.2
"""Seconds between two calls of :meth:`FetchMulti.wait` beyond which the calling thread is
taken to have been away (busy elsewhere): its absence is not counted against any fetch."""
_BACKSTOP = 10
"""libcurl's own connect and total timeouts, in multiples of ours (see Fetcher)."""
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.5,*/*;q=0.1"
ACCEPT_ENCODINGS = "gzip, deflate"
"""What every request accepts (libcurl decodes the body before anyone sees it)."""


def request_head(url: str, user_agent: str, headers: Sequence[str] = ()) -> bytes:
    """The head of the GET a fetch of ``url`` sends, with ``headers`` (a conditional GET's)
    after the usual ones (for the WARC request record)."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    extra = "".join(f"{line}\r\n" for line in headers)
    return (
        f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: {user_agent}\r\n"
        f"Accept: {_ACCEPT}\r\nAccept-Encoding: {ACCEPT_ENCODINGS}\r\n{extra}\r\n"
    ).encode("latin-1", "replace")


# libcurl's error codes, by what they say about the server
_TIMEOUT_CODES = frozenset({pycurl.E_OPERATION_TIMEDOUT})
_BAD_URL_CODES = frozenset({pycurl.E_URL_MALFORMAT})
# 8 is CURLE_WEIRD_SERVER_REPLY, which pycurl still names by its FTP-only past;
# UNSUPPORTED_PROTOCOL: the scheme was checked before, so it is libcurl
# refusing an HTTP/0.9 answer (no status line)
_BAD_RESPONSE_CODES = frozenset({pycurl.E_FTP_WEIRD_SERVER_REPLY, pycurl.E_UNSUPPORTED_PROTOCOL})
_TRUNCATED_CODES = frozenset({pycurl.E_PARTIAL_FILE})
_DECODING_CODES = frozenset({pycurl.E_BAD_CONTENT_ENCODING})
_TLS_CODES = frozenset(
    getattr(pycurl, name)
    for name in (
        "E_SSL_CONNECT_ERROR",
        "E_SSL_PEER_CERTIFICATE",
        "E_PEER_FAILED_VERIFICATION",
        "E_SSL_CERTPROBLEM",
        "E_SSL_CIPHER",
        "E_SSL_CACERT",
        "E_SSL_CACERT_BADFILE",
        "E_SSL_SHUTDOWN_FAILED",
        "E_SSL_CRL_BADFILE",
        "E_SSL_ISSUER_ERROR",
        "E_SSL_PINNEDPUBKEYNOTMATCH",
        "E_SSL_INVALIDCERTSTATUS",
        "E_USE_SSL_FAILED",
        "E_SSL_ENGINE_NOTFOUND",
        "E_SSL_ENGINE_SETFAILED",
        "E_SSL_ENGINE_INITFAILED",
    )
    if hasattr(pycurl, name)
)


NOT_MODIFIED = 304
"""The answer to a conditional GET whose copy is current: no body, the connection kept."""


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
    retry_after: float | None = None
    """Seconds a 429 or 503 asked the client to wait (its ``Retry-After`` in seconds)."""
    ip: str = ""
    """The address the response came from ("" when no connection was made)."""

    @property
    def ok(self) -> bool:
        """A 2xx response whose body arrived whole (or up to the cap)."""
        return self.error is None and 200 <= self.status < 300

    @property
    def transient(self) -> bool:
        """A failure that may pass: worth another try later (timeout, broken or cut-off
        response, refused connection, 5xx, 429)."""
        if self.error is not None:
            return self.error in _TRANSIENT_ERRORS
        return self.status >= 500 or self.status == 429

    @property
    def body_state(self) -> str:
        """One of the ``BODY_*`` names: whether ``body`` is all the server meant to send."""
        if self.status == 0:
            return BODY_NONE
        if self.error is not None and self.error != ERROR_BAD_REDIRECT:
            return BODY_INCOMPLETE
        return BODY_CAPPED if self.truncated else BODY_COMPLETE


def _classify(code: int, status: int) -> str:
    """An ``ERROR_*`` name for libcurl's error ``code`` (``status``: 0 if no response)."""
    if code in _TIMEOUT_CODES:
        return ERROR_TIMEOUT
    if code in _BAD_URL_CODES:
        return ERROR_BAD_URL
    if code in _BAD_RESPONSE_CODES:
        return ERROR_BAD_RESPONSE
    if code in _TRUNCATED_CODES:
        return ERROR_TRUNCATED
    if code in _DECODING_CODES:
        return ERROR_DECODING
    if code in _TLS_CODES:
        return ERROR_TLS
    if code == pycurl.E_RECV_ERROR and status:
        return ERROR_TRUNCATED  # the response began, then the connection broke (or its chunking)
    return ERROR_CONNECT


class _Transfer:
    """One request's state while libcurl runs it: headers, body chunks, why it stopped."""

    __slots__ = (
        "away",
        "chunks",
        "connect_timeout",
        "deadline",
        "headers",
        "heard",
        "last",
        "limit",
        "read_timeout",
        "refused",
        "request_headers",
        "size",
        "started",
        "status",
        "stopped",
        "tag",
        "url",
    )

    def __init__(
        self, url: str, fetcher: Fetcher, tag: object = None, request_headers: Sequence[str] = ()
    ) -> None:
        self.url = url
        self.request_headers = request_headers
        self.limit = fetcher.max_bytes
        self.read_timeout = fetcher.read_timeout
        self.connect_timeout = fetcher.connect_timeout
        self.deadline = fetcher.deadline
        self.tag = tag
        self.chunks: list[bytes] = []
        self.size = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.stopped = ""  # "cap" or "redirect": we ended the transfer, libcurl says WRITE_ERROR
        self.refused = ""  # why the fetch policy refused an address of the host
        self.started = self.last = time.monotonic()
        self.heard = False  # a byte of the response arrived
        self.away = 0.0  # seconds the driving thread was busy elsewhere since the start

    def header(self, line: bytes) -> int | None:
        self.last = time.monotonic()
        self.heard = True
        if line.startswith(b"HTTP/"):
            # a new response (after a 100 Continue, say): its headers replace the last one's
            parts = line.split(None, 2)
            try:
                self.status = int(parts[1])
            except (IndexError, ValueError):
                self.status = 0
            self.headers = {}
            return None
        if line in (b"\r\n", b"\n"):
            if 300 <= self.status < 400 and self.status != NOT_MODIFIED:
                self.stopped = "redirect"  # the body of a redirect is never read
                return 0
            return None
        name, sep, value = line.decode("latin-1").partition(":")
        if sep:
            name = name.strip().lower()
            value = value.strip()
            known = self.headers.get(name)
            self.headers[name] = value if known is None else f"{known}, {value}"
        return None

    def write(self, data: bytes) -> int | None:
        self.last = time.monotonic()
        self.heard = True
        self.chunks.append(data)
        self.size += len(data)
        if self.size > self.limit:  # one byte past the cap tells a capped body from an exact one
            self.stopped = "cap"
            return 0
        return None

    def result(self, code: int, message: str) -> FetchResult:
        r = FetchResult(url=self.url, status=self.status, headers=self.headers)
        r.content_type = self.headers.get("content-type", "")
        body = b"".join(self.chunks)
        if self.size > self.limit:
            r.truncated = True
            body = body[: self.limit]
        if code and not (code == pycurl.E_WRITE_ERROR and self.stopped):
            r.error = _classify(code, self.status)
            r.detail = f"libcurl error {code}: {message}"[:300]
            if self.refused and not self.status:
                r.error = ERROR_ADDRESS_REFUSED
                r.detail = self.refused[:300]
        if self.stopped == "redirect" or (300 <= self.status < 400 and r.error is None):
            body = b""
            _redirect(r)
        r.body = body
        r.elapsed_ms = (time.monotonic() - self.started) * 1000
        retry_after = self.headers.get("retry-after", "").strip()
        if retry_after.isdigit() and self.status in (429, 503):
            r.retry_after = float(retry_after)
        return r


def _redirect(result: FetchResult) -> None:
    location = result.headers.get("location")
    if location is None:
        return
    try:
        target = urljoin(result.url, location.strip())
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"redirect to {location!r}")
    except ValueError as e:
        result.error = ERROR_BAD_REDIRECT
        result.detail = f"{type(e).__name__}: {e}"[:300]
        return
    result.redirect = target


class _SocketGate:
    """libcurl's socket opener for one transfer: refuses the addresses the policy refuses."""

    __slots__ = ("policy", "seed_host", "transfer")

    def __init__(self, policy: FetchPolicy, transfer: _Transfer) -> None:
        self.policy = policy
        self.transfer = transfer
        self.seed_host = policy.seed_host(transfer.url)

    def __call__(self, _purpose: int, address: tuple) -> socket.socket | int:
        family, socktype, protocol, sockaddr = address
        why = self.policy.refuse_address(sockaddr[0], self.seed_host)
        if why is not None:
            self.transfer.refused = why
            return pycurl.SOCKET_BAD  # libcurl tries the host's next address, if any
        try:
            return socket.socket(family, socktype, protocol)  # pycurl keeps a dup of it
        except OSError:
            return pycurl.SOCKET_BAD

    def before_request(self, address: str, _local: str, _port: int, _local_port: int) -> int:
        """Checks the address again just before the request goes out, on a reused connection too."""
        why = self.policy.refuse_address(address, self.seed_host)
        if why is None:
            return pycurl.PREREQFUNC_OK
        self.transfer.refused = why
        return pycurl.PREREQFUNC_ABORT


def _refused(url: str, policy: FetchPolicy | None = None) -> FetchResult | None:
    """The result of a URL no request is sent for (not http(s), unparsable, out of scope),
    else None."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            detail = f"scheme {scheme!r} is not fetched"
            return FetchResult(url=url, error=ERROR_SCHEME, detail=detail)
        if not parts.hostname:  # libcurl would take http:///path as a host named "path"
            raise ValueError(f"no host in {url!r}")
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError as e:
        return FetchResult(url=url, error=ERROR_BAD_URL, detail=f"ValueError: {e}"[:300])
    why = policy.refuse_url(url) if policy is not None else None
    if why is not None:
        return FetchResult(url=url, error=ERROR_OUT_OF_SCOPE, detail=why[:300])
    return None


class Fetcher:
    """Fetches URLs over http(s) with kept-alive connections, caps and timeouts.

    ``connect_timeout`` bounds connecting; ``read_timeout`` how long no byte
    may arrive once connected; ``deadline`` bounds the whole fetch. Idle
    connections are kept to the ``host_pools`` hosts fetched from last.
    Safe to share between threads: each thread drives a :class:`FetchMulti`
    of its own, and they share one connection cache.
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
        policy: FetchPolicy | None = None,
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
        self.host_pools = host_pools
        self.policy = policy
        self._share = pycurl.CurlShare()
        self._share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_CONNECT)
        self._share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_DNS)
        self._local = threading.local()
        self._multis: list[FetchMulti] = []
        self._lock = threading.Lock()
        self._options = (
            (pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS),
            (pycurl.FOLLOWLOCATION, 0),
            (pycurl.NOSIGNAL, 1),
            # libcurl's own timers run on the wall clock and would blame a server
            # for the time the driving thread was busy elsewhere: FetchMulti
            # enforces the timeouts itself; libcurl's are only a backstop
            (pycurl.CONNECTTIMEOUT_MS, max(1, int(_BACKSTOP * connect_timeout * 1000))),
            (pycurl.TIMEOUT_MS, max(1, int(_BACKSTOP * deadline * 1000))),
            (pycurl.ACCEPT_ENCODING, ACCEPT_ENCODINGS),  # decoders that stop at the cap
            (pycurl.USERAGENT, user_agent),
            (pycurl.HTTPHEADER, [f"Accept: {_ACCEPT}"]),
            (pycurl.PROXY, ""),  # never a proxy from the environment
            (pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1),
            (pycurl.CAINFO, certifi.where()),
            (pycurl.MAXCONNECTS, max(1, host_pools)),
        )

    def configure(self, easy: pycurl.Curl) -> None:
        """Give ``easy`` this fetcher's settings (once per handle)."""
        for option, value in self._options:
            easy.setopt(option, value)
        easy.configured_by = self  # type: ignore[attr-defined]

    def _prepare(self, easy: pycurl.Curl, transfer: _Transfer) -> None:
        if getattr(easy, "configured_by", None) is not self:
            self.configure(easy)
        easy.setopt(pycurl.URL, transfer.url)
        easy.setopt(pycurl.WRITEFUNCTION, transfer.write)
        easy.setopt(pycurl.HEADERFUNCTION, transfer.header)
        # set on every request: a handle is reused, and a conditional GET's headers
        # must not stay on the next request it makes
        easy.setopt(pycurl.HTTPHEADER, [f"Accept: {_ACCEPT}", *transfer.request_headers])
        if self.policy is None:
            easy.unsetopt(pycurl.OPENSOCKETFUNCTION)
            easy.unsetopt(pycurl.PREREQFUNCTION)
            return
        # every connection is checked where it goes, after DNS, before it is
        # opened; every request again on the connection it is about to use (a
        # kept-alive one may have been opened under an earlier policy)
        gate = _SocketGate(self.policy, transfer)
        easy.setopt(pycurl.OPENSOCKETFUNCTION, gate)
        easy.setopt(pycurl.PREREQFUNCTION, gate.before_request)
        if self.policy.resolve:
            easy.setopt(pycurl.RESOLVE, self.policy.resolve)

    def close(self) -> None:
        """Close every handle this fetcher made, and their connections."""
        with self._lock:
            multis, self._multis = self._multis, []
        for multi in multis:
            multi.close()
        self._share.close()

    def fetch(self, url: str, headers: Sequence[str] = ()) -> FetchResult:
        """GET ``url`` once (with ``headers``, e.g. a conditional GET's), without following
        redirects; never raises."""
        multi = getattr(self._local, "multi", None)
        if multi is None:
            multi = self._local.multi = FetchMulti(self.host_pools, share=self._share)
            with self._lock:
                self._multis.append(multi)
        multi.add(self, url, None, headers)
        while True:
            done = multi.wait(1.0)
            if done:
                return done[0][1]


def _discard(data: bytes) -> None:
    return None


class FetchMulti:
    """Many fetches at once, driven by the calling thread (a libcurl multi handle).

    :meth:`add` starts a fetch with a tag; :meth:`wait` waits for network
    activity (or for a file descriptor of the caller's), moves every fetch
    on and returns the ``(tag, FetchResult)`` of those that finished. Not
    thread-safe: one thread owns it. Keeps idle connections to
    ``host_pools`` hosts, in ``share``'s connection cache when given.
    """

    def __init__(
        self, host_pools: int = DEFAULT_FETCH_HOST_POOLS, *, share: pycurl.CurlShare | None = None
    ) -> None:
        self._multi = pycurl.CurlMulti()
        self._multi.setopt(pycurl.M_MAXCONNECTS, max(1, host_pools))
        self._share = share
        self._free: list[pycurl.Curl] = []
        self._running: dict[pycurl.Curl, _Transfer] = {}
        self._done: list[tuple[object, FetchResult]] = []
        self._next_check = 0.0
        self._left = time.monotonic()  # when wait() last returned to its caller

    def __len__(self) -> int:
        """Fetches started and not yet returned by :meth:`wait`."""
        return len(self._running) + len(self._done)

    def add(self, fetcher: Fetcher, url: str, tag: object, headers: Sequence[str] = ()) -> None:
        """Start fetching ``url`` with ``fetcher``'s settings and ``headers`` beside them;
        ``wait`` returns it with ``tag``."""
        refused = _refused(url, fetcher.policy)
        if refused is not None:
            self._done.append((tag, refused))
            return
        if self._free:
            easy = self._free.pop()
        else:
            easy = pycurl.Curl()
            if self._share is not None:
                easy.setopt(pycurl.SHARE, self._share)
        transfer = _Transfer(url, fetcher, tag, headers)
        try:
            fetcher._prepare(easy, transfer)
        except pycurl.error as e:  # a URL libcurl will not even take (a NUL byte, say)
            self._free.append(easy)
            self._done.append((tag, transfer.result(pycurl.E_URL_MALFORMAT, str(e))))
            return
        self._running[easy] = transfer
        self._multi.add_handle(easy)

    def wait(self, timeout: float, also: Iterable[int] = ()) -> list[tuple[object, FetchResult]]:
        """Wait up to ``timeout`` s for activity on the fetches' sockets or ``also``; collect.

        Returns at once when fetches have finished already.
        """
        gone = time.monotonic() - self._left
        if gone > _DRIVER_GRACE and self._running:
            self._excuse(gone)
        try:
            return self._wait(timeout, also)
        finally:
            self._left = time.monotonic()

    def tick(self) -> list[tuple[object, FetchResult]]:
        """Move the fetches on without waiting (the ones just added connect or send their
        request now, not at the next :meth:`wait`); return those that finished."""
        if self._running:
            self._perform()
        done, self._done = self._done, []
        return done

    def _excuse(self, gone: float) -> None:
        """The caller was away ``gone`` s: that time counts against no running fetch.

        Bytes that arrived meanwhile wait in the socket; the server was not
        slow, the driver was (parsing, a slow store, a starved thread).
        """
        for t in self._running.values():
            t.away += gone
            t.last += gone

    def _wait(self, timeout: float, also: Iterable[int]) -> list[tuple[object, FetchResult]]:
        if not self._done:
            self._perform()
        if not self._done:
            if self._running:
                # wake up in time to notice a fetch that waits too long for bytes
                timeout = min(timeout, _STALL_CHECK)
            read, write, error = self._multi.fdset()
            hint = self._multi.timeout()  # ms until libcurl has timers to run, -1: none
            if hint >= 0:
                timeout = min(timeout, hint / 1000)
            extra = list(also)
            if read or write or error or extra:
                try:
                    select.select(read + extra, write, error, max(0.0, timeout))
                except (OSError, ValueError):
                    time.sleep(0.001)  # a descriptor closed meanwhile: go round again
            elif timeout > 0:
                time.sleep(min(timeout, 0.005))  # libcurl resolving or connecting, no socket yet
            self._perform()
        now = time.monotonic()
        if self._running and now >= self._next_check:
            self._next_check = now + _STALL_CHECK
            self._stalled(now)
        done, self._done = self._done, []
        return done

    def _perform(self) -> None:
        multi = self._multi
        while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        while True:
            queued, ok, failed = multi.info_read()
            for easy in ok:
                self._finish(easy, 0, "")
            for easy, code, message in failed:
                self._finish(easy, code, message)
            if not queued:
                break

    def _stalled(self, now: float) -> None:
        """End the fetches past a timeout: connecting, waiting for a byte, or in all.

        Measured in network time: the time the caller was away is excused.
        """
        for easy, t in list(self._running.items()):
            taken = now - t.started - t.away
            if taken > t.deadline:
                why = f"the fetch took longer than {t.deadline:g} s"
            elif t.heard:
                if now - t.last <= t.read_timeout:
                    continue
                why = f"no bytes for {t.read_timeout:g} s"
            elif taken <= min(t.connect_timeout, t.read_timeout):
                continue
            else:
                # nothing arrived yet: the wait for bytes starts once the
                # request is on its way (0 until then: still connecting)
                sent = easy.getinfo(pycurl.PRETRANSFER_TIME)
                if not sent:
                    if taken <= t.connect_timeout:
                        continue
                    why = f"no connection within {t.connect_timeout:g} s"
                elif taken - sent <= t.read_timeout:
                    continue
                else:
                    why = f"no bytes for {t.read_timeout:g} s"
            self._finish(easy, pycurl.E_OPERATION_TIMEDOUT, why)

    def _finish(self, easy: pycurl.Curl, code: int, message: str) -> None:
        try:
            ip = easy.getinfo(pycurl.PRIMARY_IP) or ""
        except pycurl.error:
            ip = ""
        self._multi.remove_handle(easy)  # mid-transfer, this closes its connection
        transfer = self._running.pop(easy)
        # the callbacks hold the transfer (and its chunks) until replaced
        easy.setopt(pycurl.WRITEFUNCTION, _discard)
        easy.setopt(pycurl.HEADERFUNCTION, _discard)
        easy.unsetopt(pycurl.OPENSOCKETFUNCTION)
        easy.unsetopt(pycurl.PREREQFUNCTION)
        self._free.append(easy)
        result = transfer.result(code, message)
        result.ip = ip
        self._done.append((transfer.tag, result))

    def close(self) -> None:
        """Abandon every running fetch and close the handles."""
        for easy in list(self._running):
            self._multi.remove_handle(easy)
            easy.close()
        self._running.clear()
        for easy in self._free:
            easy.close()
        self._free.clear()
        self._multi.close()
