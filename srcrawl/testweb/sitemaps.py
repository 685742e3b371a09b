"""Sitemaps of the test web, served only by a web made with ``generate(sitemaps=True)``.

=====  ==================================================================================
host   what it serves
=====  ==================================================================================
0      robots.txt ``Sitemap: /sitemaps/index.xml``: an index of a plain sitemap and a
       gzip-compressed one (``/sitemaps/more.xml.gz``), with ``<lastmod>`` values; they
       name ``/sm/0.html`` … ``/sm/3.html`` (no link leads there; ``/sm/0.html`` links to
       ``/sm/child.html``), ``/p/0.html`` (linked too) and ``/private/sm.html``
       (disallowed by robots.txt: never fetched)
1      hostile: robots.txt names an index nesting deeper than a reader follows (and naming
       itself), a gzip bomb (inflates past the byte cap; its first URL ``/sm/bomb.html``
       comes before the cut), a sitemap of more URLs than a reader takes (all off scope),
       a malformed one (``/sm/kept.html`` before the break, an invalid ``<loc>``), a
       sitemap off scope, one on host 0 (another origin) and one robots.txt disallows
2      no robots.txt; ``/sitemap.xml`` names ``/sm/0.html`` (found by the probe)
=====  ==================================================================================

:attr:`Web.sitemap_pages` holds what a correct reader finds per origin (URL →
``<lastmod>`` as epoch seconds): the expected crawl seeds them (see
:mod:`srcrawl.testweb.expected`).
"""

from __future__ import annotations

import gzip
from dataclasses import replace
from datetime import datetime

from srcrawl.core.defaults import DEFAULT_SITEMAP_MAX_BYTES, DEFAULT_SITEMAP_MAX_URLS
from srcrawl.testweb import words
from srcrawl.testweb.model import Host, Link, Page

XML = "application/xml"
GZIP = "application/gzip"
OFF_SCOPE = "http://localhost:1"
"""An origin no crawl of the test web has in scope (nothing listens there)."""
_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"

Files = dict[str, tuple[str, bytes]]
Found = dict[str, dict[str, float | None]]


def _when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def urlset(entries: list[tuple[str, str | None]]) -> bytes:
    rows = "".join(
        f"<url><loc>{loc}</loc>" + (f"<lastmod>{mod}</lastmod>" if mod else "") + "</url>"
        for loc, mod in entries
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{_NS}">{rows}</urlset>'.encode()


def index(locs: list[str]) -> bytes:
    rows = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<?xml version="1.0"?><sitemapindex xmlns="{_NS}">{rows}</sitemapindex>'.encode()


def add_sitemaps(
    hosts: list[Host], pages: dict[str, Page], terms: words.TermPool
) -> tuple[list[Host], Files, Found]:
    """The hosts (robots.txt with their ``Sitemap:`` lines), the sitemap files by URL and
    what a reader finds per origin; the pages only sitemaps lead to are added to ``pages``."""
    files: Files = {}
    found: Found = {}
    hosts = list(hosts)

    def leaf(url: str, links: tuple[Link, ...] = ()) -> None:
        pages[url] = Page(
            url=url, template="leaf" if not links else "article", links=links, terms=terms.pair()
        )

    o = hosts[0].origin
    plain = [
        (f"{o}/sm/0.html", "2024-05-06T10:00:00+02:00"),
        (f"{o}/sm/1.html", "2024-05-06"),
        (f"{o}/p/0.html", "2023-01-01T00:00:00Z"),
        (f"{o}/private/sm.html", None),
    ]
    more = [(f"{o}/sm/2.html", "2024-06-01T00:00:00Z"), (f"{o}/sm/3.html", None)]
    files[f"{o}/sitemaps/index.xml"] = (
        XML,
        index([f"{o}/sitemaps/plain.xml", f"{o}/sitemaps/more.xml.gz"]),
    )
    files[f"{o}/sitemaps/plain.xml"] = (XML, urlset(plain))
    files[f"{o}/sitemaps/more.xml.gz"] = (GZIP, gzip.compress(urlset(more), mtime=0))
    found[o] = {url: _when(mod) if mod else None for url, mod in plain + more}
    leaf(f"{o}/sm/0.html", (Link(target=f"{o}/sm/child.html", href="child.html"),))
    for url in (f"{o}/sm/1.html", f"{o}/sm/2.html", f"{o}/sm/3.html", f"{o}/sm/child.html"):
        leaf(url)
    hosts[0] = _with_sitemaps(hosts[0], [f"{o}/sitemaps/index.xml"])
    if len(hosts) > 1:
        hosts[1] = _hostile(hosts[1], o, files, found, leaf)
    if len(hosts) > 2:
        o2 = hosts[2].origin
        files[f"{o2}/sitemap.xml"] = (XML, urlset([(f"{o2}/sm/0.html", "2024-01-02")]))
        found[o2] = {f"{o2}/sm/0.html": _when("2024-01-02")}
        leaf(f"{o2}/sm/0.html")
    return hosts, files, found


def _hostile(host: Host, other: str, files: Files, found: Found, leaf) -> Host:
    o = host.origin
    nested = [f"{o}/hostile/nested-{i}.xml" for i in range(4)]
    files[nested[0]] = (XML, index([nested[0], nested[1]]))  # names itself too
    for i in (1, 2):
        files[nested[i]] = (XML, index([nested[i + 1]]))
    files[nested[3]] = (XML, urlset([(f"{o}/sm/too-deep.html", None)]))  # never read
    head = urlset([(f"{o}/sm/bomb.html", None)]).replace(b"</urlset>", b"")
    bomb = head + b" " * (DEFAULT_SITEMAP_MAX_BYTES + 1024) + b"</urlset>"
    files[f"{o}/hostile/bomb.xml.gz"] = (GZIP, gzip.compress(bomb, 9, mtime=0))
    huge = [(f"{OFF_SCOPE}/huge/{i}.html", None) for i in range(DEFAULT_SITEMAP_MAX_URLS + 10)]
    files[f"{o}/hostile/huge.xml"] = (XML, urlset(huge))
    broken = urlset([(f"{o}/sm/kept.html", None), ("http://[::1/", None)])
    files[f"{o}/hostile/malformed.xml"] = (XML, broken.replace(b"</urlset>", b"<url><loc><<"))
    leaf(f"{o}/sm/bomb.html")
    leaf(f"{o}/sm/kept.html")
    found[o] = {
        f"{o}/sm/bomb.html": None,
        f"{o}/sm/kept.html": None,
        **{url: None for url, _ in huge[:DEFAULT_SITEMAP_MAX_URLS]},
    }
    return _with_sitemaps(
        host,
        [
            nested[0],
            f"{o}/hostile/bomb.xml.gz",
            f"{o}/hostile/huge.xml",
            f"{o}/hostile/malformed.xml",
            f"{OFF_SCOPE}/sitemap.xml",
            f"{other}/sitemaps/index.xml",
            f"{o}/private/sitemap.xml",
        ],
    )


def _with_sitemaps(host: Host, urls: list[str]) -> Host:
    lines = "".join(f"Sitemap: {url}\n" for url in urls)
    return replace(host, robots_text=(host.robots_text or "") + "\n" + lines)
