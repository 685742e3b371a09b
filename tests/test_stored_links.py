"""The stored copy's HTML, without a server: links rewritten, words marked in text only,
what a hostile page holds left out (portal/stored.py)."""

from __future__ import annotations

import lxml.html

from srcrawl.core.urls import fingerprint
from srcrawl.portal.markup import stored_link
from srcrawl.portal.stored import body_kind, file_link, html_copy, text_copy

PAGE = "http://site.test/dir/page.html"
STORED = {
    "http://site.test/dir/kept.html": "text/html; charset=utf-8",
    "http://site.test/logo.png": "image/png",
    "http://site.test/dir/notes.pdf": "application/pdf",
    "http://other.test/base/under-base.html": "text/html",
}


def _types(asked: list[list[int]]):
    by_fp = {fingerprint(url): ctype for url, ctype in STORED.items()}

    def stored_types(fps: list[int]) -> dict[int, str]:
        asked.append(fps)
        return {fp: by_fp[fp] for fp in fps if fp in by_fp}

    return stored_types


def _copy(body: str, terms: list[str] | None = None, q: str = "") -> lxml.html.HtmlElement:
    asked: list[list[int]] = []
    html = html_copy(f"<html><body>{body}</body></html>", PAGE, terms or [], _types(asked), q)
    assert len(asked) <= 1  # one look-up for the page's links, however many
    return lxml.html.fragment_fromstring(str(html), create_parent="div")


def _hrefs(root: lxml.html.HtmlElement) -> dict[str, str | None]:
    return {a.text_content(): a.get("href") for a in root.iter("a")}


def test_links_go_to_the_stored_copy_when_stored_else_to_the_live_page() -> None:
    root = _copy(
        '<a href="kept.html">kept</a> <a href="../elsewhere.html?b=2&amp;a=1">live</a>'
        ' <a href="notes.pdf">pdf</a> <a href="#top">fragment</a>'
        ' <a href="HTTP://SITE.test:80/dir/kept.html">same, spelt otherwise</a>',
        q="some words",
    )
    assert _hrefs(root) == {
        "kept": stored_link("http://site.test/dir/kept.html", "some words"),
        "live": "http://site.test/elsewhere.html?a=1&b=2",  # canonical, as the crawl keys it
        "pdf": stored_link("http://site.test/dir/notes.pdf", "some words"),
        "fragment": "http://site.test/dir/page.html",
        "same, spelt otherwise": stored_link("http://site.test/dir/kept.html", "some words"),
    }
    assert all(a.get("rel") == "noopener noreferrer nofollow" for a in root.iter("a"))


def test_links_of_another_scheme_lose_their_target() -> None:
    root = _copy(
        '<a href="javascript:alert(1)">js</a> <a href=" JaVaScRiPt:alert(1)">js2</a>'
        ' <a href="data:text/html,<script>alert(1)</script>">data</a>'
        ' <a href="vbscript:msgbox(1)">vb</a> <a href="mailto:x@site.test">mail</a>'
        ' <a href="java&#x09;script:alert(1)">tab</a> <area href="javascript:1">'
    )
    assert all(a.get("href") is None for a in root.iter("a", "area")), str(lxml.html.tostring(root))


def test_a_base_href_resolves_relative_links_as_the_crawl_did_and_is_left_out() -> None:
    html = html_copy(
        '<html><head><base href="http://other.test/base/"></head>'
        '<body><a href="under-base.html">a</a> <a href="x.html">b</a></body></html>',
        PAGE,
        [],
        _types([]),
    )
    root = lxml.html.fragment_fromstring(str(html), create_parent="div")
    assert _hrefs(root) == {
        "a": stored_link("http://other.test/base/under-base.html"),
        "b": "http://other.test/base/x.html",
    }
    assert "<base" not in str(html)
    # a base of another scheme is not followed: the page's own URL is the base
    html = html_copy(
        '<html><head><base href="javascript:alert(1)//"></head><body><a href="kept.html">k</a>',
        PAGE,
        [],
        _types([]),
    )
    assert stored_link("http://site.test/dir/kept.html") in str(html).replace("&amp;", "&")


def test_images_load_from_the_store_or_not_at_all() -> None:
    root = _copy(
        '<img src="/logo.png" srcset="/big.png 2x" alt="logo">'
        '<img src="http://tracker.test/pixel.gif" alt="pixel">'
        '<img src="kept.html" alt="a page, not an image">'
    )
    images = {img.get("alt"): img.get("src") for img in root.iter("img")}
    assert images == {
        "logo": file_link("http://site.test/logo.png"),
        "pixel": None,
        "a page, not an image": None,
    }
    assert not any(img.get("srcset") for img in root.iter("img"))


def test_what_runs_or_leaves_is_left_out() -> None:
    html = str(
        html_copy(
            '<html><head><meta http-equiv="refresh" content="0;url=http://evil.test/">'
            "<script>alert(1)</script><style>body{background:url(http://evil.test/)}</style>"
            '</head><body onload="alert(1)"><p onclick="alert(1)" style="color:red">text</p>'
            '<img src="x" onerror="alert(1)"><svg onload="alert(1)"><script>alert(2)</script>'
            "</svg><math><mtext><script>alert(3)</script></mtext></math>"
            '<form action="http://evil.test/"><input name="q"><button>go</button></form>'
            '<iframe src="http://evil.test/"></iframe><object data="x"></object><embed src="x">'
            "<template><script>alert(4)</script></template><noscript><p>no script</p></noscript>"
            "<!-- <script>alert(5)</script> --></body></html>",
            PAGE,
            [],
            _types([]),
        )
    ).lower()
    for gone in (
        "<script",
        "alert",
        "onload",
        "onclick",
        "onerror",
        "style",
        "<form",
        "<input",
        "<iframe",
        "<object",
        "<embed",
        "<svg",
        "<meta",
        "evil.test",
        "<!--",
    ):
        assert gone not in html, gone
    assert "text" in html and "no script" in html


def test_words_are_marked_in_text_nodes_only_by_the_search_s_rules() -> None:
    root = _copy(
        '<p title="search engine">The Search engines <a href="kept.html">searching</a>'
        " research</p><script>var search = 1</script><textarea>search</textarea>"
        "<p>分布式搜索引擎</p>",
        terms=["search", "engin", "搜索"],
    )
    marks = [m.text for m in root.iter("mark")]
    # any case, stemmed forms as the snippets mark them, whole tokens only (not "research"),
    # Chinese anywhere; never in an attribute, a script or a text area
    assert marks == ["Search", "engines", "searching", "搜索"]
    assert root.find(".//p").get("title") == "search engine"
    assert root.find(".//a/mark") is not None  # inside the link, which still links


def test_a_text_body_is_escaped_and_marked_and_a_binary_one_is_not_shown() -> None:
    shown = str(text_copy("<script>alert(1)</script> Search & more", ["search"]))
    assert shown == "&lt;script&gt;alert(1)&lt;/script&gt; <mark>Search</mark> &amp; more"
    assert body_kind("text/html", b"<html><body>x</body></html>") == "html"
    assert body_kind("text/plain", b"<html><script>alert(1)</script>") == "text"
    assert body_kind("application/pdf", b"%PDF-1.7 \x00\x01\x02") == "binary"
    assert body_kind("image/png", b"\x89PNG\r\n\x1a\n\x00\x00") == "binary"
