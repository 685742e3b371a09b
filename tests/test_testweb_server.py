"""The test web as served over HTTP: special pages, encodings, timeouts, the access log."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import charset_normalizer
import lxml.html
import pytest
import requests
from bs4 import BeautifulSoup

from srcrawl.testweb import TestWeb, TestWebError, canonical, content, generate, read_access_log
from srcrawl.testweb.accesslog import by_host, gaps, mean_in_flight, overlaps
from srcrawl.testweb.content import render
from srcrawl.testweb.server import Site
from srcrawl.testweb.specials import BAD_HREFS
from srcrawl.testweb.traps import is_trap

SLOW = 1.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("testweb") / "access.jsonl"
    with TestWeb.generate(4, 20, seed=3, slow_seconds=SLOW, access_log=log) as tw:
        yield tw


@pytest.fixture
def http() -> requests.Session:
    with requests.Session() as s:
        yield s


def address(url: str) -> tuple[str, int]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    return host, int(port)


def exchange(url: str, request: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes to the host of ``url``; everything received until the server closes."""
    with socket.create_connection(address(url), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def split_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ")[1]), headers, body


def path_of(url: str) -> str:
    return "/" + url.split("//", 1)[1].split("/", 1)[1]


def extract_links(
    body: bytes, url: str, parser: str
) -> tuple[list[tuple[str, str, bool]], list[str], set[str]]:
    """``(target, kind, nofollow)`` of every link, the hrefs that are no URL, the meta robots."""
    if parser == "lxml":
        doc = lxml.html.document_fromstring(body)

        def find(xpath: str) -> list:
            return [(el.tag, el.attrib) for el in doc.xpath(xpath)]

        base = doc.xpath("//base/@href")
    else:
        soup = BeautifulSoup(body, "html.parser")

        def find(xpath: str) -> list:
            tags = {
                "//a[@href]|//area[@href]|//frame[@src]|//iframe[@src]|//link[@href]": [
                    "a",
                    "area",
                    "frame",
                    "iframe",
                    "link",
                ]
            }[xpath]
            return [(el.name, el.attrs) for el in soup.find_all(tags)]

        base = [el["href"] for el in soup.find_all("base", href=True)]
    base_url = canonical(base[0], url) if base else url
    links, dropped = [], []
    for tag, attrs in find("//a[@href]|//area[@href]|//frame[@src]|//iframe[@src]|//link[@href]"):
        rel = attrs.get("rel", "")
        rel = rel.split() if isinstance(rel, str) else list(rel)
        if tag == "link":
            if "next" not in rel:
                continue
            kind = "next"
        else:
            kind = tag
        href = attrs.get("src") if tag in ("frame", "iframe") else attrs.get("href")
        target = canonical(href, base_url)
        if target is None:
            dropped.append(href)
        else:
            links.append((target, kind, "nofollow" in rel))
    if parser == "lxml":
        metas = doc.xpath("//meta[@name='robots']/@content")
    else:
        metas = [m["content"] for m in soup.find_all("meta", attrs={"name": "robots"})]
    return links, dropped, set(metas)


# ---- what is served is what the model says


@pytest.mark.parametrize("parser", ["lxml", pytest.param("bs4", marks=pytest.mark.slow)])
def test_served_html_links_match_the_model(
    served: TestWeb, http: requests.Session, parser: str
) -> None:
    web = served.web
    checked = 0
    for url, page in sorted(web.pages.items()):
        if page.behavior != "normal" or not page.is_html or page.status != 200:
            continue
        r = http.get(url, allow_redirects=False, timeout=10)
        assert r.status_code == 200, url
        assert r.content == render(web, page).body
        links, dropped, metas = extract_links(r.content, url, parser)
        expected = [(ln.target, ln.kind, ln.nofollow) for ln in page.links]
        assert links == expected, url
        assert dropped == list(page.dropped), url
        assert ("noindex" in metas) == page.noindex and ("nofollow" in metas) == page.meta_nofollow
        checked += 1
    assert checked > 100


def test_a_prerendered_web_serves_the_same_bytes_without_rendering_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    web = generate(3, 15, seed=4, ports=[1, 2, 3], large_bytes=50_000)
    expected = {url: render(web, page) for url, page in web.pages.items()}
    site = Site(web, prerender=True)
    monkeypatch.setattr(content, "render", lambda *args: pytest.fail("rendered on request"))
    for url in web.pages:
        host = web.host_of(url)
        assert host is not None
        assert site.respond(host, url) == expected[url]


@pytest.mark.slow
def test_a_prerendered_web_is_served_from_its_process(http: requests.Session) -> None:
    with TestWeb.generate(3, 10, seed=4, prerender=True) as tw:
        for url, page in sorted(tw.web.pages.items()):
            if page.behavior == "normal":
                r = http.get(url, allow_redirects=False, timeout=10)
                assert r.status_code == page.status and r.content == render(tw.web, page).body


def test_bad_links_page_holds_every_bad_href(served: TestWeb, http: requests.Session) -> None:
    url = served.special["bad_links"]
    _, dropped, _ = extract_links(http.get(url, timeout=10).content, url, "lxml")
    assert dropped == list(BAD_HREFS)
    assert all(canonical(h, url) is None for h in dropped)


def test_trap_pages_are_served_forever(served: TestWeb, http: requests.Session) -> None:
    url = served.special["calendar"]
    for _ in range(15):
        r = http.get(url, timeout=10)
        assert r.status_code == 200
        (target, _, _), *_ = extract_links(r.content, url, "lxml")[0]
        url = target
    assert url.endswith("/calendar/2025/04") and is_trap(url)
    deep = served.base_url(0) + "/trap/" + "a/" * 40
    assert http.get(deep, timeout=10).status_code == 200


def test_redirects(served: TestWeb, http: requests.Session) -> None:
    s = served.special
    for name, status, location in [
        ("redirect_301", 301, "/r/landing-301.html"),
        ("redirect_302", 302, "landing-302.html"),
        ("redirect_disallowed", 302, "/private/0.html"),
        ("redirect_cross_host", 301, f"{served.base_url(1)}/r/landing-cross.html"),
    ]:
        r = http.get(s[name], allow_redirects=False, timeout=10)
        assert (r.status_code, r.headers["location"]) == (status, location)
    r = http.get(s["redirect_chain"], timeout=10)
    assert [h.status_code for h in r.history] == [301, 302, 301]
    assert (r.status_code, r.url) == (200, s["redirect_chain_target"])
    with pytest.raises(requests.TooManyRedirects):
        http.get(s["redirect_loop"], timeout=10)


def test_error_pages_and_unknown_paths(served: TestWeb, http: requests.Session) -> None:
    assert http.get(served.special["not_found"], timeout=10).status_code == 404
    assert http.get(served.special["server_error"], timeout=10).status_code == 500
    assert http.get(served.base_url(2) + "/no/such/page", timeout=10).status_code == 404


def test_query_order_and_dot_segments_in_requests_reach_the_canonical_page(served: TestWeb) -> None:
    canonical_url = served.special["relative_sibling_query"]
    data = exchange(canonical_url, b"GET /rel/x/../dir/sibling.html?b=2&a=1 HTTP/1.0\r\n\r\n")
    status, _, body = split_response(data)
    assert status == 200 and body == render(served.web, served.web.page(canonical_url)).body


# ---- encodings, byte-exact


@pytest.mark.parametrize(
    ("name", "encoding", "header_charset", "declared_in_body"),
    [
        ("gbk_header", "gbk", True, None),
        ("gbk_meta", "gbk", False, b'<meta charset="gbk">'),
        ("gbk_undeclared", "gbk", False, None),
        ("big5_header", "big5", True, None),
        ("big5_meta", "big5", False, b'content="text/html; charset=big5"'),
    ],
)
def test_encoded_pages(
    served: TestWeb,
    http: requests.Session,
    name: str,
    encoding: str,
    header_charset: bool,
    declared_in_body: bytes | None,
) -> None:
    url = served.special[name]
    page = served.web.pages[url]
    r = http.get(url, timeout=10)
    ctype = r.headers["content-type"]
    assert ctype == (f"text/html; charset={encoding}" if header_charset else "text/html")
    assert r.content == render(served.web, page).body
    text = r.content.decode(encoding)  # strict: every byte is valid in the encoding
    assert r.content == text.encode(encoding)
    en, zh = page.terms
    assert en in text and zh in text
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) > 500
    if declared_in_body:
        assert declared_in_body in r.content
    else:
        assert b"charset" not in r.content.lower()
    with pytest.raises(UnicodeDecodeError):
        r.content.decode("utf-8")


def test_undeclared_gbk_page_is_detectable(served: TestWeb, http: requests.Session) -> None:
    url = served.special["gbk_undeclared"]
    body = http.get(url, timeout=10).content
    best = charset_normalizer.from_bytes(body).best()
    assert best is not None
    assert served.web.pages[url].terms[1] in str(best)


# ---- files, large, malformed


def test_non_html_files(served: TestWeb, http: requests.Session) -> None:
    s = served.special
    png = http.get(s["png"], timeout=10)
    assert png.headers["content-type"] == "image/png" and png.content.startswith(
        b"\x89PNG\r\n\x1a\n"
    )
    pdf = http.get(s["pdf"], timeout=10)
    assert pdf.headers["content-type"] == "application/pdf" and pdf.content.startswith(b"%PDF-")
    blob = http.get(s["octet"], timeout=10)
    assert blob.headers["content-type"] == "application/octet-stream" and len(blob.content) == 4096
    fake = http.get(s["binary_as_html"], timeout=10)
    assert fake.headers["content-type"] == "text/html"
    assert len(fake.content) == 4096 and b"<" not in fake.content
    with pytest.raises(UnicodeDecodeError):
        fake.content.decode("utf-8")


def test_large_page(served: TestWeb, http: requests.Session) -> None:
    url = served.special["large"]
    r = http.get(url, timeout=30)
    assert int(r.headers["content-length"]) == len(r.content) == served.web.large_bytes
    assert served.web.large_bytes == 10_000_000
    links, _, _ = extract_links(r.content[:100_000] + b"</body></html>", url, "lxml")
    assert links == [(ln.target, "a", False) for ln in served.web.pages[url].links]


def test_malformed_pages_keep_their_links(served: TestWeb, http: requests.Session) -> None:
    garbage = http.get(served.special["garbage"], timeout=10).content
    assert b"\xff\xfe\x00" in garbage
    with pytest.raises(UnicodeDecodeError):
        garbage.decode("utf-8")
    unclosed = http.get(served.special["unclosed"], timeout=10).content
    assert b"</html>" not in unclosed and b"</a>" not in unclosed


def test_truncated_response(served: TestWeb) -> None:
    url = served.special["truncated"]
    data = exchange(url, f"GET {path_of(url)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    status, headers, body = split_response(data)
    assert status == 200 and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body) + 4096
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        requests.get(url, timeout=10)


@pytest.mark.slow
def test_timeout_pages(served: TestWeb, http: requests.Session) -> None:
    s = served.special
    t0 = time.monotonic()
    with pytest.raises(requests.exceptions.ReadTimeout):
        http.get(s["timeout_headers"], timeout=0.3)
    assert time.monotonic() - t0 < SLOW
    t0 = time.monotonic()
    assert requests.get(s["timeout_headers"], timeout=10).status_code == 200
    assert time.monotonic() - t0 >= SLOW * 0.95

    url = s["timeout_body"]
    with socket.create_connection(address(url), timeout=10) as sock:
        sock.sendall(f"GET {path_of(url)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        first = sock.recv(65536)
        t0 = time.monotonic()
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        sock.settimeout(10)
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
        waited = time.monotonic() - t0
    _, headers, body = split_response(first + rest)
    assert waited >= SLOW * 0.6
    assert len(body) == int(headers["content-length"]) // 2


# ---- HTTP behaviour


def test_keep_alive_pipelining_head_and_http10(served: TestWeb) -> None:
    root = served.seed_urls[0]
    web = served.web
    data = exchange(
        root,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\nHEAD /p/0.html HTTP/1.1\r\n\r\n"
        b"GET /p/0.html HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    body0 = render(web, web.pages[root]).body
    body1 = render(web, web.pages[root + "p/0.html"]).body
    first, rest = data.split(b"\r\n\r\n", 1)
    assert first.startswith(b"HTTP/1.1 200 OK") and rest.startswith(body0)
    rest = rest[len(body0) :]
    head2, rest = rest.split(b"\r\n\r\n", 1)
    assert f"Content-Length: {len(body1)}".encode() in head2
    head3, body3 = rest.split(b"\r\n\r\n", 1)
    assert b"Connection: close" in head3 and body3 == body1
    old = exchange(root, b"GET / HTTP/1.0\r\n\r\n")
    assert b"Connection: close" in old.split(b"\r\n\r\n")[0]
    with socket.create_connection(address(root), timeout=5) as sock:
        sock.sendall(b"GET /p/0.html HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        got = b""
        while len(got) < len(body1) or b"\r\n\r\n" not in got:
            got += sock.recv(65536)
            if got.endswith(body1):
                break
        assert b"Connection: keep-alive" in got and got.endswith(body1)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NONSENSE\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 405),
        (b"GET / HTTP/2.0\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nbroken header\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET /" + b"x" * 70_000, 431),
    ],
)
def test_bad_requests_get_an_error_and_the_connection_closes(
    served: TestWeb, request_bytes: bytes, status: int
) -> None:
    assert split_response(exchange(served.seed_urls[1], request_bytes))[0] == status


def test_latency_is_applied_without_blocking_other_hosts(tmp_path: Path) -> None:
    with TestWeb.generate(4, 5, seed=1, latency_ms=300, in_process=True) as tw:
        urls = [*tw.seed_urls, *tw.seed_urls]
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(urls)) as pool:
            statuses = list(pool.map(lambda u: requests.get(u, timeout=10).status_code, urls))
        elapsed = time.monotonic() - t0
    assert statuses == [200] * len(urls)
    assert 0.3 <= elapsed < 1.5, "eight requests at 0.3 s each would take 2.4 s one after another"


def test_robots_txt_modes(tmp_path: Path) -> None:
    with TestWeb.generate(4, 5, seed=1, robots_failures=2, in_process=True) as tw:
        hosts = tw.web.hosts
        got = [requests.get(h.robots_url, timeout=10) for h in hosts]
        assert [r.status_code for r in got] == [200, 200, 404, 500]
        assert got[0].text == hosts[0].robots_text and "Crawl-delay" in got[1].text
        assert got[0].headers["content-type"].startswith("text/plain")
        flaky = [requests.get(hosts[3].robots_url, timeout=10) for _ in range(3)]
        assert [r.status_code for r in flaky] == [500, 200, 200]
        assert flaky[-1].text == hosts[3].robots_text


def test_ports_in_use_are_a_clear_error() -> None:
    with TestWeb.generate(1, 3, seed=1, in_process=True) as tw:
        with pytest.raises(TestWebError, match="cannot listen"):
            TestWeb(tw.web, in_process=True).start()
        with pytest.raises(TestWebError, match="cannot listen"):
            TestWeb(tw.web).start()


def test_address_mode_serves_each_host_on_its_own_address() -> None:
    with TestWeb.generate(3, 3, seed=1, addresses=True) as tw:
        assert [h.address for h in tw.web.hosts] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        for url in tw.seed_urls:
            assert requests.get(url, timeout=10).status_code == 200


# ---- the access log


@pytest.mark.slow
def test_access_log_records_every_request(tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    with TestWeb.generate(2, 5, seed=1, access_log=log, slow_seconds=SLOW) as tw:
        s = tw.special
        wall0, mono0 = time.time(), time.monotonic()
        requests.get(tw.seed_urls[0] + "rel/dir/sibling.html?b=2&a=1", timeout=10)
        requests.get(tw.seed_urls[1] + "p/2.html", timeout=10)
        exchange(tw.seed_urls[1], b'GET /we"ird\\\xe9 HTTP/1.0\r\n\r\n')
        requests.get(s["not_found"], timeout=10)
        requests.head(tw.seed_urls[0], timeout=10)
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.get(s["timeout_headers"], timeout=0.3)
        time.sleep(1.6)  # flushed at least every second, while serving
        early = read_access_log(log)
        assert len(early) == 6, "the client that gave up is logged as soon as it left"
        requests.get(tw.seed_urls[0], timeout=10)
    entries = read_access_log(log)
    assert len(entries) == 7
    by_path = {e["path"]: e for e in entries}
    assert by_path['/we"ird\\\xe9']["status"] == 404
    e = by_path["/p/2.html"]
    assert (e["host"], e["host_index"], e["method"], e["status"]) == (
        f"127.0.0.1:{tw.web.hosts[1].port}",
        1,
        "GET",
        200,
    )
    e = by_path["/rel/dir/sibling.html?b=2&a=1"]
    assert (e["host_index"], e["status"]) == (0, 200)
    assert e["url"] == tw.special["relative_sibling_query"]
    assert by_path["/missing.html"]["status"] == 404
    head = next(x for x in entries if x["method"] == "HEAD")
    assert head["bytes"] == 0 and head["status"] == 200
    slow = by_path["/slow/headers.html"]
    assert slow["aborted"] is True and slow["end_mono"] - slow["start_mono"] < SLOW
    for x in entries:
        assert (
            wall0 - 0.1 <= x["start"] <= x["end"]
            and mono0 - 0.1 <= x["start_mono"] <= x["end_mono"]
        )
        assert abs((x["end"] - x["start"]) - (x["end_mono"] - x["start_mono"])) < 0.05


def test_access_log_shows_overlap_and_gaps(tmp_path: Path) -> None:
    """What politeness checks read: per-host intervals from start to end."""
    log = tmp_path / "access.jsonl"
    with TestWeb.generate(1, 5, seed=1, latency_ms=200, access_log=log, in_process=True) as tw:
        url = tw.seed_urls[0]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda u: requests.get(u, timeout=10), [url, url]))
        time.sleep(0.3)
        requests.get(url, timeout=10)
    entries = read_access_log(log)
    a, b, c = by_host(entries)[0]
    assert b["start_mono"] < a["end_mono"], "two concurrent requests overlap"
    assert c["start_mono"] - max(a["end_mono"], b["end_mono"]) >= 0.25
    assert overlaps(entries) == [(a, b)]
    assert gaps(entries)[0][1] >= 0.25 and gaps(entries)[0][0] < 0
    assert overlaps([a, c]) == [] and gaps([c]) == {0: []}


def test_mean_in_flight_is_busy_time_over_the_span() -> None:
    """Two requests of 1 s overlapping for half of one, then 1 s of nothing, then one of 1 s:
    3 s busy over 3.5 s (what `bench crawl --single-site` shows as slots busy)."""
    spans = [(0.0, 1.0), (0.5, 1.5), (2.5, 3.5)]
    entries = [{"start_mono": a, "end_mono": b} for a, b in spans]
    assert mean_in_flight(entries) == pytest.approx(3.0 / 3.5)
    assert mean_in_flight([]) == 0.0


@pytest.mark.parametrize("in_process", [True, False])
def test_unwritable_access_log_is_a_clear_error(in_process: bool) -> None:
    tw = TestWeb.generate(
        1, 3, seed=1, access_log="/nonexistent-dir/a.jsonl", in_process=in_process
    )
    with pytest.raises(TestWebError, match="did not start"):
        tw.start()
    tw.stop()  # harmless after a failed start


def test_the_server_stops_when_its_parent_dies_even_with_forked_children(tmp_path: Path) -> None:
    # The local master and slaves are forked from the process that serves the
    # test web; if that process dies, the server must not live on for as long
    # as they do (they would hold its stdin pipe open).
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, sys, time\n"
        "from srcrawl.testweb import TestWeb\n"
        "web = TestWeb.generate(hosts=1, pages=5, seed=1).start()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    null = os.open(os.devnull, os.O_WRONLY)\n"
        "    os.dup2(null, 1)\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(web.server_pid, child, flush=True)\n"
        "os._exit(0)  # dies without stopping the server\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        timeout=60,
    )
    server, child = (int(x) for x in out.stdout.split())
    try:
        deadline = time.monotonic() + 10
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server), "the server outlived its parent"
        assert _alive(child)  # it was the forked child's copy of the pipe that mattered
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # an exited child of a dead parent is reaped by init; a zombie counts as gone
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"
    return True
