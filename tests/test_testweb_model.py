"""The synthetic web's model: canonical URLs, the generator, traps, expected crawls, known items."""

from __future__ import annotations

import collections
import pickle

import pytest

from srcrawl.testweb import Host, Link, Page, TestWebError, Web, canonical, generate
from srcrawl.testweb.generator import href_for, loopback_endpoints
from srcrawl.testweb.traps import is_trap, trap_page
from srcrawl.testweb.urls import remove_dot_segments

ORIGIN = "http://127.0.0.1:9000"


# ---- canonical URLs


@pytest.mark.parametrize(
    ("path", "expected"),
    [  # RFC 3986 §5.2.4 and §5.4 examples
        ("/a/b/c/./../../g", "/a/g"),
        ("/mid/content=5/../6", "/mid/6"),
        ("/a/..", "/"),
        ("/..", "/"),
        ("/../../g", "/g"),
        ("/a/./", "/a/"),
        ("/a/b/.", "/a/b/"),
        ("/a/b/..", "/a/"),
        ("/a//b", "/a//b"),
    ],
)
def test_remove_dot_segments(path: str, expected: str) -> None:
    assert remove_dot_segments(path) == expected


@pytest.mark.parametrize(
    ("url", "base", "expected"),
    [
        ("HTTP://127.0.0.1:9000/x", None, f"{ORIGIN}/x"),
        ("http://127.0.0.1:80/x", None, "http://127.0.0.1/x"),
        ("https://127.0.0.1:443", None, "https://127.0.0.1/"),
        (f"{ORIGIN}/p/1.html#frag", None, f"{ORIGIN}/p/1.html"),
        (f"{ORIGIN}/a?", None, f"{ORIGIN}/a"),
        (f"{ORIGIN}/a?b=2&a=1&a=0", None, f"{ORIGIN}/a?a=0&a=1&b=2"),
        (f"{ORIGIN}/./x/../y", None, f"{ORIGIN}/y"),
        ("../up.html", f"{ORIGIN}/a/b/page.html", f"{ORIGIN}/a/up.html"),
        ("?b=2&a=1", f"{ORIGIN}/a/page.html", f"{ORIGIN}/a/page.html?a=1&b=2"),
        ("//127.0.0.1:9000/./z", f"{ORIGIN}/a", f"{ORIGIN}/z"),
        ("../../../../x", f"{ORIGIN}/a/b", f"{ORIGIN}/x"),
        ("http://[::1]:8080/", None, "http://[::1]:8080/"),
        ("javascript:void(0)", f"{ORIGIN}/", None),
        ("mailto:a@example.invalid", f"{ORIGIN}/", None),
        ("data:text/html,<b>", f"{ORIGIN}/", None),
        ("ftp://127.0.0.1/f", None, None),
        ("http://[::1/", f"{ORIGIN}/", None),
        ("http://[127.0.0.1]/", None, None),
        ("http://127.0.0.1:99999/", None, None),
        ("http://127.0.0.1:abc/", None, None),
        ("http://", None, None),
        ("http://", f"{ORIGIN}/a", None),
        ("http:///p/1.html", f"{ORIGIN}/a", None),
        ("http:b", f"{ORIGIN}/a/c", f"{ORIGIN}/a/b"),
    ],
)
def test_canonical(url: str, base: str | None, expected: str | None) -> None:
    assert canonical(url, base) == expected


@pytest.mark.parametrize(
    "style", ["root", "rel", "abs", "proto", "upper", "frag", "dots", "reorder"]
)
@pytest.mark.parametrize(
    ("source", "target"),
    [
        (f"{ORIGIN}/", f"{ORIGIN}/p/3.html"),
        (f"{ORIGIN}/docs/s1/page53.html", f"{ORIGIN}/item?cat=2&id=17"),
        (f"{ORIGIN}/docs/s1/page53.html", f"{ORIGIN}/"),
        (f"{ORIGIN}/item?cat=2&id=17", f"{ORIGIN}/docs/s0/page3.html"),
        (f"{ORIGIN}/p/3.html", f"{ORIGIN}/private/"),
        (f"{ORIGIN}/p/3.html", "http://127.0.0.1:9001/p/4.html"),
    ],
)
def test_every_href_style_resolves_to_its_target(source: str, target: str, style: str) -> None:
    href = href_for(source, target, style)
    assert canonical(href, source) == target, href


# ---- the generator


def test_generator_is_deterministic_and_seed_dependent() -> None:
    a, b = generate(4, 30, seed=5), generate(4, 30, seed=5)
    assert a.pages == b.pages and a.special == b.special
    assert list(a.edges(3)) == list(b.edges(3))
    assert a.known_items() == b.known_items()
    c = generate(4, 30, seed=6)
    assert [e[:2] for e in a.edges()] != [e[:2] for e in c.edges()]


def test_structure_does_not_depend_on_ports() -> None:
    a = generate(3, 25, seed=2, port_base=9000)
    b = generate(3, 25, seed=2, ports=[41000, 41007, 41003])
    mapping = {
        f"127.0.0.1:{9000 + i}": f"127.0.0.1:{p}" for i, p in enumerate([41000, 41007, 41003])
    }

    def moved(url: str) -> str:
        for old, new in mapping.items():
            url = url.replace(old, new)
        return url

    assert sorted(moved(u) for u in a.pages) == sorted(b.pages)
    assert {(moved(s), moved(t)) for s, t, _ in a.edges()} == {(s, t) for s, t, _ in b.edges()}
    assert {moved(u): p.terms for u, p in a.pages.items()} == {
        u: p.terms for u, p in b.pages.items()
    }


def test_urls_are_canonical_on_loopback_and_every_link_target_is_served() -> None:
    web = generate(4, 40, seed=3)
    for url, page in web.pages.items():
        assert canonical(url) == url and url.startswith("http://127.0.0.1:")
        for link in page.links:
            assert canonical(link.target) == link.target
            assert web.page(link.target) is not None, (url, link)
    hosts = {web.host_of(u).index for u in web.pages}
    assert hosts == {0, 1, 2, 3}


def test_address_mode_uses_one_loopback_address_per_host() -> None:
    web = generate(3, 5, seed=1, addresses=True, port_base=9100)
    assert web.seed_urls == [f"http://127.0.0.{i}:9100/" for i in (2, 3, 4)]
    with pytest.raises(TestWebError):
        loopback_endpoints(254, 9000, addresses=True)
    for address in ("10.0.0.1", "127.evil.example", "::2", "fe80::1"):
        with pytest.raises(TestWebError):
            Host(index=0, address=address, port=8000)
    assert Host(index=0, address="::1", port=8000).origin == "http://[::1]:8000"  # IPv6 loopback
    assert generate(1, 2, seed=1, port_base=80).seed_urls == ["http://127.0.0.1/"]


@pytest.mark.parametrize(
    "kwargs",
    [{"hosts": 0}, {"pages": 0}, {"ports": [1, 2]}, {"port_base": 65535}, {"crawl_delay": -1}],
)
def test_bad_generator_input_is_a_clear_error(kwargs: dict) -> None:
    args = {"hosts": 3, "pages": 5, **kwargs}
    with pytest.raises(TestWebError):
        generate(**args)


def test_in_links_follow_a_power_law() -> None:
    web = generate(4, 400, seed=11)
    regular = {u for u, p in web.pages.items() if p.template == "regular"}
    indeg = collections.Counter(t for s, t, _ in web.edges() if t in regular and s in regular)
    counts = sorted((indeg[u] for u in regular), reverse=True)
    top = sum(counts[: len(counts) // 100])  # the top 1 % of pages
    assert top > 0.1 * sum(counts), "a few hubs draw a large share of the links"
    assert counts[len(counts) // 2] <= 3, "the median page is rarely linked"
    assert counts[0] >= 20 * max(1, counts[len(counts) // 2])


def test_robots_roles_repeat_every_four_hosts() -> None:
    web = generate(8, 5, seed=1, crawl_delay=0.5, robots_failures=2)
    modes = [h.robots_mode for h in web.hosts]
    assert modes == ["ok", "ok", "missing", "flaky"] * 2
    assert [h.crawl_delay for h in web.hosts[:4]] == [None, 0.5, None, None]
    assert "Crawl-delay: 0.5" in web.hosts[1].robots_text
    assert web.hosts[3].robots_failures == 2
    h0 = web.hosts[0]
    assert not web.robots_allows(f"{h0.origin}/private/0.html")
    assert web.robots_allows(f"{h0.origin}/private/open.html")
    assert not web.robots_allows(f"{h0.origin}/p/1.html?print=1")
    assert not web.robots_allows(f"{h0.origin}/p/1.html", agent="badbot")
    assert web.robots_allows(f"{web.hosts[2].origin}/private/0.html")


def test_web_pickles_for_the_server_process() -> None:
    web = generate(4, 10, seed=1)
    web.robots_allows(web.hosts[0].root)
    copy = pickle.loads(pickle.dumps(web))
    assert copy.pages == web.pages and copy.special == web.special
    assert copy.expected_crawl(copy.seed_urls, 3) == web.expected_crawl(web.seed_urls, 3)


# ---- traps


def test_calendar_trap_goes_on_forever() -> None:
    url = f"{ORIGIN}/calendar/2024/11"
    seen = []
    for _ in range(30):
        page = trap_page(url)
        assert page is not None and len(page.links) == 1
        link = page.links[0]
        assert canonical(link.href, url) == link.target
        seen.append(url)
        url = link.target
    assert seen[:3] == [
        f"{ORIGIN}/calendar/2024/11",
        f"{ORIGIN}/calendar/2024/12",
        f"{ORIGIN}/calendar/2025/01",
    ]
    assert url == f"{ORIGIN}/calendar/2027/05"
    assert trap_page(f"{ORIGIN}/calendar/2024/13") is None and not is_trap(
        f"{ORIGIN}/calendar/2024/1"
    )


def test_repeated_segment_trap() -> None:
    page = trap_page(f"{ORIGIN}/trap/a/a/")
    assert page.links[0].target == f"{ORIGIN}/trap/a/a/a/"
    assert canonical(page.links[0].href, page.url) == page.links[0].target
    assert trap_page(f"{ORIGIN}/trap/b/") is None


def test_graph_prints_the_traps_for_a_few_steps() -> None:
    web = generate(1, 3, seed=1)
    trap_edges = [(s, t) for s, t, _ in web.edges(trap_steps=4) if is_trap(s)]
    assert len(trap_edges) == 8
    assert (web.special["calendar"], f"{web.base_url(0)}/calendar/2024/02") in trap_edges
    assert not [e for e in web.edges() if is_trap(e[0])]


# ---- expected crawl on a hand-written web


def _tiny_web() -> Web:
    h = Host(
        index=0,
        address="127.0.0.1",
        port=9000,
        robots_mode="ok",
        robots_text="User-agent: *\nDisallow: /private/\n",
    )
    g = Host(index=1, address="127.0.0.1", port=9001, robots_mode="missing")
    G = g.origin

    def page(path: str, *links: Link, origin: str = ORIGIN, **kw) -> Page:
        return Page(url=origin + path, links=links, **kw)

    def a(target: str, **kw) -> Link:
        """A link to ``target`` (a path means: on the first host)."""
        url = ORIGIN + target if target.startswith("/") else target
        return Link(target=url, href=url, **kw)

    pages = [
        page(
            "/",
            a("/b"),
            a("/nf", nofollow=True),
            a("/r1"),
            a("/private/x"),
            a("/meta"),
            a("/err"),
            a(f"{G}/"),
        ),
        page("/b", a("/c"), a("/"), a("/fr", kind="frame")),
        page("/c", a("/d")),
        page("/d", a("/e")),
        page("/e"),
        page("/fr"),
        page("/nf", a("/nf-child")),
        page("/nf-child"),
        page("/r1", a("/r2", kind="redirect"), status=301, template="redirect", location="/r2"),
        page(
            "/r2",
            a("/landing", kind="redirect"),
            status=302,
            template="redirect",
            location="/landing",
        ),
        page("/landing", a("/after-landing")),
        page("/after-landing"),
        page("/private/x", a("/secret")),
        page("/secret"),
        page("/meta", a("/meta-child"), meta_nofollow=True),
        page("/meta-child"),
        page("/err", a("/err-child"), status=500, template="error"),
        page("/err-child"),
        page("/", a(f"{G}/private/y"), origin=G),
        page("/private/y", origin=G),
    ]
    return Web(hosts=[h, g], pages={p.url: p for p in pages})


def test_expected_crawl_of_a_hand_written_web() -> None:
    web = _tiny_web()
    G = web.base_url(1)
    assert web.expected_crawl([f"{ORIGIN}/"], 3) == {
        f"{ORIGIN}/": 0,
        f"{ORIGIN}/b": 1,
        f"{ORIGIN}/r1": 1,
        f"{ORIGIN}/meta": 1,
        f"{ORIGIN}/err": 1,
        f"{G}/": 1,
        f"{ORIGIN}/c": 2,
        f"{ORIGIN}/fr": 2,
        f"{ORIGIN}/r2": 2,
        f"{G}/private/y": 2,
        f"{ORIGIN}/d": 3,
        f"{ORIGIN}/landing": 3,
    }


def test_expected_crawl_depth_scope_and_kinds() -> None:
    web = _tiny_web()
    G = web.base_url(1)
    assert web.expected_crawl([f"{ORIGIN}/"], 0) == {f"{ORIGIN}/": 0}
    deep = web.expected_crawl([f"{ORIGIN}/"], 10)
    assert deep[f"{ORIGIN}/e"] == 4 and deep[f"{ORIGIN}/after-landing"] == 4
    for never in ("/nf", "/nf-child", "/private/x", "/secret", "/meta-child", "/err-child"):
        assert f"{ORIGIN}{never}" not in deep
    same_host = web.expected_crawl([f"{ORIGIN}/"], 10, allowed=lambda u: u.startswith(ORIGIN))
    assert G + "/" not in same_host and f"{ORIGIN}/landing" in same_host
    no_redirects = web.expected_crawl([f"{ORIGIN}/"], 10, kinds=("a", "frame"))
    assert f"{ORIGIN}/r1" in no_redirects and f"{ORIGIN}/r2" not in no_redirects
    no_frames = web.expected_crawl([f"{ORIGIN}/"], 10, kinds=("a", "redirect"))
    assert f"{ORIGIN}/fr" not in no_frames
    assert web.expected_crawl([f"{ORIGIN}/private/x"], 3) == {}
    assert web.expected_crawl(["HTTP://127.0.0.1:9000/c#top"], 1) == {
        f"{ORIGIN}/c": 0,
        f"{ORIGIN}/d": 1,
    }
    with pytest.raises(TestWebError):
        web.expected_crawl(["javascript:x"], 1)
    with pytest.raises(TestWebError):
        web.expected_crawl([f"{ORIGIN}/"], -1)


def test_hand_written_web_rejects_non_canonical_urls() -> None:
    h = Host(index=0, address="127.0.0.1", port=9000)
    with pytest.raises(TestWebError):
        Web(hosts=[h], pages={f"{ORIGIN}/a#x": Page(url=f"{ORIGIN}/a#x")})
    with pytest.raises(TestWebError):
        Web(hosts=[h], pages={"http://127.0.0.1:9009/": Page(url="http://127.0.0.1:9009/")})


# ---- expected crawl on the generated web


def test_expected_crawl_of_the_generated_web() -> None:
    web = generate(4, 60, seed=4)
    s = web.special
    full = web.expected_crawl(web.seed_urls, 12, allowed=lambda u: not is_trap(u))
    regular = [u for u, p in web.pages.items() if p.template == "regular"]
    assert set(regular) <= set(full), "the recursive tree reaches every regular page"
    for h in web.hosts:
        private = f"{h.origin}/private/0.html"
        assert (private in full) == (h.robots_mode == "missing")
    assert f"{web.base_url(0)}/private/open.html" in full  # Allow beats Disallow
    assert f"{web.base_url(0)}/hidden/open.html" in full
    for never in ("nofollow_rel_target", "nofollow_rel_target2", "nofollow_meta_target"):
        assert s[never] not in full
    for name in (
        "nofollow_rel_followed",
        "noindex_child",
        "timeout_headers",
        "truncated",
        "not_found",
        "png",
        "binary_as_html",
        "large_child",
        "garbage_child",
        "frame_left",
        "area_b",
        "paged_3",
        "relative_top",
        "redirect_cross_host_target",
        "gbk_undeclared_next",
        "base_child",
        "base_up",
    ):
        assert s[name] in full, name
    assert s["redirect_disallowed"] in full and f"{web.base_url(0)}/private/0.html" not in full
    assert full[s["redirect_chain_target"]] == full[s["redirect_chain"]] + 3
    assert s["redirect_loop"] in full and f"{web.base_url(0)}/r/loop/b" in full
    assert not [u for u in full if is_trap(u)]
    trapped = web.expected_crawl([s["index"]], 6)
    assert f"{web.base_url(0)}/calendar/2024/06" in trapped
    assert f"{web.base_url(0)}/calendar/2024/07" not in trapped
    assert f"{web.base_url(0)}/trap/a/a/a/a/a/a/" in trapped


def test_known_items() -> None:
    web = generate(4, 30, seed=9)
    items = web.known_items()
    queries = [q for q, _ in items]
    assert len(queries) == len(set(queries)), "every planted term belongs to one page"
    urls = {u for _, u in items}
    assert web.special["noindex"] not in urls and web.special["large"] not in urls
    assert web.special["gbk_undeclared"] in urls and web.special["big5_meta"] in urls
    assert all(web.pages[u].indexable for u in urls)
    en = web.known_items(lang="en")
    zh = web.known_items(lang="zh")
    assert len(en) == len(zh) == len(items) // 2
    assert all(q.isascii() and q.isalpha() for q, _ in en)
    assert all(len(q) == 4 and not q.isascii() for q, _ in zh)
    crawl = web.expected_crawl(web.seed_urls, 1)
    assert {u for _, u in web.known_items(within=crawl)} <= set(crawl)


@pytest.mark.slow
def test_planted_terms_single_out_their_page_after_segmentation() -> None:
    """Every token of a known-item query occurs together in that page's text only."""
    from srcrawl.indexer.tokenizer import python_jieba
    from srcrawl.testweb.content import render

    jieba = python_jieba()

    seg = jieba.Tokenizer()
    seg.initialize()
    web = generate(4, 20, seed=2, large_bytes=1000)

    def tokens(text: str) -> set[str]:
        return {t.lower() for t in seg.cut(text) if t.strip() and t.isalnum()}

    docs = {
        url: tokens(render(web, page).body.decode(page.encoding, "replace"))
        for url, page in web.pages.items()
        if page.indexable
    }
    items = web.known_items()
    assert len(items) > 200
    for query, url in items:
        q = tokens(query)
        assert q and [u for u, t in docs.items() if q <= t] == [url], query


def test_late_robots_hosts_and_linked_sitemap_pages() -> None:
    web = generate(
        4,
        10,
        3,
        ports=[9300, 9301, 9302, 9303],
        sitemaps=True,
        sitemap_links=True,
        late_robots={0: ("hang", 2), 2: ("flaky", 1)},
    )
    modes = [(h.robots_mode, h.robots_failures) for h in web.hosts]
    assert modes[0] == ("hang", 2) and modes[2] == ("flaky", 1) and modes[1][0] == "ok"
    # a late host's robots.txt is the same once it answers
    assert not web.hosts[0].robots_allows(web.hosts[0].origin + "/private/0.html")
    root1 = {ln.target for ln in web.page(web.hosts[1].root).links}
    assert set(web.sitemap_pages[web.hosts[0].origin]) <= root1  # the next host links them
    for late in ({7: ("flaky", 1)}, {0: ("slow", 1)}, {0: ("flaky", -1)}):
        with pytest.raises(TestWebError, match=r"late robots\.txt"):
            generate(4, 10, 3, ports=[9300, 9301, 9302, 9303], late_robots=late)
