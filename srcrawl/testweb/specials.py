"""The special pages of host 0: every case a crawler must handle, at a stable URL.

``Web.special[name]`` gives the URL of each; ``/special/`` (linked from host
0's root) links to every entry point. Pages reached only through an entry
point (redirect targets, nofollow targets, children) have names too.

=========================  =============================================================
name                       what it is
=========================  =============================================================
index                      ``/special/``: links to every entry below
redirect_301 / _302        ``/r/301`` → 301 → ``/r/landing-301.html``; ``/r/302`` → 302
                           with a relative Location → ``/r/landing-302.html``
redirect_chain             ``/r/chain/1`` →301→ ``2`` →302 (relative ``3``)→ ``3`` →301
                           (absolute)→ ``/r/landing-chain.html`` (…_target)
redirect_loop              ``/r/loop/a`` →302→ ``/r/loop/b`` →302→ ``/r/loop/a``
redirect_cross_host        ``/r/cross`` →301→ host 1 ``/r/landing-cross.html`` (≥ 2 hosts)
redirect_disallowed        ``/r/to-private`` →302→ ``/private/0.html`` (robots-disallowed)
not_found / server_error   ``/missing.html`` 404, ``/error.html`` 500 (no links)
timeout_headers            ``/slow/headers.html``: nothing for ``slow_seconds``, then a page
timeout_body               ``/slow/body.html``: headers and half the body, ``slow_seconds``
                           of silence, then the connection closes short of Content-Length
gbk_header / gbk_meta      GBK; charset in the Content-Type header / only in ``<meta charset>``
gbk_undeclared             GBK with no declaration anywhere (detection must find it)
big5_header / big5_meta    Big5; header / only ``<meta http-equiv=Content-Type>``
                           (each encoded page links to ``/enc/NAME-next.html``, …_next)
png / pdf / octet          ``/files/logo.png`` image/png, ``/files/report.pdf``
                           application/pdf, ``/files/blob.bin`` application/octet-stream
binary_as_html             ``/files/binary.html``: random bytes served as text/html
large                      ``/large.html``: ``large_bytes`` of HTML, all links in the first
                           100 KB (one to ``/large-child.html``, large_child)
unclosed / garbage         malformed HTML whose links still parse (…_child)
truncated                  ``/bad/truncated.html``: Content-Length 4096 larger than the body
bad_links                  ``/links/bad.html``: javascript:, mailto:, data:, tel:, ftp:,
                           ``http://[::1/``, bad ports, no host — plus one good link
nofollow_rel               ``/nofollow/rel.html``: two rel=nofollow links (…_target, …_target2),
                           one normal link (nofollow_rel_followed)
nofollow_meta              ``/nofollow/meta.html``: ``<meta name=robots content=nofollow>``
noindex                    ``/noindex.html``: ``noindex`` (its link to noindex_child is followed)
base                       ``/base/page.html`` with ``<base href=…/base/sub/>``
frameset / iframe          ``<frame src>`` ×2, ``<iframe src>``
area                       ``/map.html``: ``<area href>`` ×2
paged                      ``/paged/1.html`` ``<link rel=next>`` → 2 → 3
relative                   ``/rel/dir/page.html``: ``./``, ``../``, above-root ``../``,
                           fragments, reordered queries
calendar / repeat          the traps of :mod:`srcrawl.testweb.traps`
=========================  =============================================================
"""

from __future__ import annotations

from srcrawl.testweb import traps, words
from srcrawl.testweb.model import Host, Link, Page

BAD_HREFS = (
    "javascript:void(0)",
    "JavaScript:alert('x')",
    "mailto:webmaster@example.invalid",
    "data:text/html,<a href=/p/0.html>x</a>",
    "tel:+10000000000",
    "ftp://127.0.0.1/file.txt",
    "http://[::1/",
    "http://[127.0.0.1]/",
    "http://127.0.0.1:99999/",
    "http://127.0.0.1:abc/",
    "http://",
)
"""hrefs on the bad-links page that are no URL to crawl."""

TRUNCATED_MISSING_BYTES = 4096
"""How much larger the truncated page's Content-Length is than its body."""

ENCODED = {
    "gbk_header": ("gbk", "header"),
    "gbk_meta": ("gbk", "meta"),
    "gbk_undeclared": ("gbk", "none"),
    "big5_header": ("big5", "header"),
    "big5_meta": ("big5", "meta"),
}
FILES = {
    "png": ("/files/logo.png", "image/png"),
    "pdf": ("/files/report.pdf", "application/pdf"),
    "octet": ("/files/blob.bin", "application/octet-stream"),
    "binary_as_html": ("/files/binary.html", "text/html"),
}


class _Builder:
    def __init__(self, hosts: list[Host], terms: words.TermPool) -> None:
        self.o = hosts[0].origin
        self.hosts = hosts
        self.terms = terms
        self.pages: dict[str, Page] = {}
        self.names: dict[str, str] = {}
        self.entries: list[str] = []

    def add(self, name: str | None, page: Page, *, entry: bool = False) -> str:
        self.pages[page.url] = page
        if name:
            self.names[name] = page.url
        if entry:
            self.entries.append(page.url)
        return page.url

    def leaf(self, name: str | None, path: str, **kw) -> str:
        return self.add(
            name, Page(url=self.o + path, template="leaf", terms=self.terms.pair(), **kw)
        )

    def redirect(
        self,
        name: str | None,
        path: str,
        status: int,
        location: str,
        target: str,
        *,
        entry: bool = False,
    ) -> str:
        link = Link(target=target, href=location, kind="redirect")
        page = Page(
            url=self.o + path, status=status, template="redirect", location=location, links=(link,)
        )
        return self.add(name, page, entry=entry)

    def page(self, name: str, path: str, links: list[Link], *, entry: bool = True, **kw) -> str:
        kw.setdefault("terms", self.terms.pair())
        return self.add(name, Page(url=self.o + path, links=tuple(links), **kw), entry=entry)


def build(hosts: list[Host], regular: list[str], terms: words.TermPool) -> tuple[dict, dict]:
    """The special pages of host 0 and their names (``regular`` are host 0's regular pages)."""
    b = _Builder(hosts, terms)
    o = b.o
    _redirects(b)
    _errors_and_files(b)
    _bad_pages(b, regular)
    _robots_meta(b)
    _structure(b, regular)
    # Traps are computed on lookup, never stored.
    for name, path in (("calendar", traps.CALENDAR_START), ("repeat", traps.REPEAT_START)):
        b.names[name] = o + path
        b.entries.append(o + path)
    index_links = [Link(target=u, href=u[len(o) :]) for u in b.entries]
    b.page("index", "/special/", index_links, template="index", entry=False)
    return b.pages, b.names


def _errors_and_files(b: _Builder) -> None:
    """Error statuses, stalled answers, encodings and files that are not HTML."""
    b.add("not_found", Page(url=f"{b.o}/missing.html", status=404, template="error"), entry=True)
    b.add("server_error", Page(url=f"{b.o}/error.html", status=500, template="error"), entry=True)
    b.add(
        "timeout_headers",
        Page(url=f"{b.o}/slow/headers.html", template="leaf", behavior="stall-headers"),
        entry=True,
    )
    b.add(
        "timeout_body",
        Page(url=f"{b.o}/slow/body.html", template="leaf", behavior="stall-body"),
        entry=True,
    )
    for name, (encoding, where) in ENCODED.items():
        slug = name.replace("_", "-")
        nxt = b.leaf(f"{name}_next", f"/enc/{slug}-next.html")
        b.page(
            name,
            f"/enc/{slug}.html",
            [Link(target=nxt, href=f"{slug}-next.html")],
            template="encoded",
            encoding=encoding,
            charset_in=where,
        )
    for name, (path, ctype) in FILES.items():
        template = "binary" if ctype == "text/html" else name
        b.add(name, Page(url=b.o + path, template=template, content_type=ctype), entry=True)


def _bad_pages(b: _Builder, regular: list[str]) -> None:
    """A large page, broken markup, a cut-off body and links that are no URLs."""
    child = b.leaf("large_child", "/large-child.html")
    b.page(
        "large",
        "/large.html",
        [
            Link(target=child, href="large-child.html"),
            *(Link(target=u, href=u) for u in regular[:3]),
        ],
        template="large",
        terms=(),
    )
    for name in ("unclosed", "garbage"):
        child = b.leaf(f"{name}_child", f"/bad/{name}-child.html")
        b.page(
            name,
            f"/bad/{name}.html",
            [Link(target=child, href=f"{name}-child.html")],
            template=name,
            terms=(),
        )
    b.add(
        "truncated",
        Page(url=f"{b.o}/bad/truncated.html", template="leaf", behavior="truncate"),
        entry=True,
    )
    good = b.leaf("bad_links_good", "/links/good.html")
    b.page(
        "bad_links",
        "/links/bad.html",
        [Link(target=good, href="good.html")],
        template="bad-links",
        dropped=BAD_HREFS,
    )


def _redirects(b: _Builder) -> None:
    o = b.o
    t301 = b.leaf("redirect_301_target", "/r/landing-301.html")
    b.redirect("redirect_301", "/r/301", 301, "/r/landing-301.html", t301, entry=True)
    t302 = b.leaf("redirect_302_target", "/r/landing-302.html")
    b.redirect("redirect_302", "/r/302", 302, "landing-302.html", t302, entry=True)
    tchain = b.leaf("redirect_chain_target", "/r/landing-chain.html")
    b.redirect("redirect_chain", "/r/chain/1", 301, "/r/chain/2", f"{o}/r/chain/2", entry=True)
    b.redirect(None, "/r/chain/2", 302, "3", f"{o}/r/chain/3")
    b.redirect(None, "/r/chain/3", 301, tchain, tchain)
    b.redirect("redirect_loop", "/r/loop/a", 302, "/r/loop/b", f"{o}/r/loop/b", entry=True)
    b.redirect(None, "/r/loop/b", 302, "/r/loop/a", f"{o}/r/loop/a")
    if len(b.hosts) > 1:
        far = f"{b.hosts[1].origin}/r/landing-cross.html"
        b.add("redirect_cross_host_target", Page(url=far, template="leaf", terms=b.terms.pair()))
        b.redirect("redirect_cross_host", "/r/cross", 301, far, far, entry=True)
    b.redirect(
        "redirect_disallowed",
        "/r/to-private",
        302,
        "/private/0.html",
        f"{o}/private/0.html",
        entry=True,
    )


def _robots_meta(b: _Builder) -> None:
    t1 = b.leaf("nofollow_rel_target", "/nofollow/rel-target.html")
    t2 = b.leaf("nofollow_rel_target2", "/nofollow/rel-target-2.html")
    ok = b.leaf("nofollow_rel_followed", "/nofollow/rel-followed.html")
    b.page(
        "nofollow_rel",
        "/nofollow/rel.html",
        [
            Link(target=t1, href="rel-target.html", nofollow=True),
            Link(target=ok, href="rel-followed.html"),
            Link(target=t2, href="/nofollow/rel-target-2.html", nofollow=True),
        ],
    )
    mt = b.leaf("nofollow_meta_target", "/nofollow/meta-target.html")
    b.page(
        "nofollow_meta",
        "/nofollow/meta.html",
        [Link(target=mt, href="meta-target.html")],
        meta_nofollow=True,
    )
    child = b.leaf("noindex_child", "/noindex-child.html")
    b.page(
        "noindex", "/noindex.html", [Link(target=child, href="noindex-child.html")], noindex=True
    )


def _structure(b: _Builder, regular: list[str]) -> None:
    o = b.o
    child = b.leaf("base_child", "/base/sub/child.html")
    up = b.leaf("base_up", "/base/up.html")
    b.page(
        "base",
        "/base/page.html",
        [Link(target=child, href="child.html"), Link(target=up, href="../up.html")],
        base_href=f"{o}/base/sub/",
        template="base",
    )
    _frames_and_maps(b)
    _paged(b)
    sib = b.leaf("relative_sibling", "/rel/dir/sibling.html")
    sibq = b.leaf("relative_sibling_query", "/rel/dir/sibling.html?a=1&b=2")
    selfq = b.leaf("relative_self_query", "/rel/dir/page.html?a=1&b=2")
    up = b.leaf("relative_up", "/rel/up.html")
    top = b.leaf("relative_top", "/rel/top.html")
    b.page(
        "relative",
        "/rel/dir/page.html",
        [
            Link(target=sib, href="./sibling.html"),
            Link(target=up, href="../up.html"),
            Link(target=regular[0], href="../../p/0.html#frag"),
            Link(target=sibq, href="sibling.html?b=2&a=1"),
            Link(target=sibq, href="./sibling.html?a=1&b=2#x"),
            Link(target=sib, href="./../dir/./sibling.html"),
            Link(target=top, href="../../../../rel/top.html"),
            Link(target=selfq, href="?b=2&a=1"),
        ],
    )


def _frames_and_maps(b: _Builder) -> None:
    """Links in frames, an iframe and an image map."""
    left = b.leaf("frame_left", "/frames/left.html")
    right = b.leaf("frame_right", "/frames/right.html")
    b.page(
        "frameset",
        "/frames/frameset.html",
        [
            Link(target=left, href="/frames/left.html", kind="frame"),
            Link(target=right, href="right.html", kind="frame"),
        ],
        template="frameset",
        terms=(),
    )
    inner = b.leaf("iframe_inner", "/frames/inner.html")
    b.page("iframe", "/frames/iframe.html", [Link(target=inner, href="inner.html", kind="iframe")])
    ma = b.leaf("area_a", "/map/a.html")
    mb = b.leaf("area_b", "/map/b.html")
    b.page(
        "area",
        "/map.html",
        [
            Link(target=ma, href="/map/a.html", kind="area"),
            Link(target=mb, href="map/b.html", kind="area"),
        ],
        template="imagemap",
    )


def _paged(b: _Builder) -> None:
    """Three pages each linking the next by rel=next."""
    p3 = b.page("paged_3", "/paged/3.html", [], template="paged", entry=False)
    p2 = b.page(
        "paged_2",
        "/paged/2.html",
        [Link(target=p3, href="3.html", kind="next")],
        template="paged",
        entry=False,
    )
    b.page(
        "paged", "/paged/1.html", [Link(target=p2, href="2.html", kind="next")], template="paged"
    )
