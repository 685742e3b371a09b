"""The lexbor parse path: hostile pages stay fast and whole, anchor text per URL."""

from __future__ import annotations

import time

import pytest

from srcrawl.slave.parse import parse_html
from srcrawl.slave.parse_lexbor import ANCHOR_CHARS

BASE = "http://site.test/dir/page.html"


def lexbor(html: str, base: str = BASE):  # type: ignore[no-untyped-def]
    page = parse_html(html, base, "lexbor")
    assert page.parser == "lexbor"
    return page


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tag", "text"), [("div", "deep after"), ("b", "deepafter"), ("table", "deep after")]
)
def test_deep_nesting_stays_on_lexbor_in_linear_time(tag: str, text: str) -> None:
    # libxml2 gives up at depth 2048 (the lxml path then falls back to bs4);
    # lexbor builds the whole tree.
    depth = 30_000
    html = f"<{tag}>" * depth + '<a href="/deep">deep</a>' + f"</{tag}>" * depth + "after"
    t0 = time.perf_counter()
    page = lexbor(html)
    assert page.links == ["http://site.test/deep"] and page.text == text
    assert parse_html(html, BASE, "bs4").text == text  # the reference reads it so too
    assert time.perf_counter() - t0 < 15


@pytest.mark.slow
def test_a_10mb_page_and_one_text_node_over_10mb() -> None:
    chunk = '<div><p>text 中文 <a href="/p/{i}">link</a></p></div>\n'
    html = "<html><body>" + "".join(chunk.format(i=i) for i in range(200_000)) + "</body></html>"
    page = lexbor(html)
    assert len(page.links) == 200_000 and page.links[-1] == "http://site.test/p/199999"
    assert page.text.startswith("text 中文 link text")
    assert page.anchors["http://site.test/p/7"] == "link"
    big = lexbor("<p>" + "x" * 11_000_000 + '</p><a href="/after">a</a>')
    assert big.links == ["http://site.test/after"] and len(big.text) == 11_000_002


def test_invisible_elements_inside_each_other_all_go() -> None:
    html = (
        "<body><noscript><p>no<script>var a = 1;</script>script</p>"
        '<iframe src="/f">fallback</iframe></noscript><p>shown</p>'
        "<template><p>inert</p><a href='/t'>t</a></template></body>"
    )
    page = lexbor(html)
    assert page.text == "shown" and page.links == ["http://site.test/f"]


def test_anchor_text_per_url() -> None:
    html = (
        '<base href="/b/"><a href="x.html">First  <b>one</b></a>'
        '<p><a href="/b/x.html#part"><div>block</div><div>text</div></a></p>'
        '<a href="y"><img src="logo.png" alt="Logo"> home</a>'
        '<a href="z"><img src="no-alt.png"></a><a href="w">  </a>'
        '<a href="v">see<script>hidden()</script><style>p{}</style> this</a>'
        '<a href="u" rel="nofollow">not followed</a>'
        '<a href="mailto:a@site.test">mail</a><area href="/map" alt="a map">'
    )
    page = lexbor(html)
    assert page.links == [
        "http://site.test/b/x.html",
        "http://site.test/b/y",
        "http://site.test/b/z",
        "http://site.test/b/w",
        "http://site.test/b/v",
        "http://site.test/map",
    ]
    # only URLs of links with text, <a> only, joined in document order
    assert page.anchors == {
        "http://site.test/b/x.html": "First one block text",
        "http://site.test/b/y": "Logo home",
        "http://site.test/b/v": "see this",
    }


def test_anchor_text_of_a_link_also_found_nofollow_and_in_noscript() -> None:
    html = (
        '<a href="/x" rel="nofollow">quiet</a><a href="/x">loud</a>'
        '<noscript><a href="/x">no script</a></noscript>'
    )
    page = lexbor(html)
    assert page.links == ["http://site.test/x"]
    assert page.anchors == {"http://site.test/x": "quiet loud no script"}
    assert page.text == "quietloud"  # inline: no space between


def test_anchor_text_is_capped() -> None:
    words = " ".join(f"word{i}" for i in range(100))
    page = lexbor("".join(f'<a href="/a">{words}</a>' for _ in range(5)))
    text = page.anchors["http://site.test/a"]
    # cut at the cap, the space the cut ended on dropped (as on the lxml path)
    assert text == (words + " " + words)[:ANCHOR_CHARS].rstrip()
    assert len(text) == ANCHOR_CHARS - 1 and not text.endswith(" ")


def test_an_utf8_meta_charset_does_not_reencode_bytes() -> None:
    html = '<meta charset="gbk"><title>中文標題 café</title><a href="/頁">網頁</a>'
    page = parse_html(html, BASE, "lexbor", utf8=html.encode())
    assert page.title == "中文標題 café" and page.anchors == {"http://site.test/頁": "網頁"}
