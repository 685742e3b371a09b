"""HTML parsing: both parsers, hostile pages, link extraction rules, the fast resolver."""

from __future__ import annotations

import codecs
import dataclasses
import os
import random
import re
import subprocess
import sys
import time
from urllib.parse import urljoin, urlsplit

import pytest

from srcrawl.benchmarks.parse import BENCH_BASE_URL, make_page
from srcrawl.slave.decode import decode_html, utf8_source
from srcrawl.slave.parse import LinkResolver, ParsedPage, parse_html

# bs4 warns about XHTML parsed as HTML; here that is the point.
pytestmark = pytest.mark.filterwarnings("ignore::bs4.XMLParsedAsHTMLWarning")

BASE = "http://site.test/dir/page.html"
BOTH = pytest.mark.parametrize("parser", ["lxml", "bs4", "lexbor"])

ORDINARY = {
    "news-zh": """<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8"><title>  分布式爬虫
 新闻 </title>
<link rel="stylesheet" href="/css/site.css"><link rel="icon" href="/favicon.ico">
<link rel="alternate" type="application/rss+xml" href="/rss.xml">
<script>var x = "<a href='/not-a-link'>no</a>";</script>
<style>p { color: red }</style></head>
<body><div class="nav"><a href="/">首页</a> | <a href="/news/">新闻</a>
<a href="/news/?page=2">下一页</a></div>
<h1>标题：搜索引擎</h1>
<p>分布式网络爬虫&nbsp;系统　设计。<a href="article-2.html">下一篇</a><br>第二行</p>
<ul><li><a href="../about.html">关于</a></li><li><a href="./team.html#people">团队</a></li></ul>
<noscript><a href="/noscript-link">启用 JavaScript</a></noscript>
<p>Email <a href="mailto:a@site.test">us</a> or <a href="javascript:void(0)">this</a>.</p>
</body></html>""",
    "blog-en": """<html><head><title>A blog &amp; more</title>
<meta name="description" content="things"></head><body>
<header><nav><a href="https://site.test/">Home</a>
<a href="//cdn.site.test/x">CDN</a></nav></header>
<article><h2>On <em>crawling</em> politely</h2>
<p>Read <a href="http://other.test/robots">robots.txt</a> rules, then <b>wait</b> between
requests. See <a href="/posts/2?ref=blog&amp;x=1">part two</a> and
<a href="/posts/2?ref=blog&amp;x=1#comments">its comments</a>.</p>
<pre>code  block
   indented</pre>
<blockquote>Quote <a href="tel:+123">call</a></blockquote>
</article><footer><p>&copy; 2024 <a rel="nofollow" href="/login">login</a></p></footer>
</body></html>""",
    "table-forum": """<html><head><title>Forum</title></head><body>
<table><tr><th>Topic</th><th>Replies</th></tr>
<tr><td><a href="t/1">First topic</a></td><td>3</td></tr>
<tr><td><a href="t/2">Second</a></td><td>10</td></tr></table>
<form action="/search"><input name="q"><button>Search</button>
<select><option>one</option><option>two</option></select></form>
<textarea>typed text</textarea></body></html>""",
    "base-href": """<html><head><base href="https://static.site.test/base/"><title>Base</title>
</head><body><a href="a.html">a</a> <a href="/root">root</a> <a href="../up">up</a>
<a href="https://x.test/abs">abs</a></body></html>""",
    "frames": """<html><head><title>Frames</title></head>
<frameset cols="50%,50%"><frame src="left.html"><frame src="/right.html"></frameset></html>""",
    "iframes-map": """<html><head><title>Map</title></head><body>
<iframe src="embed.html">fallback text</iframe>
<img src="map.png" usemap="#m" alt="map"><map name="m">
<area href="/region/1" alt="one"><area href="/region/2" rel="nofollow" alt="two">
<area nohref alt="none"></map><p>after the map</p></body></html>""",
    "xhtml": """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN"
 "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>XHTML page</title></head>
<body><p>Strict <a href="next.html">next</a><br/>line</p></body></html>""",
    "robots-meta": """<html><head><meta name="robots" content="NOINDEX, follow">
<meta name="googlebot" content="nofollow"><title>Hidden</title></head>
<body><a href="/visible">visible</a></body></html>""",
    "refresh": """<html><head><meta http-equiv="refresh" content="5; url=/moved.html">
<title>Moved</title></head><body>moved</body></html>""",
    "pagination": """<html><head><title>List</title><link rel="next" href="?page=3">
<link rel="prev" href="?page=1"><link rel="alternate stylesheet" href="/alt.css">
<link rel="alternate" hreflang="en" href="/en/list"></head>
<body><ol><li>one</li><li>two</li></ol>
<template><a href="/in-template">t</a></template></body></html>""",
}


def agree(html: str, base: str = BASE, *, same_anchors: bool = True) -> ParsedPage:
    """Both parsers give the same page, and so does the lxml path reading the
    page's UTF-8 bytes, as a slave does with a page fetched as UTF-8.

    ``same_anchors=False``: where an unclosed ``<a>`` ends is each parser's
    tree repair (libxml2 closes it at a table, html.parser never does), so
    only the anchored URLs must agree (lexbor's repair, the HTML standard's, is a
    third)."""
    fast = parse_html(html, base, "lxml")
    slow = parse_html(html, base, "bs4")
    assert fast.parser == "lxml" and slow.parser == "bs4"
    if not same_anchors:
        assert fast.anchors.keys() == slow.anchors.keys()
        slow.anchors = fast.anchors
    assert fast == slow, f"lxml: {fast}\nbs4: {slow}"
    body = codecs.BOM_UTF8 + html.encode()
    decoded, encoding = decode_html(body, "text/html; charset=utf-8")
    utf8 = utf8_source(body, decoded, encoding)
    assert utf8 == html.encode() and decoded == html
    assert parse_html(decoded, base, utf8=utf8) == fast
    from_bytes = parse_html(decoded, base, "lexbor", utf8=utf8)
    for lexbor in (parse_html(html, base, "lexbor"), from_bytes):
        assert lexbor.parser == "lexbor"
        if not same_anchors:  # lexbor repairs the tree as the HTML standard says
            assert lexbor.anchors.keys() == fast.anchors.keys()
            lexbor.anchors = fast.anchors
        assert same_page(lexbor, fast), f"lexbor: {lexbor}\nlxml: {fast}"
    return fast


def same_page(page: ParsedPage, reference: ParsedPage) -> bool:
    """Equal pages; anchors count only when the reference path fills them too."""
    if not reference.anchors:
        page = dataclasses.replace(page, anchors={})
    return page == reference


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_both_parsers_agree_on_ordinary_pages(name: str) -> None:
    agree(ORDINARY[name])


@pytest.mark.parametrize("seed", range(6))
def test_both_parsers_agree_on_generated_pages(seed: int) -> None:
    page = agree(make_page(size_kb=10 + 10 * seed, seed=seed), BENCH_BASE_URL)
    assert len(page.links) > 20 and len(page.text) > 1000


def test_the_news_page() -> None:
    page = agree(ORDINARY["news-zh"])
    assert page.title == "分布式爬虫 新闻"
    assert page.links == [
        "http://site.test/rss.xml",
        "http://site.test/",
        "http://site.test/news/",
        "http://site.test/news/?page=2",
        "http://site.test/dir/article-2.html",
        "http://site.test/about.html",
        "http://site.test/dir/team.html",
        "http://site.test/noscript-link",
    ]
    # No script, style, head or noscript text; nbsp and ideographic spaces collapse.
    assert page.text == (
        "首页 | 新闻 下一页 标题：搜索引擎 分布式网络爬虫 系统 设计。下一篇 第二行 "
        "关于 团队 Email us or this."
    )
    assert not page.noindex and not page.nofollow


def test_the_blog_page() -> None:
    page = agree(ORDINARY["blog-en"])
    assert page.title == "A blog & more"
    assert page.links == [
        "https://site.test/",
        "http://cdn.site.test/x",
        "http://other.test/robots",
        "http://site.test/posts/2?ref=blog&x=1",
    ]
    assert "On crawling politely" in page.text  # inline elements do not split words
    assert "code block indented" in page.text
    assert "login" in page.text and "http://site.test/login" not in page.links


def test_table_and_form_text() -> None:
    page = agree(ORDINARY["table-forum"])
    assert page.text == "Topic Replies First topic 3 Second 10 Search one two typed text"
    assert page.links == ["http://site.test/dir/t/1", "http://site.test/dir/t/2"]


def test_base_href() -> None:
    page = agree(ORDINARY["base-href"])
    assert page.links == [
        "https://static.site.test/base/a.html",
        "https://static.site.test/root",
        "https://static.site.test/up",
        "https://x.test/abs",
    ]


@BOTH
def test_relative_base_href_and_only_the_first_counts(parser: str) -> None:
    html = '<base href="/other/"><base href="http://ignored.test/"><a href="x">x</a>'
    assert parse_html(html, BASE, parser).links == ["http://site.test/other/x"]


@BOTH
@pytest.mark.parametrize("base", ["http://[::1/", "javascript:alert(1)", "mailto:x@y"])
def test_a_bad_base_href_is_ignored(parser: str, base: str) -> None:
    html = f'<base href="{base}"><a href="x">x</a>'
    assert parse_html(html, BASE, parser).links == ["http://site.test/dir/x"]


def test_frames_iframes_and_image_maps() -> None:
    assert agree(ORDINARY["frames"]).links == [
        "http://site.test/dir/left.html",
        "http://site.test/right.html",
    ]
    page = agree(ORDINARY["iframes-map"])
    assert page.links == ["http://site.test/dir/embed.html", "http://site.test/region/1"]
    assert page.text == "after the map"


def test_xhtml_with_an_xml_declaration_takes_the_fast_path() -> None:
    page = agree(ORDINARY["xhtml"])
    assert page.title == "XHTML page" and page.text == "Strict next line"
    assert page.links == ["http://site.test/dir/next.html"]


def test_meta_robots() -> None:
    page = agree(ORDINARY["robots-meta"])
    # Only name=robots counts; googlebot's nofollow is for Google.
    assert page.noindex and not page.nofollow
    assert page.links == ["http://site.test/visible"]


@BOTH
@pytest.mark.parametrize(
    ("content", "flags"),
    [
        ("noindex,nofollow", (True, True)),
        ("none", (True, True)),
        ("NOFOLLOW", (False, True)),
        ("index, follow", (False, False)),
        ("all", (False, False)),
    ],
)
def test_meta_robots_values(parser: str, content: str, flags: tuple[bool, bool]) -> None:
    page = parse_html(f'<meta name="Robots" content="{content}"><a href="/a">a</a>', BASE, parser)
    assert (page.noindex, page.nofollow) == flags
    assert page.links == ["http://site.test/a"]  # listed; the caller decides


def test_meta_refresh_is_a_link() -> None:
    assert agree(ORDINARY["refresh"]).links == ["http://site.test/moved.html"]


def test_link_rels_and_templates() -> None:
    page = agree(ORDINARY["pagination"])
    assert page.links == ["http://site.test/dir/page.html?page=3", "http://site.test/en/list"]
    assert page.text == "one two"


@BOTH
def test_nofollow_on_the_element(parser: str) -> None:
    html = (
        '<a href="/1" rel="nofollow">1</a><a href="/2" rel="noopener NoFollow">2</a>'
        '<a href="/3" rel="noopener">3</a><area href="/4" rel="nofollow">'
        '<link rel="next nofollow" href="/5"><a href="/6">6</a>'
    )
    assert parse_html(html, BASE, parser).links == ["http://site.test/3", "http://site.test/6"]


@BOTH
def test_bad_links_are_dropped_not_fatal(parser: str) -> None:
    hrefs = [
        "javascript:void(0)",
        "JavaScript:alert(1)",
        "mailto:x@site.test",
        "tel:+100",
        "data:text/html,<b>x</b>",
        "ftp://site.test/f",
        "http://[::1/",
        "http://h.test:99999/",
        "http://",
        "#top",
        "",
        "   ",
        "about:blank",
        "/ok",
    ]
    html = "".join(f'<a href="{h}">x</a>' for h in hrefs)
    assert parse_html(html, BASE, parser).links == ["http://site.test/ok"]


@BOTH
def test_fragments_go_and_duplicates_with_them(parser: str) -> None:
    html = '<a href="a.html#x">1</a><a href="a.html#y">2</a><a href="a.html">3</a><a href="b">4</a>'
    assert parse_html(html, BASE, parser).links == [
        "http://site.test/dir/a.html",
        "http://site.test/dir/b",
    ]


@BOTH
def test_whitespace_and_entities_in_hrefs(parser: str) -> None:
    html = '<a href="  /a  ">a</a><a href="\n/b\n">b</a><a href="/c?x=1&amp;y=2">c</a>'
    assert parse_html(html, BASE, parser).links == [
        "http://site.test/a",
        "http://site.test/b",
        "http://site.test/c?x=1&y=2",
    ]


@BOTH
@pytest.mark.parametrize("charset", ["gbk", "big5", "iso-8859-1"])
def test_a_meta_charset_in_decoded_text_is_not_applied_twice(parser: str, charset: str) -> None:
    # decode_html already turned the bytes into text; the parser must not
    # re-decode that text as the charset the page declares.
    html = (
        f'<html><head><meta charset="{charset}"><title>中文標題 café</title></head>'
        '<body><p>網頁 爬蟲</p><a href="/頁">x</a></body></html>'
    )
    page = parse_html(html, BASE, parser)
    assert page.title == "中文標題 café" and page.text == "網頁 爬蟲 x"
    assert page.links == ["http://site.test/頁"]


# -- hostile pages ----------------------------------------------------------------


def test_unclosed_tags() -> None:
    page = agree("<div><p>one<a href=/x>two<p>three<table><td>four<b>five", same_anchors=False)
    assert page.links == ["http://site.test/x"]
    assert page.anchors == {"http://site.test/x": "two three"}
    assert page.text == "onetwo three fourfive"


@BOTH
def test_nul_bytes_and_controls(parser: str) -> None:
    html = '<title>a\x00b</title><p>c\x00d\x01e\x7ff</p><a href="/x\x00y">l</a>'
    page = parse_html(html, BASE, parser)
    assert page.title == "a\ufffdb" and page.text == "c\ufffddef l"
    assert len(page.links) == 1 and page.links[0].startswith("http://site.test/x")


def test_nul_bytes_agree() -> None:
    page = agree("<p>c\x00d\x01e\x0bf\x1fg\x85h\x9fi</p><p>\x00</p>")
    assert page.text == "c\ufffdde f g hi \ufffd"


def test_unicode_spaces_and_invisible_characters_agree() -> None:
    # Every Unicode space separates words, control characters go, format
    # characters (soft hyphen, zero-width space) stay.
    html = (
        "<p>a\u3000\u3000b&nbsp;c \xa0 d&#x2003;e\x0bf\x0cg&#x2028;h\u1680i\u205fj</p>"
        "<p>\xa0\u3000</p><p>k\u200bl\xadm\x85n\x1co\x9fp\x01q</p><div>\u3000r\xa0</div>"
    )
    page = agree(html)
    assert page.text == "a b c d e f g h i j k\u200bl\xadm n opq r"
    only_spaces = agree("<p>\xa0</p><p> \u3000 </p>")
    assert only_spaces.text == ""


@BOTH
def test_lone_surrogates_do_not_crash(parser: str) -> None:
    page = parse_html("<p>bad \ud800 half</p><a href='/s\udfff'>x</a>", BASE, parser)
    page.text.encode("utf-8")
    assert "bad" in page.text and "half" in page.text


@BOTH
@pytest.mark.parametrize("html", ["", "   ", "\n\t", "\x00", "<!-- only a comment -->", "<html>"])
def test_empty_documents(parser: str, html: str) -> None:
    page = parse_html(html, BASE, parser)
    assert page.links == [] and page.title == "" and not page.noindex
    assert page.text in ("", "\ufffd")


@BOTH
def test_random_garbage_never_raises(parser: str) -> None:
    rng = random.Random(11)
    alphabet = "<>/=\"' abc&;#!-?\x00\n\ud7ff中é" + "".join(chr(i) for i in range(1, 32))
    tags = [
        "<a href=",
        "<p>",
        "</p>",
        "<script>",
        "</script>",
        "<![CDATA[",
        "<!--",
        "<?xml ",
        "<base href=",
        "<meta ",
        "<title>",
        "<table>",
        "<frame src=",
        "&#0;",
        "&#x110000;",
    ]
    for _ in range(150):
        html = "".join(
            rng.choice(tags) if rng.random() < 0.2 else rng.choice(alphabet)
            for _ in range(rng.randrange(0, 400))
        )
        page = parse_html(html, BASE, parser)
        assert isinstance(page, ParsedPage)
        page.text.encode("utf-8")
        assert all(link.startswith(("http://", "https://")) for link in page.links)


@pytest.mark.slow
def test_a_10mb_page() -> None:
    chunk = '<div><p>text 中文 <a href="/p/{i}">link</a></p></div>\n'
    html = "<html><body>" + "".join(chunk.format(i=i) for i in range(200_000)) + "</body></html>"
    assert len(html.encode()) > 10_000_000
    t0 = time.perf_counter()
    page = parse_html(html, BASE)
    assert page.parser == "lxml"
    assert len(page.links) == 200_000 and page.links[-1] == "http://site.test/p/199999"
    assert page.text.startswith("text 中文 link text")
    assert time.perf_counter() - t0 < 30


def test_one_text_node_over_10mb() -> None:
    html = "<p>" + "x" * 11_000_000 + '</p><a href="/after">a</a>'
    page = parse_html(html, BASE)
    assert page.parser == "lxml" and page.links == ["http://site.test/after"]
    assert len(page.text) == 11_000_002


def test_deep_nesting_within_libxml2_limits_stays_on_the_fast_path() -> None:
    html = "<div>" * 1500 + '<a href="/deep">deep</a>' + "</div>" * 1500 + "after"
    page = agree(html)
    assert page.links == ["http://site.test/deep"] and page.text == "deep after"


@pytest.mark.slow
@pytest.mark.parametrize("tag", ["div", "b", "table"])
def test_deeper_nesting_falls_back_to_bs4_in_linear_time(tag: str) -> None:
    depth = 30_000
    html = f"<{tag}>" * depth + '<a href="/deep">deep</a>' + f"</{tag}>" * depth + "after"
    t0 = time.perf_counter()
    page = parse_html(html, BASE)
    assert page.parser == "bs4"  # libxml2 stops at depth 2048 and would lose the rest
    assert page.links == ["http://site.test/deep"] and page.text.startswith("deep")
    assert time.perf_counter() - t0 < 15


def test_an_unknown_parser_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown parser"):
        parse_html("<p>x</p>", BASE, "html5lib")


# -- the fast resolver equals urljoin ---------------------------------------------------


def reference(base: str, href: str) -> str | None:
    """urljoin, fragment removed, http(s) with a host and a valid port only."""
    href = href.strip("".join(chr(i) for i in range(33)))
    if not href or href.startswith("#"):
        return None
    try:
        if re.match(r"([A-Za-z][A-Za-z0-9+.-]*:)?//([/?#\\]|$)", href):
            return None  # "http://" or "//" without a host is no URL (urljoin says: the base)
        url = urljoin(base, href)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        parts.port  # noqa: B018
    except ValueError:
        return None
    return url.split("#", 1)[0]


# bases and pieces of hrefs, odd ones among them, that the random hrefs are drawn from
_RESOLVER_BASES = [
    "http://h.test/a/b/c.html",
    "http://h.test",
    "http://h.test/",
    "https://h.test:8443/a/b/",
    "http://127.0.0.1:8080/x?q=1#f",
    "http://h.test/a//b/c",
    "http://h.test/a/./b",
    "http://h.test/a;p?q",
    "http://user@h.test/a/b",
    "http://[::1]:80/a/b",
    "http://h.test/%E4/x/",
    "HTTP://H.TEST/A",
    "ftp://h.test/a/",
]
_HREF_ATOMS = [
    "a",
    "b.html",
    "..",
    ".",
    "",
    "/",
    "//",
    "?",
    "#",
    ";",
    ":",
    "x:y",
    "http:",
    "https:",
    "//h2.test",
    "h3.test:99",
    ":70000",
    ":65535",
    "%20",
    " ",
    "\t",
    "中",
    "[",
    "]",
    "@",
    "q=1",
    "&",
    "=",
    "mailto:",
    "javascript:",
    "\\",
    "HTTP://",
    "\x01",
    "\xa0",
    "\u3000",
    "\u200b",
    "\x7f",
    "'",
    "(",
    "~",
    "|",
    "..x",
    ".x",
]


@pytest.mark.slow
def test_the_resolver_matches_urljoin_on_random_hrefs() -> None:
    prefixes = ["http://", "https://", "//", "/", "./", "../", "../../", "?", ""]
    rng = random.Random(5)
    for _ in range(400):
        base = rng.choice(_RESOLVER_BASES)
        resolver = LinkResolver(base)
        hrefs = [
            rng.choice(prefixes)
            + "".join(
                rng.choice(_HREF_ATOMS) + rng.choice(["", "/", "/", "?", "#"])
                for _ in range(rng.randint(1, 6))
            )
            for _ in range(100)
        ]
        want = [reference(base, href) for href in hrefs]
        for href, url in zip(hrefs, want, strict=True):
            assert resolver.resolve(href) == url, (base, href)
        assert resolver.resolve_all(hrefs) == list(dict.fromkeys(u for u in want if u))


def test_the_resolver_on_whole_pages_of_ordinary_and_odd_hrefs() -> None:
    # resolve_all tests the characters of a whole page at once and each
    # href's shape by string tests: a page of plain hrefs, and one where an
    # odd href (tab, ";", a space at the end) is mixed in, must both equal urljoin.
    rng = random.Random(8)
    plain = [
        "a",
        "b.html",
        "x-1",
        "%7E",
        "中文",
        "(",
        "~",
        "'",
        "!",
        "=",
        "&",
        "@",
        ":",
        "[",
        "\\",
        "\x01",
    ]
    odd = [";", "\t", "\n", " ", "?", "#", "\x00", "..", "."]
    shapes = [
        "/",
        "",
        "./",
        "../",
        "../../",
        "?",
        "//h2.test/",
        "http://h3.test:8080/",
        "https://h4.test/",
    ]
    for base in ["http://h.test/a/b/c.html", "https://h.test:8443/a/", "http://h.test"]:
        resolver = LinkResolver(base)
        for with_odd in (False, True):
            atoms = plain + odd if with_odd else plain
            hrefs = [
                rng.choice(shapes)
                + "/".join("".join(rng.choices(atoms, k=rng.randint(1, 3))) for _ in range(3))
                + rng.choice(["", "", "#frag", "?q=1", "/"])
                for _ in range(300)
            ]
            want = list(dict.fromkeys(u for u in (reference(base, h) for h in hrefs) if u))
            assert resolver.resolve_all(hrefs) == want, base


def test_the_resolver_on_the_shapes_links_usually_have() -> None:
    r = LinkResolver("http://h.test:8080/news/2024/a.html?x=1")
    cases = {
        "b.html": "http://h.test:8080/news/2024/b.html",
        "../2023/c.html#x": "http://h.test:8080/news/2023/c.html",
        "../../../../top": "http://h.test:8080/top",
        "./t/d.html": "http://h.test:8080/news/2024/t/d.html",
        "/root?q=1": "http://h.test:8080/root?q=1",
        "?page=2": "http://h.test:8080/news/2024/a.html?page=2",
        "//cdn.test/x": "http://cdn.test/x",
        "https://o.test:443/y": "https://o.test:443/y",
    }
    for href, want in cases.items():
        assert r.resolve(href) == want == reference(r._base, href)


def test_dot_segments_in_root_paths_and_upper_case_schemes_resolve_as_urljoin_does() -> None:
    # resolve_all joins both shapes itself; each must equal urljoin, one by one and in a page
    hrefs = [
        "/x/.././p/19.html",
        "/..",
        "/../a",
        "/a/../..",
        "/./",
        "/a/b/..",
        "/a/b/.",
        "/x/.././item?cat=2&id=27",
        "/a/./b?q=/../c",
        "/a/..?",
        "/%2e%2e/a",
        "/a/.b/../c",
        "HTTP://h.test/x",
        "Http://h.test",
        "HTTPS://h.test:99/a?b",
        "HTTP://h.test:99999/",
        "HTTP://",
        "HtTp://H.Test/./a",
    ]
    for base in ("http://h.test/a/b/c.html", "https://h.test:8443/d/?q=1"):
        r = LinkResolver(base)
        want = [reference(base, h) for h in hrefs]
        assert [r.resolve(h) for h in hrefs] == want
        assert r.resolve_all(hrefs) == list(dict.fromkeys(u for u in want if u))


# -- the benchmark command ---------------------------------------------------------------


@pytest.mark.slow
def test_bench_parse_command(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "bench",
            "parse",
            "--pages",
            "5",
            "--bs4-pages",
            "2",
            "--size-kb",
            "8",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "KiB page" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"decode", "libxml2", "lexbor-tree", "lxml", "lexbor", "bs4"}
    assert rows["lxml"][1] == rows["lexbor"][1] == "5" and rows["bs4"][1] == "2"
    assert float(rows["lxml"][4].replace(",", "")) > 0
    bad = subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", "bench", "parse", "--size-kb", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "size-kb" in bad.stderr


def test_bench_parse_over_a_directory_of_pages(tmp_path) -> None:
    pages = tmp_path / "site"
    (pages / "sub").mkdir(parents=True)
    (pages / "index.html").write_text(ORDINARY["news-zh"], encoding="utf-8")
    (pages / "sub" / "blog.html").write_text(ORDINARY["blog-en"], encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "bench",
            "parse",
            "--dir",
            str(pages),
            "--rounds",
            "2",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("parse benchmark: 2 pages under") and "2 rounds" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:4]}
    assert set(rows) == {"lxml", "lexbor"} and rows["lexbor"][1] == "4"
    assert lines[4] == "  pages the parsers disagree on: 0"
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "notes.txt").write_text("<p>not a page</p>", encoding="utf-8")
    empty = subprocess.run(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "bench",
            "parse",
            "--dir",
            str(tmp_path / "text"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert empty.returncode != 0 and "no *.html" in empty.stderr


ANCHORS_PAGE = """<html><head><title>Anchors</title></head><body>
<nav><a href="/a">Home</a> <a href="/b"><img src="l.png" alt="Logo"> <b>Bold</b>
<div>block</div>after<script>var hidden = 1;</script></a></nav>
<p><a href="/a#top">  home
  again </a><a href="/empty"><img src="x.png"></a><a href="/nf" rel="nofollow">skip</a>
<a href="mailto:x@site.test">mail</a><a href="/long">%s</a></p>
<noscript><a href="/ns">启用 脚本</a></noscript><template><a href="/t">inert</a></template>
</body></html>""" % ("word " * 80)


@BOTH
def test_anchor_text_per_linked_url(parser: str) -> None:
    page = parse_html(ANCHORS_PAGE, BASE, parser)
    assert page.anchors["http://site.test/a"] == "Home home again"  # joined in document order
    assert page.anchors["http://site.test/b"] == "Logo Bold block after"  # alt is text
    assert "http://site.test/empty" in page.links and "http://site.test/empty" not in page.anchors
    assert page.anchors["http://site.test/ns"] == "启用 脚本"
    long = page.anchors["http://site.test/long"]
    assert len(long) <= 256 and long == ("word " * 52)[:256].rstrip()
    assert set(page.anchors) <= set(page.links)
    assert not any("nf" in u or "/t" in u.split("test")[1] for u in page.anchors)


def test_both_parsers_agree_on_anchor_text() -> None:
    assert agree(ANCHORS_PAGE).anchors


@pytest.mark.parametrize(
    "body",
    [
        "<p>one \ue000 two</p>",  # the mark in the text, no anchor at all
        "<p>one \ue000 two <a href=/x>x</a> <a>no href</a></p>",  # in the text
        '<p>one <a href="/x"> x \ue000 <b>y</b> </a><a href=/x>again</a><a href=/z><i>'
        "\ue000</i></a></p>",  # inside anchors
    ],
)
def test_page_holding_the_anchor_mark_keeps_text_and_anchors(body: str) -> None:
    # the lxml path writes anchor texts after a private-use mark; a page that
    # holds that character itself must lose neither text nor anchors
    page = agree(f"<html><body>{body}</body></html>")
    assert "one \ue000" in page.text or page.anchors["http://site.test/z"] == "\ue000"
    if "/x" in body:
        assert page.anchors["http://site.test/x"].startswith("x")


@BOTH
def test_an_anchor_text_cut_at_the_cap_keeps_no_trailing_space(parser: str) -> None:
    # words of 4 characters with their space: the cut at 256 lands on a space
    html = '<p><a href="/x">%s</a></p>' % ("abc " * 80)
    anchor = parse_html(html, BASE, parser).anchors["http://site.test/x"]
    assert anchor == ("abc " * 64).rstrip() and len(anchor) == 255
