"""The fetcher against a real HTTP server on 127.0.0.1 that misbehaves on purpose."""

from __future__ import annotations

import gzip
import os
import socket
import threading
import time
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from srcrawl.slave.fetch import (
    ERROR_BAD_REDIRECT,
    ERROR_BAD_RESPONSE,
    ERROR_BAD_URL,
    ERROR_CONNECT,
    ERROR_DECODING,
    ERROR_SCHEME,
    ERROR_TIMEOUT,
    ERROR_TRUNCATED,
    Fetcher,
    FetchResult,
)

PAGE = "<html><head><title>t</title></head><body><p>中文 page</p></body></html>".encode()
BIG = 10 * 1024 * 1024
CAP = 1024 * 1024


def _bomb() -> bytes:
    """About 100 KB of gzip that inflates to 100 MB of zeros."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    return b"".join([*(c.compress(block) for _ in range(100)), c.flush()])


BOMB = _bomb()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits: ClassVar[Counter[str]] = Counter()
    peers: ClassVar[list[tuple[str, int]]] = []

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def send(self, status: int, body: bytes, ctype: str | None = "text/html", **headers) -> None:
        self.send_response(status)
        if ctype is not None:
            self.send_header("Content-Type", ctype)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path
        Handler.hits[path] += 1
        Handler.peers.append(self.client_address)
        plain = PLAIN.get(path)
        if plain is not None:
            status, body, ctype, headers = plain
            self.send(status, body, ctype, **headers)
        elif path.startswith("/status/"):
            self.send(int(path.rsplit("/", 1)[1]), b"status page")
        else:  # one method per misbehaviour
            getattr(self, MISBEHAVIOURS.get(path, "not_found"))()

    def not_found(self) -> None:
        self.send(404, b"no such page")

    def chunked_big(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"b" * 65536
        try:
            for _ in range(BIG // len(chunk)):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client stopped reading at its cap

    def truncated(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"<p>only part" + b"." * 88)
        self.close_connection = True

    def garbage(self) -> None:
        self.wfile.write(b"\x00\x01\xffNOT HTTP AT ALL\r\n\r\n")
        self.close_connection = True

    def hangup(self) -> None:
        self.close_connection = True  # closes without answering

    def binary(self) -> None:
        self.send(200, os.urandom(50_000), "text/html")

    def slow(self) -> None:
        time.sleep(1.5)
        self.send(200, PAGE)

    def drip(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", "100")
        self.end_headers()
        try:
            for _ in range(40):
                self.wfile.write(b"d")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass
        self.close_connection = True

    def then_close(self) -> None:  # keep-alive promised, then the server hangs up
        self.send(200, PAGE)
        self.close_connection = True

    def echo_cookie(self) -> None:
        self.send(200, self.headers.get("Cookie", "").encode(), "text/plain")

    def gzip_page(self) -> None:
        self.send(200, gzip.compress(PAGE), "text/html", Content_Encoding="gzip")


GZIP_GARBAGE = b"\x1f\x8b\x08\x00garbage, not deflate"
# path → (status, body, Content-Type, headers): the pages that are one plain response
PLAIN: dict[str, tuple[int, bytes, str | None, dict[str, str]]] = {
    "/ok": (200, PAGE, "text/html; charset=utf-8", {"X_Custom": "Yes"}),
    "/no-type": (200, b"plain bytes", None, {}),
    "/exact": (200, b"x" * CAP, "text/html", {}),
    "/big": (200, b"<p>" + b"a" * (BIG - 3), "text/html", {}),
    "/set-cookie": (200, PAGE, "text/html", {"Set_Cookie": "session=abc; Path=/"}),
    "/redirect": (302, b"", "text/html", {"Location": "/ok?from=redirect"}),
    "/redirect-abs": (301, b"moved", "text/html", {"Location": "http://127.0.0.2:9/elsewhere"}),
    "/redirect-bad": (302, b"", "text/html", {"Location": "http://[::1/broken"}),
    "/redirect-ftp": (302, b"", "text/html", {"Location": "ftp://127.0.0.1/file"}),
    "/redirect-huge": (302, BOMB, "text/html", {"Content_Encoding": "gzip", "Location": "/ok"}),
    "/redirect-none": (302, b"", "text/html", {}),
    "/gzip-bomb": (200, BOMB, "text/html", {"Content_Encoding": "gzip"}),
    "/gzip-bad": (200, GZIP_GARBAGE, "text/html", {"Content_Encoding": "gzip"}),
}
# path → the Handler method that misbehaves so
MISBEHAVIOURS = {
    "/chunked-big": "chunked_big",
    "/truncated": "truncated",
    "/garbage": "garbage",
    "/hangup": "hangup",
    "/binary": "binary",
    "/slow": "slow",
    "/drip": "drip",
    "/then-close": "then_close",
    "/echo-cookie": "echo_cookie",
    "/gzip": "gzip_page",
}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that stop reading at their cap reset the connection


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(connect_timeout=2, read_timeout=3, max_bytes=CAP, user_agent="srcrawl-test")
    yield f
    f.close()


def test_a_page_comes_back_with_lowercase_headers(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/ok")
    assert r.ok and r.status == 200 and r.error is None
    assert r.body == PAGE and not r.truncated
    assert r.content_type == "text/html; charset=utf-8"
    assert r.headers["x-custom"] == "Yes" and "content-length" in r.headers
    assert r.redirect is None and r.elapsed_ms > 0 and r.url == server + "/ok"


def test_missing_content_type_is_empty(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/no-type")
    assert r.ok and r.content_type == "" and r.body == b"plain bytes"


@pytest.mark.parametrize("status", [204, 404, 410, 500, 503])
def test_status_codes_are_reported_not_raised(server: str, fetcher: Fetcher, status: int) -> None:
    r = fetcher.fetch(f"{server}/status/{status}")
    assert r.status == status and r.error is None
    assert r.ok == (status < 300)


def test_a_body_of_exactly_the_cap_is_not_truncated(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/exact")
    assert r.ok and len(r.body) == CAP and not r.truncated


@pytest.mark.parametrize("path", ["/big", "/chunked-big"])
def test_a_10mb_page_is_cut_at_the_cap(server: str, fetcher: Fetcher, path: str) -> None:
    r = fetcher.fetch(server + path)
    assert r.ok and r.truncated and len(r.body) == CAP
    assert r.body[:3] in (b"<p>", b"bbb")


def test_a_short_body_keeps_what_arrived(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/truncated")
    assert r.status == 200 and r.error == ERROR_TRUNCATED and not r.ok
    assert r.body == b"<p>only part" + b"." * 88


def test_garbage_instead_of_http(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/garbage")
    assert r.status == 0 and r.error == ERROR_BAD_RESPONSE and r.body == b""
    assert r.detail


def test_a_server_that_hangs_up(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/hangup")
    assert r.status == 0 and r.error == ERROR_CONNECT


def test_a_dead_host_is_a_connect_error(fetcher: Fetcher) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    r = fetcher.fetch(f"http://127.0.0.1:{port}/")
    assert r.status == 0 and r.error == ERROR_CONNECT and r.body == b""


def test_binary_served_as_html_is_just_bytes(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/binary")
    assert r.ok and len(r.body) == 50_000 and r.content_type == "text/html"


def test_a_slow_response_times_out(server: str) -> None:
    f = Fetcher(connect_timeout=1, read_timeout=0.3, max_bytes=CAP, user_agent="t")
    t0 = time.monotonic()
    r = f.fetch(server + "/slow")
    assert r.status == 0 and r.error == ERROR_TIMEOUT
    assert time.monotonic() - t0 < 1.4
    f.close()


def test_a_dripping_body_is_stopped_by_the_deadline(server: str) -> None:
    f = Fetcher(connect_timeout=1, read_timeout=2, max_bytes=CAP, user_agent="t", deadline=0.5)
    t0 = time.monotonic()
    r = f.fetch(server + "/drip")
    took = time.monotonic() - t0
    assert r.status == 200 and r.error == ERROR_TIMEOUT
    assert 1 <= len(r.body) < 20 and set(r.body) == {ord("d")}
    assert took < 1.5
    f.close()


def test_redirects_are_reported_not_followed(server: str, fetcher: Fetcher) -> None:
    before = Handler.hits["/ok?from=redirect"]
    r = fetcher.fetch(server + "/redirect")
    assert r.status == 302 and r.error is None and r.body == b""
    assert r.redirect == server + "/ok?from=redirect"
    assert Handler.hits["/ok?from=redirect"] == before
    r = fetcher.fetch(server + "/redirect-abs")
    assert r.status == 301 and r.redirect == "http://127.0.0.2:9/elsewhere"


@pytest.mark.parametrize("path", ["/redirect-bad", "/redirect-ftp"])
def test_a_bad_location_is_an_error(server: str, fetcher: Fetcher, path: str) -> None:
    r = fetcher.fetch(server + path)
    assert r.status == 302 and r.redirect is None and r.error == ERROR_BAD_REDIRECT


def test_a_redirect_body_is_never_read(server: str, fetcher: Fetcher) -> None:
    tracemalloc.start()
    try:
        r = fetcher.fetch(server + "/redirect-huge")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.status == 302 and r.redirect == server + "/ok" and r.body == b""
    assert peak < 2 * CAP


def test_a_redirect_without_location(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/redirect-none")
    assert r.status == 302 and r.redirect is None and r.error is None


def test_gzip_is_decoded(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/gzip")
    assert r.ok and r.body == PAGE


def test_a_gzip_bomb_costs_no_more_than_the_cap(server: str, fetcher: Fetcher) -> None:
    tracemalloc.start()
    try:
        r = fetcher.fetch(server + "/gzip-bomb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.ok and r.truncated and len(r.body) == CAP and r.body == bytes(CAP)
    assert peak < 8 * CAP, f"peak {peak} bytes while inflating a 100 MB bomb"


def test_broken_gzip_is_a_decoding_error(server: str, fetcher: Fetcher) -> None:
    r = fetcher.fetch(server + "/gzip-bad")
    assert r.status == 200 and r.error == ERROR_DECODING


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/x", "mailto:someone@127.0.0.1", "javascript:alert(1)", "file:///etc"]
)
def test_other_schemes_send_nothing(server: str, fetcher: Fetcher, url: str) -> None:
    total = sum(Handler.hits.values())
    r = fetcher.fetch(url)
    assert r.error == ERROR_SCHEME and r.status == 0
    assert sum(Handler.hits.values()) == total


@pytest.mark.parametrize("url", ["http://[::1/x", "http:///nohost", "http://127.0.0.1:99999/"])
def test_malformed_urls_are_errors(fetcher: Fetcher, url: str) -> None:
    r = fetcher.fetch(url)
    assert r.error == ERROR_BAD_URL and r.status == 0


def test_a_fetch_thread_keeps_its_connection_alive(server: str, fetcher: Fetcher) -> None:
    # a fetch thread reuses the open connection to a host
    before = set(Handler.peers)
    results: list = []

    def fetch_six() -> None:
        for _ in range(6):
            results.append(fetcher.fetch(server + "/ok"))

    t = threading.Thread(target=fetch_six)
    t.start()
    t.join()
    assert len(results) == 6 and all(r.ok and r.body == PAGE for r in results)
    assert len(set(Handler.peers) - before) == 1
    # at once, every thread still gets its page
    results = fetch_at_once(fetcher, server + "/ok", 8)
    assert len(results) == 8 and all(r.ok and r.body == PAGE for r in results)


def fetch_at_once(fetcher: Fetcher, url: str, threads: int) -> list[FetchResult]:
    """``url`` fetched by ``threads`` threads at once; their results."""
    results: list[FetchResult] = []
    workers = [
        threading.Thread(target=lambda: results.append(fetcher.fetch(url))) for _ in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return results


def test_a_host_keeps_one_connection_whichever_thread_fetches(
    server: str, fetcher: Fetcher
) -> None:
    # the master sends a host's URLs to whichever fetch thread is free: the
    # connection belongs to the fetcher, not to the thread that opened it
    assert fetcher.fetch(server + "/ok").ok
    before = set(Handler.peers)
    for _ in range(4):
        t = threading.Thread(target=lambda: fetcher.fetch(server + "/ok"))
        t.start()
        t.join()
    assert set(Handler.peers) <= before


@pytest.mark.slow
def test_connections_to_many_hosts_are_kept() -> None:
    # more hosts than a requests Session pools (10): a crawl goes round all its hosts
    servers = [Server(("127.0.0.1", 0), Handler) for _ in range(24)]
    for httpd in servers:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    f = Fetcher(connect_timeout=2, read_timeout=3, user_agent="t")
    try:
        urls = [f"http://127.0.0.1:{httpd.server_address[1]}/ok" for httpd in servers]
        assert all(f.fetch(url).ok for url in urls)
        before = set(Handler.peers)
        assert all(f.fetch(url).ok for url in urls)
        assert set(Handler.peers) <= before
    finally:
        f.close()
        for httpd in servers:
            httpd.shutdown()
            httpd.server_close()


@pytest.mark.slow
def test_every_thread_may_fetch_from_one_host_at_once(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    # under the hash queue policy a host's URLs may all be in flight at once:
    # each thread's connection is kept, none is discarded for want of room
    f = Fetcher(connect_timeout=2, read_timeout=3, user_agent="t")
    results: list = []
    try:
        for _ in range(2):
            results += fetch_at_once(f, server + "/slow", 6)
    finally:
        f.close()
    assert len(results) == 12 and all(r.ok for r in results)
    assert "pool is full" not in caplog.text


def test_cookies_are_not_sent_back(server: str, fetcher: Fetcher) -> None:
    assert fetcher.fetch(server + "/set-cookie").ok
    r = fetcher.fetch(server + "/echo-cookie")
    assert r.ok and r.body == b""


def test_a_connection_the_server_closed_is_not_reused(server: str, fetcher: Fetcher) -> None:
    for _ in range(3):
        assert fetcher.fetch(server + "/then-close").ok
        r = fetcher.fetch(server + "/ok")
        assert r.ok and r.body == PAGE and r.error is None


def test_a_capped_body_does_not_spoil_the_next_response(server: str, fetcher: Fetcher) -> None:
    # the rest of a cut body (or of a redirect's) must not be read as the
    # next response on a reused connection
    for path in ("/big", "/redirect-huge", "/redirect", "/chunked-big"):
        fetcher.fetch(server + path)
        r = fetcher.fetch(server + "/ok")
        assert r.ok and r.body == PAGE, path


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Fetcher(connect_timeout=0)
    with pytest.raises(ValueError):
        Fetcher(max_bytes=0)


def test_proxies_in_the_environment_are_never_used(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crawler talks to each host itself: a proxy named in the environment
    # (here a port nothing listens on) must change nothing.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = Fetcher().fetch(server + "/ok")
    assert result.error is None and result.status == 200 and result.body == PAGE
