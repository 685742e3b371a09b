"""The synthetic web as data: hosts, pages, links with their attributes.

Every URL the model holds is canonical (see :mod:`srcrawl.testweb.urls`), so
sets of URLs compare by string. Pages whose HTML writes a link in a tricky
form (relative, ``../``, a fragment, reordered query, ``<base href>``) keep
both the ``href`` as written and the canonical ``target`` it resolves to.
Two infinite traps are not stored but computed on lookup (see
:mod:`srcrawl.testweb.traps`).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from protego import Protego

from srcrawl.core.errors import SrcrawlError
from srcrawl.testweb import traps
from srcrawl.testweb.changes import ChangeSchedule
from srcrawl.testweb.urls import canonical, origin_of

LINK_KINDS = ("a", "area", "frame", "iframe", "next", "redirect")
"""How a page refers to another: ``<a href>``, ``<area href>``, ``<frame src>``,
``<iframe src>``, ``<link rel=next href>``, or an HTTP redirect's ``Location``."""

ROBOTS_MODES = ("ok", "missing", "flaky", "hang")
"""``/robots.txt`` answers 200; answers 404; answers 500 ``robots_failures`` times, then 200;
answers nothing for ``slow_seconds`` (a crawler times out) ``robots_failures`` times, then 200."""

_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")

CRAWLER_AGENT = "srcrawl"
"""The user-agent token robots rules are evaluated for."""


class TestWebError(SrcrawlError):
    """The synthetic web cannot be built or served as asked."""

    __test__ = False


@dataclass(frozen=True)
class Link:
    """One reference from a page to ``target`` (canonical), written as ``href``."""

    target: str
    href: str
    kind: str = "a"
    nofollow: bool = False
    """``rel="nofollow"`` on this link."""
    anchor: str | None = None
    """The link's text; None: common words drawn when the page is rendered."""
    menu: bool = False
    """Part of the host's navigation menu, written the same way on every page."""


@dataclass(frozen=True)
class Page:
    """What the server answers for one canonical URL, and what the crawler should do with it.

    ``template`` names the renderer in :mod:`srcrawl.testweb.content`; the other
    fields are the facts tests rely on.
    """

    url: str
    status: int = 200
    template: str = "article"
    links: tuple[Link, ...] = ()
    dropped: tuple[str, ...] = ()
    """hrefs in the HTML that are no URL to crawl (``javascript:``, malformed, …)."""
    terms: tuple[str, ...] = ()
    """Distinctive planted terms (English, Chinese) that only this page carries."""
    title: str | None = None
    """The page's title (and heading); None: common words drawn when it is rendered."""
    noindex: bool = False
    """``<meta name=robots content=noindex>``: fetch and follow, do not index."""
    meta_nofollow: bool = False
    """``<meta name=robots content=nofollow>``: fetch, index, follow none of its links."""
    content_type: str = "text/html"
    encoding: str = "utf-8"
    charset_in: str = "header"
    """Where the charset is declared: ``header`` (Content-Type), ``meta``, or ``none``."""
    location: str | None = None
    """The ``Location`` header exactly as sent (redirects)."""
    base_href: str | None = None
    behavior: str = "normal"
    """``normal``; ``truncate`` (Content-Length larger than the body sent); ``stall-headers``
    (nothing for ``slow_seconds``, then the page); ``stall-body`` (headers and part of the
    body, then nothing for ``slow_seconds``, then the connection closes)."""

    @property
    def is_html(self) -> bool:
        return self.content_type == "text/html" and self.template != "binary"

    @property
    def indexable(self) -> bool:
        """A 200 HTML page, complete, not noindex: what search should find by its terms."""
        return (
            self.status == 200 and self.is_html and not self.noindex and self.behavior == "normal"
        )

    def followed_links(self, kinds: Iterable[str] = LINK_KINDS) -> list[Link]:
        """The links a polite crawler follows from this page (in document order)."""
        if self.meta_nofollow:
            return []
        wanted = set(kinds)
        return [ln for ln in self.links if ln.kind in wanted and not ln.nofollow]


@dataclass(frozen=True)
class Host:
    """One origin of the web: a listening socket on loopback and its robots.txt."""

    index: int
    address: str
    port: int
    robots_mode: str = "ok"
    robots_text: str | None = None
    crawl_delay: float | None = None
    robots_failures: int = 0
    """How many times a ``flaky`` host answers 500 (a ``hang`` host nothing) for /robots.txt
    before it works."""
    name: str | None = None
    """The host name its URLs use instead of ``address`` (a compose service name that
    resolves to the container serving it); None: the address."""

    def __post_init__(self) -> None:
        try:
            loopback = ipaddress.ip_address(self.address).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise TestWebError(f"host {self.address!r} is not on loopback (127.0.0.0/8, ::1)")
        if self.robots_mode not in ROBOTS_MODES:
            raise TestWebError(f"unknown robots mode {self.robots_mode!r}")
        if self.name is not None and not _HOST_NAME.fullmatch(self.name):
            raise TestWebError(f"{self.name!r} is no host name (letters, digits, '-', '.')")

    @property
    def origin(self) -> str:
        """``http://address:port`` (or ``name:port``) in canonical form (no ``:80``)."""
        host = self.name.lower() if self.name else self.address
        if ":" in host:  # an IPv6 literal
            host = f"[{host}]"
        return f"http://{host}" + ("" if self.port == 80 else f":{self.port}")

    @property
    def root(self) -> str:
        return f"{self.origin}/"

    @property
    def robots_url(self) -> str:
        return f"{self.origin}/robots.txt"

    def robots_allows(self, url: str, agent: str = CRAWLER_AGENT) -> bool:
        """Whether robots.txt (once it answers) lets ``agent`` fetch ``url``."""
        if self.robots_mode == "missing" or not self.robots_text:
            return True
        return _robots_rules(self.robots_text).can_fetch(url, agent)


@functools.lru_cache(maxsize=256)
def _robots_rules(text: str) -> Protego:
    return Protego.parse(text)


@dataclass(frozen=True)
class KnownItem:
    """A query a user types for one page, and that page: the answer by construction."""

    kind: str
    """``title`` (its title's words), ``anchor`` (the words links to it use, absent from its
    own text) or ``menu`` (the label of the host menu's item pointing to it)."""
    lang: str
    """``en`` or ``zh``."""
    query: str
    url: str


@dataclass
class Web:
    """Hosts and pages; the source of truth for what is served and what a crawl must find."""

    hosts: list[Host]
    pages: dict[str, Page]
    special: dict[str, str] = field(default_factory=dict)
    """Stable names of the special pages (see :mod:`srcrawl.testweb.specials`) → URL."""
    slow_seconds: float = 30.0
    """How long the timeout pages keep the client waiting."""
    large_bytes: int = 0
    """Size of the large page's body."""
    seed: int = 0
    """Seed of the text of generated pages."""
    queries: list[KnownItem] = field(default_factory=list)
    """Known-item queries with the page each should find (a web made with ``known_items``)."""
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """URL → (content type, body) served as they are: the sitemaps (``generate(sitemaps=True)``)."""
    sitemap_pages: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Origin → the pages a correct reader finds in its sitemaps (URL → ``<lastmod>``)."""
    changes: ChangeSchedule | None = None
    """How pages change over time (see :mod:`srcrawl.testweb.changes`); None: never."""
    _by_origin: dict[str, Host] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_origin = {h.origin: h for h in self.hosts}
        if len(self._by_origin) != len(self.hosts):
            raise TestWebError("two hosts share one origin")
        for url, page in self.pages.items():
            if canonical(url) != url or page.url != url:
                raise TestWebError(f"page URL {url!r} is not canonical or not its key")
            if origin_of(url) not in self._by_origin:
                raise TestWebError(f"page {url} is on no host of this web")

    # ---- lookup

    @property
    def seed_urls(self) -> list[str]:
        """One root URL per host."""
        return [h.root for h in self.hosts]

    def base_url(self, host_index: int) -> str:
        """``http://127.0.0.1:PORT`` of host ``host_index``."""
        return self.hosts[host_index].origin

    def host_of(self, url: str) -> Host | None:
        return self._by_origin.get(origin_of(url))

    def page(self, url: str) -> Page | None:
        """The page at canonical ``url`` (stored or a trap page), or None (a 404)."""
        found = self.pages.get(url)
        if found is not None or self.host_of(url) is None:
            return found
        return traps.trap_page(url)

    def robots_allows(self, url: str, agent: str = CRAWLER_AGENT) -> bool:
        host = self.host_of(url)
        return True if host is None else host.robots_allows(url, agent)

    # ---- graph

    def edges(self, trap_steps: int = 0) -> Iterator[tuple[str, str, Link]]:
        """Every ``(source, target, link)`` of the stored pages in URL order, then
        ``trap_steps`` steps into each trap (the traps themselves never end)."""
        for url in sorted(self.pages):
            for link in self.pages[url].links:
                yield url, link.target, link
        if trap_steps <= 0:
            return
        frontier = sorted(
            {ln.target for p in self.pages.values() for ln in p.links if traps.is_trap(ln.target)}
        )
        for start in frontier:
            url = start
            for _ in range(trap_steps):
                page = traps.trap_page(url)
                if page is None or not page.links:
                    break
                for link in page.links:
                    yield url, link.target, link
                url = page.links[0].target

    def expected_crawl(
        self,
        seeds: Sequence[str],
        max_depth: int,
        allowed: Callable[[str], bool] = lambda url: True,
        *,
        kinds: Iterable[str] = LINK_KINDS,
        agent: str = CRAWLER_AGENT,
        sitemaps: bool = True,
    ) -> dict[str, int]:
        """Every URL a correct crawl fetches, with its BFS depth (see :mod:`.expected`)."""
        from srcrawl.testweb.expected import expected_crawl

        return expected_crawl(
            self, seeds, max_depth, allowed, kinds=kinds, agent=agent, sitemaps=sitemaps
        )

    def known_items(
        self, within: Iterable[str] | None = None, lang: str | None = None
    ) -> list[tuple[str, str]]:
        """``(query, url)`` pairs: searching the planted term should rank that page first.

        Only indexable pages (see :attr:`Page.indexable`); ``within`` limits them to
        those URLs (e.g. an expected crawl); ``lang`` is ``"en"``, ``"zh"`` or None
        for both. Sorted by URL, English term first.
        """
        urls = sorted(self.pages) if within is None else sorted(set(within) & set(self.pages))
        wanted = (0, 1) if lang is None else ((0,) if lang == "en" else (1,))
        items = []
        for url in urls:
            page = self.pages[url]
            if page.indexable and page.terms:
                items.extend((page.terms[i], url) for i in wanted if i < len(page.terms))
        return items
