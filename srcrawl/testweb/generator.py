"""A deterministic synthetic web: H hosts × P pages with power-law in-links.

The structure (which page links where, the planted terms, which host has
which robots.txt) depends only on the seed and the sizes; the ports only
change the origins. Host roles repeat every four hosts:

=====  ==========================================================  ==========
index  robots.txt                                                  mode
=====  ==========================================================  ==========
4k     ``Disallow: /private/``, ``Allow: /private/open.html``,      ok
       ``Disallow: /*?print=1``; ``badbot`` may fetch nothing
4k+1   ``Crawl-delay: D``, ``Disallow: /private/``                 ok
4k+2   404: everything is allowed                                  missing
4k+3   500 for the first ``robots_failures`` requests, then        flaky
       ``Disallow: /private/``
=====  ==========================================================  ==========

Every host serves ``/`` (its seed), ``P`` regular pages (``/p/N.html``,
``/docs/sK/pageN.html``, ``/item?cat=C&id=N``), ``/private/0.html``,
``/private/1.html`` and ``/private/open.html`` (linked from the root; each
links to a ``/hidden/…`` page nothing else links to), and ``/p/1.html?print=1``.
Host 0 also serves the special pages of :mod:`srcrawl.testweb.specials`.

In-links follow a power law: besides a random recursive tree that makes every
page reachable from the root, each page links to 2–10 targets drawn with
weight ``1 / rank**1.2`` (ranks are a per-host random permutation), 15 % of
them on another host (hosts drawn by the same law).
"""

from __future__ import annotations

import itertools
import posixpath
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from urllib.parse import urlsplit

from srcrawl.core.defaults import (
    DEFAULT_TESTWEB_CRAWL_DELAY,
    DEFAULT_TESTWEB_HOSTS,
    DEFAULT_TESTWEB_LARGE_BYTES,
    DEFAULT_TESTWEB_PAGES,
    DEFAULT_TESTWEB_PORT_BASE,
    DEFAULT_TESTWEB_ROBOTS_FAILURES,
    DEFAULT_TESTWEB_SEED,
    DEFAULT_TESTWEB_SLOW_SECONDS,
)
from srcrawl.testweb import known, specials, words
from srcrawl.testweb.changes import ChangeSchedule
from srcrawl.testweb.model import Host, Link, Page, TestWebError, Web
from srcrawl.testweb.sitemaps import add_sitemaps

ZIPF_EXPONENT = 1.2
CROSS_HOST_SHARE = 0.15
MAX_ADDRESS_HOSTS = 253
"""127.0.0.2 … 127.0.0.254 in address mode."""

HREF_STYLES = ("root", "root", "rel", "abs", "proto", "upper", "frag", "dots", "reorder")
"""How a link to a page of the same host is written (``root`` twice as often)."""


def loopback_endpoints(
    hosts: int,
    port_base: int | None = None,
    *,
    ports: Sequence[int] | None = None,
    addresses: bool = False,
    address: str = "127.0.0.1",
) -> list[tuple[str, int]]:
    """Where each host listens: ``address:port_base+i`` (ports), or ``127.0.0.(i+2):port``
    (addresses, one port for all unless ``ports`` are given)."""
    if hosts < 1:
        raise TestWebError("a web needs at least one host")
    if ports is not None and len(ports) != hosts:
        raise TestWebError(f"{len(ports)} ports given for {hosts} hosts")
    base = DEFAULT_TESTWEB_PORT_BASE if port_base is None else port_base
    if addresses:
        if hosts > MAX_ADDRESS_HOSTS:
            raise TestWebError(f"address mode holds at most {MAX_ADDRESS_HOSTS} hosts")
        port_list = list(ports) if ports is not None else [base] * hosts
        endpoints = [(f"127.0.0.{i + 2}", port_list[i]) for i in range(hosts)]
    else:
        port_list = list(ports) if ports is not None else [base + i for i in range(hosts)]
        endpoints = [(address, p) for p in port_list]
    for _, port in endpoints:
        if not 1 <= port <= 65535:
            raise TestWebError(f"port {port} is out of range 1-65535")
    return endpoints


def robots_for(index: int, crawl_delay: float, failures: int) -> dict:
    """The robots.txt fields of host ``index`` (see the module docstring)."""
    role = index % 4
    if role == 0:
        text = (
            f"# srcrawl test web, host {index}\n"
            "User-agent: badbot\nDisallow: /\n\n"
            "User-agent: *\nDisallow: /private/\nAllow: /private/open.html\n"
            "Disallow: /*?print=1\n"
        )
        return {"robots_mode": "ok", "robots_text": text}
    if role == 1:
        text = f"User-agent: *\nCrawl-delay: {crawl_delay:g}\nDisallow: /private/\n"
        return {"robots_mode": "ok", "robots_text": text, "crawl_delay": crawl_delay}
    if role == 2:
        return {"robots_mode": "missing"}
    text = "User-agent: *\nDisallow: /private/\n"
    return {"robots_mode": "flaky", "robots_text": text, "robots_failures": failures}


def _hosts(
    endpoints: list[tuple[str, int]],
    name: str | None,
    crawl_delay: float,
    failures: int,
    late_robots: Mapping[int, tuple[str, int]] | None,
) -> list[Host]:
    """The hosts of the web, each with the robots.txt of its role (or its late one)."""
    late = dict(late_robots or {})
    _check_late(late, len(endpoints))
    return [
        Host(
            index=i,
            address=addr,
            port=port,
            name=name,
            **(_late_robots(*late[i]) if i in late else robots_for(i, crawl_delay, failures)),
        )
        for i, (addr, port) in enumerate(endpoints)
    ]


def _link_sitemap_pages(hosts: list[Host], pages: dict[str, Page], found: dict) -> None:
    """Link every page of a host's sitemaps from the root of the next host: a crawl meets
    it at depth 1 before its own host's sitemaps (read late if its robots.txt is) say it
    is a seed."""
    for i, h in enumerate(hosts):
        named = [url for url in found.get(h.origin, {}) if url.startswith(h.origin + "/")]
        root = pages.get(hosts[(i + 1) % len(hosts)].root)
        if named and root is not None:
            extra = tuple(Link(target=url, href=url) for url in named)
            pages[root.url] = replace(root, links=root.links + extra)


def _late_robots(mode: str, failures: int) -> dict:
    """The robots.txt fields of a host whose robots.txt fails ``failures`` times first."""
    text = "User-agent: *\nDisallow: /private/\n"
    return {"robots_mode": mode, "robots_text": text, "robots_failures": failures}


def _check_late(late: dict[int, tuple[str, int]], hosts: int) -> None:
    for i, (mode, failures) in late.items():
        if not 0 <= i < hosts or mode not in ("flaky", "hang") or failures < 0:
            raise TestWebError(
                f"late robots.txt of host {i}: {mode!r} × {failures} is not "
                f"(flaky or hang) × n ≥ 0 of a host 0–{hosts - 1}"
            )


def regular_path(n: int) -> str:
    """Path (and query, canonical order) of regular page ``n``."""
    if n % 10 == 7:
        return f"/item?cat={n % 5}&id={n}"
    if n % 10 == 3:
        return f"/docs/s{n // 50}/page{n}.html"
    return f"/p/{n}.html"


def href_for(source: str, target: str, style: str) -> str:
    """``target`` (canonical) written as seen from ``source`` in the given style.

    Resolving the result against ``source`` and canonicalizing gives ``target``.
    """
    s, t = urlsplit(source), urlsplit(target)
    query = f"?{t.query}" if t.query else ""
    if s.netloc != t.netloc:
        style = style if style in ("proto", "upper") else "abs"
    if style == "abs":
        return target
    if style == "proto":
        return f"//{t.netloc}{t.path}{query}"
    if style == "upper":
        return "HTTP" + target[len("http") :]
    if style == "frag":
        return f"{t.path}{query}#section-2"
    if style == "dots":
        return f"/x/../.{t.path}{query}"
    if style == "reorder":
        return _reordered(t.path, t.query)
    if style == "rel":
        return _relative(s.path, t.path) + query
    return t.path + query


def _reordered(path: str, query: str) -> str:
    """``path`` with its query parameters in reverse order (canonicalizing sorts them)."""
    params = query.split("&")
    if len(params) > 1:
        return f"{path}?{'&'.join(reversed(params))}"
    return f"{path}?{query}" if query else path


def _relative(source_path: str, target_path: str) -> str:
    """``target_path`` relative to the directory of ``source_path``, ``./`` or ``../`` first."""
    source_dir = source_path if source_path.endswith("/") else posixpath.dirname(source_path)
    rel = posixpath.relpath(target_path, source_dir)
    if target_path.endswith("/") and rel != ".":
        rel += "/"
    if rel == ".":
        rel = "./"
    elif not rel.startswith(".."):
        rel = "./" + rel
    return rel


def _cum_weights(n: int) -> list[float]:
    return list(itertools.accumulate(1.0 / (r + 1) ** ZIPF_EXPONENT for r in range(n)))


def generate(
    hosts: int = DEFAULT_TESTWEB_HOSTS,
    pages: int = DEFAULT_TESTWEB_PAGES,
    seed: int = DEFAULT_TESTWEB_SEED,
    *,
    port_base: int | None = None,
    ports: Sequence[int] | None = None,
    addresses: bool = False,
    crawl_delay: float = DEFAULT_TESTWEB_CRAWL_DELAY,
    robots_failures: int = DEFAULT_TESTWEB_ROBOTS_FAILURES,
    slow_seconds: float = DEFAULT_TESTWEB_SLOW_SECONDS,
    large_bytes: int = DEFAULT_TESTWEB_LARGE_BYTES,
    host_name: str | None = None,
    address: str = "127.0.0.1",
    known_items: bool = False,
    sitemaps: bool = False,
    changes: ChangeSchedule | None = None,
    late_robots: Mapping[int, tuple[str, int]] | None = None,
    sitemap_links: bool = False,
) -> Web:
    """The web of ``hosts`` × ``pages`` regular pages for ``seed`` (same inputs, same web).

    ``host_name``: the name every host's URLs use instead of its loopback address
    (one port per host, so the origins stay distinct). ``address``: the loopback
    address of every host, one port each (``::1``: a web on IPv6). ``known_items``: see
    :mod:`srcrawl.testweb.known`. ``sitemaps``: hosts serve sitemaps (see
    :mod:`srcrawl.testweb.sitemaps`); without it a sitemap request gets a 404.
    ``changes``: how its pages change over time (see :mod:`srcrawl.testweb.changes`;
    None: never). ``late_robots``: host → (``flaky`` or ``hang``, failures) of a late
    robots.txt, whatever its role. ``sitemap_links``: see :func:`_link_sitemap_pages`.
    """
    if host_name is not None and addresses:
        raise TestWebError("a host name needs one port per host, not one address per host")
    _check_sizes(pages, crawl_delay, robots_failures, slow_seconds, large_bytes)
    endpoints = loopback_endpoints(
        hosts, port_base, ports=ports, addresses=addresses, address=address
    )
    host_list = _hosts(endpoints, host_name, crawl_delay, robots_failures, late_robots)
    rng = random.Random(seed)
    terms = words.TermPool(rng)
    out, regular, names = _pages(host_list, pages, terms, rng)
    queries = known.plant(out, host_list, regular, seed) if known_items else []
    files, found = {}, {}
    if sitemaps:  # last: the rest of the web is the same with or without them
        host_list, files, found = add_sitemaps(host_list, out, terms)
        if sitemap_links:
            _link_sitemap_pages(host_list, out, found)
    return Web(
        hosts=host_list,
        pages=out,
        special=names,
        slow_seconds=slow_seconds,
        large_bytes=large_bytes,
        seed=seed,
        queries=queries,
        files=files,
        sitemap_pages=found,
        changes=changes,
    )


def _pages(
    host_list: list[Host], pages: int, terms: words.TermPool, rng: random.Random
) -> tuple[dict[str, Page], list[list[str]], dict]:
    """Every page but the sitemaps: by URL, then each host's regular URLs, then the
    special pages' names (:func:`specials.build`)."""
    regular = [[h.origin + regular_path(n) for n in range(pages)] for h in host_list]
    links = _regular_links(regular, pages, rng)
    out: dict[str, Page] = {}
    for url in (url for urls in regular for url in urls):
        out[url] = Page(url=url, template="regular", links=tuple(links[url]), terms=terms.pair())
    for i, h in enumerate(host_list):
        _add_host_pages(out, h, host_list, regular[i], terms, rng)
    special_pages, names = specials.build(host_list, regular[0], terms)
    out.update(special_pages)
    return out, regular, names


def _check_sizes(
    pages: int, crawl_delay: float, robots_failures: int, slow_seconds: float, large_bytes: int
) -> None:
    if pages < 1:
        raise TestWebError("each host needs at least one page")
    if crawl_delay < 0 or robots_failures < 0 or slow_seconds < 0 or large_bytes < 0:
        raise TestWebError("crawl delay, robots failures, slow seconds and size must be >= 0")


def _regular_links(
    regular: list[list[str]], pages: int, rng: random.Random
) -> dict[str, list[Link]]:
    """The links of every regular page (``regular``: each host's page URLs).

    A random recursive tree makes every page reachable from its host's root;
    then each page links to 2–10 targets drawn by the power law.
    """
    links: dict[str, list[Link]] = {url: [] for urls in regular for url in urls}

    def link(source: str, target: str) -> None:
        href = href_for(source, target, rng.choice(HREF_STYLES))
        links[source].append(Link(target=target, href=href))

    for urls in regular:
        for n in range(1, pages):
            link(urls[rng.randrange(n)], urls[n])
    page_weights = _cum_weights(pages)
    host_weights = _cum_weights(len(regular))
    host_ranks = rng.sample(range(len(regular)), len(regular))
    page_ranks = [rng.sample(range(pages), pages) for _ in regular]
    for hi, urls in enumerate(regular):
        for url in urls:
            seen = {url, *(ln.target for ln in links[url])}
            for _ in range(rng.randint(2, 10)):
                th = hi
                if len(regular) > 1 and rng.random() < CROSS_HOST_SHARE:
                    th = rng.choices(host_ranks, cum_weights=host_weights)[0]
                target = regular[th][rng.choices(page_ranks[th], cum_weights=page_weights)[0]]
                if target not in seen:
                    seen.add(target)
                    link(url, target)
    return links


def _add_host_pages(
    out: dict[str, Page],
    host: Host,
    hosts: list[Host],
    regular: list[str],
    terms: words.TermPool,
    rng: random.Random,
) -> None:
    """The root, the private/hidden pages and the print version of one host."""
    o = host.origin
    root_links = [Link(target=regular[0], href=href_for(host.root, regular[0], "rel"))]
    for n in sorted(set(rng.sample(range(len(regular)), min(5, len(regular))))):
        if n:
            root_links.append(Link(target=regular[n], href=href_for(host.root, regular[n], "root")))
    for name in ("0", "1", "open"):
        private, hidden = f"{o}/private/{name}.html", f"{o}/hidden/{name}.html"
        root_links.append(Link(target=private, href=f"/private/{name}.html"))
        out[private] = Page(
            url=private,
            links=(Link(target=hidden, href=f"../hidden/{name}.html"),),
            terms=terms.pair(),
        )
        out[hidden] = Page(url=hidden, template="leaf", terms=terms.pair())
    if len(regular) > 1 and regular[1].endswith("/p/1.html"):
        printed = f"{regular[1]}?print=1"
        root_links.append(Link(target=printed, href="p/1.html?print=1"))
        out[printed] = Page(url=printed, template="leaf", terms=terms.pair())
    if len(hosts) > 1:
        nxt = hosts[(host.index + 1) % len(hosts)]
        root_links.append(Link(target=nxt.root, href=nxt.origin))
    if host.index == 0:
        root_links.append(Link(target=f"{o}/special/", href="special/"))
    out[host.root] = Page(
        url=host.root, template="root", links=tuple(root_links), terms=terms.pair()
    )
