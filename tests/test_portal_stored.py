"""The portal's stored copy of a page: a hostile page crawled from loopback, opened in a
real Chromium, runs nothing, loads nothing from the live web and goes nowhere; its
links lead to stored copies or live pages; its WARC record can be downloaded.

Two servers of the test's own: the web (the hostile page, a page it links to, a text
file) and a canary, which records every request it gets: the hostile page's scripts,
handlers, frames, forms and images all aim at it.
"""

from __future__ import annotations

import base64
import io
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import pytest
import requests
from warcio.archiveiterator import ArchiveIterator

from srcrawl.portal.markup import stored_link
from srcrawl.portal.server import build_portal, serving_in_thread
from srcrawl.settings.config import Config

from .conftest import cli_env, run_cli
from .test_crawl import POLITE

pytestmark = pytest.mark.slow  # a crawl, an index and a browser

WORD = "zyxwvstored"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)  # one pixel


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: dict[str, tuple[str, bytes]]) -> None:
        self.pages = pages
        self.hits: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        self.server.hits.append(self.path)
        ctype, body = self.server.pages.get(self.path, ("text/plain", b"canary"))
        self.send_response(200 if self.path in self.server.pages or not self.server.pages else 404)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def _serving(pages: dict[str, tuple[str, bytes]]) -> tuple[_Server, threading.Thread]:
    server = _Server(pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def _hostile(web: str, canary: str) -> bytes:
    """Every way a page may run script, leave for another page or call out."""
    return f"""<!doctype html><html><head><title>The {WORD} page</title>
<base href="{canary}/base/">
<meta http-equiv="refresh" content="0;url={canary}/refresh">
<link rel="stylesheet" href="{canary}/style.css">
<script>document.title = "pwned"; window.name = "pwned"; fetch("{canary}/script")</script>
</head><body onload="window.name = 'onload'; fetch('{canary}/onload')">
<h1 title="{WORD} in an attribute">Notes on {WORD} words</h1>
<p>The {WORD.upper()} text, then more <b>{WORD}</b>.</p>
<img src="{canary}/image.png" onerror="window.name = 'onerror'" alt="an image">
<img src="x" onerror="fetch('{canary}/onerror')">
<a id="js" href="javascript:fetch('{canary}/javascript')">a script link</a>
<a href="data:text/html,<script>fetch('{canary}/data')</script>">a data link</a>
<a href="vbscript:msgbox(1)">a vbscript link</a>
<a href="{web}/other.html">the other page</a>
<a href="{web}/logo.png">the logo</a><img src="{web}/logo.png" alt="stored logo">
<a href="{web}/notes.txt">the notes</a>
<a href="relative.html">a relative link</a>
<a href="{canary}/live.html">a live page</a>
<svg><script>fetch("{canary}/svg")</script><a href="javascript:fetch('{canary}/svg-a')">s</a></svg>
<form action="{canary}/form" method="post"><input name="a" value="b"><button>go</button></form>
<iframe src="{canary}/frame"></iframe><object data="{canary}/object"></object>
<embed src="{canary}/embed"><div style="background: url({canary}/css-image)">styled</div>
</body></html>""".encode()


@pytest.fixture(scope="module")
def crawled(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    canary, canary_thread = _serving({})
    web, web_thread = _serving({})
    web.pages.update(
        {
            "/": ("text/html; charset=utf-8", _hostile(web.base, canary.base)),
            "/other.html": (
                "text/html",
                f"<html><title>Other</title><body><p>The other {WORD} page. "
                f'<a href="/">back</a></p></body></html>'.encode(),
            ),
            "/notes.txt": (
                "text/plain",
                f"<script>fetch('{canary.base}')</script> {WORD}".encode(),
            ),
            "/robots.txt": ("text/plain", b"User-agent: *\nAllow: /\n"),
            "/logo.png": ("image/png", PNG),
        }
    )
    env = cli_env(redis_url, f"t-{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("stored"))
    run = run_cli(["crawl", web.base + "/", "--depth", "1", "--slaves", "1", *POLITE], env)
    assert run.returncode == 0, run.stderr[-2000:]
    run = run_cli(["index", "--slaves", "1"], env)
    assert run.returncode == 0, run.stderr[-2000:]
    canary.hits.clear()  # (the crawl did not go there: another host)
    cfg = Config.load(env=env)
    with serving_in_thread(build_portal(cfg, threads=0)) as url:
        yield url.rstrip("/"), web, canary
    cfg.close()
    for server, thread in ((canary, canary_thread), (web, web_thread)):
        server.shutdown()
        server.server_close()
        thread.join()


def _banner_and_marks(page, page_url: str) -> None:
    # the banner: the page's URL, when it was fetched, its status, the live page
    banner = page.locator("#stored-banner")
    assert page.locator("#live").get_attribute("href") == page_url
    assert page.locator("#status").inner_text() == "200"
    assert page.locator("#fetched").inner_text().endswith("UTC")
    assert page_url in banner.inner_text()
    # the query's word marked in the text, whatever its case, never in an attribute
    marks = page.locator("#stored-page mark").all_inner_texts()
    assert [m.lower() for m in marks] == [WORD] * 3, marks
    assert page.locator("#stored-page h1").get_attribute("title") == f"{WORD} in an attribute"


def _links_and_images(page, web, canary) -> None:
    # links: stored copies where stored, live pages else, none of another scheme
    anchors = page.locator("#stored-page a").all()
    links = {a.inner_text(): a.get_attribute("href") for a in anchors}
    assert links["the other page"] == stored_link(web.base + "/other.html", WORD)
    assert links["the notes"] == stored_link(web.base + "/notes.txt", WORD)
    assert links["a live page"] == canary.base + "/live.html"
    assert links["a relative link"] == canary.base + "/base/relative.html"  # as crawled
    for dead in ("a script link", "a data link", "a vbscript link"):
        assert links[dead] is None, dead
    # an image the crawl stored loads from the store, under the page's policy; the others
    # (not stored) are not loaded at all
    logo = page.locator("#stored-page img[src]")
    assert logo.count() == 1 and logo.get_attribute("alt") == "stored logo"
    assert logo.get_attribute("src").startswith("/stored/file?url=")
    assert logo.evaluate("img => img.complete && img.naturalWidth") == 1


def test_a_hostile_page_s_stored_copy_runs_nothing_and_calls_nowhere(crawled, browser) -> None:
    portal, web, canary = crawled
    page_url = web.base + "/"
    context = browser.new_context()
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    try:
        response = page.goto(portal + stored_link(page_url, WORD))
        assert response is not None and response.status == 200
        csp = response.headers["content-security-policy"]
        assert "script-src 'none'" in csp and "sandbox" in csp.split(";")[-1]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "set-cookie" not in response.headers
        page.wait_for_timeout(1500)  # a meta refresh of 0 s, an onload, a fetch: had they run
        assert page.url == portal + stored_link(page_url, WORD)  # no navigation
        assert "pwned" not in page.title() and page.evaluate("window.name") == ""
        gone_tags = ("script", "iframe", "object", "embed", "form", "input", "base", "svg")
        for gone in (*gone_tags, "meta[http-equiv]", f"link[href^='{canary.base}']"):
            assert page.locator(f"#stored-page {gone}, head {gone}").count() == 0, gone
        handlers = page.evaluate(
            "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes]"
            ".filter(a => a.name.startsWith('on') || a.name === 'style').map(a => a.name))"
        )
        assert handlers == []
        _banner_and_marks(page, page_url)
        _links_and_images(page, web, canary)
        page.locator("#stored-page a", has_text="the other page").click()
        page.wait_for_url("**/stored?url=*other.html*")
        assert page.locator("#live").get_attribute("href") == web.base + "/other.html"
        assert page.locator("#stored-page mark").all_inner_texts() == [WORD]
        # a text file: its text as text, never as markup
        page.goto(portal + stored_link(web.base + "/notes.txt", WORD))
        assert page.locator("pre.stored-text").inner_text().startswith("<script>")
        assert page.locator("#stored-page script").count() == 0
        page.wait_for_timeout(300)
    finally:
        context.close()
    assert canary.hits == []
    assert not [u for u in requested if u.startswith(canary.base)]
    assert all(u.startswith(portal) for u in requested), requested


def test_the_warc_record_is_downloaded_and_an_unstored_page_is_a_404(crawled) -> None:
    portal, web, _canary = crawled
    r = requests.get(portal + "/stored/raw?" + urlencode({"url": web.base + "/"}), timeout=10)
    assert r.status_code == 200 and r.headers["content-type"] == "application/warc"
    assert "attachment" in r.headers["content-disposition"]
    records = [
        (rec.rec_type, rec.rec_headers.get_header("WARC-Target-URI"), rec.content_stream().read())
        for rec in ArchiveIterator(io.BytesIO(r.content))
    ]
    assert [(kind, uri) for kind, uri, _body in records] == [("response", web.base + "/")]
    assert WORD.encode() in records[0][2]
    for missing in (web.base + "/never.html", "javascript:alert(1)", "not a url"):
        r = requests.get(portal + stored_link(missing), timeout=10)
        assert r.status_code == 404 and "No stored copy" in r.text, missing
        assert "sandbox" in r.headers["content-security-policy"]
        r = requests.get(portal + "/stored/raw?" + urlencode({"url": missing}), timeout=10)
        assert r.status_code == 404
    # a binary body: named and offered as its record, never rendered
    logo = web.base + "/logo.png"
    r = requests.get(portal + stored_link(logo), timeout=10)
    assert r.status_code == 200 and 'id="binary"' in r.text and "image/png" in r.text
    assert "<img" not in r.text and 'href="/stored/raw?' in r.text
    r = requests.get(portal + "/stored/file?" + urlencode({"url": logo}), timeout=10)
    assert r.content == PNG and r.headers["content-type"] == "image/png"
    assert "sandbox" in r.headers["content-security-policy"]
    # a stored page that is no image is not served as a file
    r = requests.get(portal + "/stored/file?" + urlencode({"url": web.base + "/"}), timeout=10)
    assert r.status_code == 404


def test_a_hit_links_to_its_stored_copy(crawled) -> None:
    portal, web, _canary = crawled
    found = requests.get(portal + "/api/search", params={"q": WORD}, timeout=10).json()
    stored = {h["url"]: h["stored"] for h in found["hits"]}
    assert stored[web.base + "/"] == stored_link(web.base + "/")
    page = requests.get(portal + "/", params={"q": WORD}, timeout=10).text
    assert f'href="{stored_link(web.base + "/", WORD).replace("&", "&amp;")}"' in page


def test_an_echoed_query_in_the_stored_copy_is_text(crawled, browser) -> None:
    portal, web, canary = crawled
    hostile = f'</q></title><script>fetch("{canary.base}/q")</script><img src=x onerror=alert(1)>'
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(portal + stored_link(web.base + "/", f"{WORD} {hostile}"))
        assert page.locator("img[src=x], script").count() == 0
        assert hostile in page.locator(".stored-terms q").inner_text()
        marks = page.locator("#stored-page mark").all_inner_texts()
        assert [m for m in marks if m.lower() == WORD] == [WORD, WORD.upper(), WORD]
        page.goto(portal + stored_link(f"javascript:fetch('{canary.base}/u')//{hostile}"))
        assert hostile in page.locator("#missing").inner_text()
        assert page.locator("img[src=x], script").count() == 0
        page.wait_for_timeout(300)
    finally:
        context.close()
    assert canary.hits == []
