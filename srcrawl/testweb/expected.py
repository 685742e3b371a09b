"""The exact set of URLs a correct crawl fetches, computed from the model.

Breadth-first semantics:

- seeds are at depth 0; a link (or a redirect's Location: one hop) from a page
  at depth ``d`` gives depth ``d + 1``; only URLs of depth ≤ ``max_depth`` are
  fetched;
- a URL is fetched only if ``allowed(url)`` (the crawler's scope and trap
  predicate, on canonical URLs; seeds too) and robots.txt allows it; a
  disallowed URL is neither fetched nor expanded;
- ``rel=nofollow`` links and every link of a ``<meta name=robots
  content=nofollow>`` page are not followed; ``javascript:``, ``mailto:``,
  ``data:`` and malformed hrefs are no links at all;
- error pages, timeouts, truncated and non-HTML responses have no links;
- every fetched URL is in the result, whatever its status (timeouts too);
- with ``sitemaps``, the pages the sitemaps of a host name
  (``Web.sitemap_pages``) are seeds too, once any URL of the host is in
  scope (its robots.txt is read then). Their depths are exact when every
  host is reached at depth 0 (each host's root a seed): a host found
  deeper has its sitemap pages scheduled while the crawl is at that level.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from srcrawl.testweb.model import CRAWLER_AGENT, LINK_KINDS, TestWebError
from srcrawl.testweb.urls import canonical, origin_of

if TYPE_CHECKING:
    from srcrawl.testweb.model import Web


def expected_crawl(
    web: Web,
    seeds: Sequence[str],
    max_depth: int,
    allowed: Callable[[str], bool] = lambda url: True,
    *,
    kinds: Iterable[str] = LINK_KINDS,
    agent: str = CRAWLER_AGENT,
    sitemaps: bool = True,
) -> dict[str, int]:
    """``{canonical url: depth}`` of every URL the crawl fetches (see the module docstring).

    ``kinds`` restricts which link kinds the crawler follows (default: all of
    :data:`LINK_KINDS`, redirects included); ``sitemaps``: the crawler reads sitemaps.
    """
    if max_depth < 0:
        raise TestWebError("max_depth must be >= 0")
    starts = []
    for seed in seeds:
        url = canonical(seed)
        if url is None:
            raise TestWebError(f"seed {seed!r} is no crawlable URL")
        starts.append(url)
    read: set[str] = set()  # origins whose sitemaps are seeds
    while True:
        depth, touched = _bfs(web, starts, max_depth, allowed, tuple(kinds), agent)
        new = {o for o in touched - read if web.sitemap_pages.get(o)} if sitemaps else set()
        if not new:
            return depth
        read |= new
        starts += [url for o in sorted(new) for url in web.sitemap_pages[o]]


def _bfs(
    web: Web,
    starts: list[str],
    max_depth: int,
    allowed: Callable[[str], bool],
    kinds: tuple[str, ...],
    agent: str,
) -> tuple[dict[str, int], set[str]]:
    """The BFS depths from ``starts`` (all at depth 0), and the origins of the URLs in scope
    (robots.txt read)."""
    depth: dict[str, int] = {}
    touched: set[str] = set()
    queue: deque[str] = deque()

    def visit(url: str, d: int) -> None:
        if url in depth or not allowed(url):
            return
        touched.add(origin_of(url))
        if web.robots_allows(url, agent):
            depth[url] = d
            queue.append(url)

    for url in starts:
        visit(url, 0)
    while queue:
        url = queue.popleft()
        d = depth[url]
        page = web.page(url)
        if d == max_depth or page is None or not _expands(page):
            continue
        for link in page.followed_links(kinds):
            visit(link.target, d + 1)
    return depth, touched


def _expands(page) -> bool:
    """Whether a crawler looks for links in this response at all."""
    if page.template == "redirect":
        return True
    return page.status == 200 and page.is_html and page.behavior == "normal"
