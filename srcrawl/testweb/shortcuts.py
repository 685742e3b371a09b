"""A web of one long host and late hosts that hold shortcuts into it.

Host 0 (the seed) has ``pages`` pages in a long chain: page ``i`` links to
``i + 1`` and to two random later pages, so most pages are many hops from
its root. Each other host is *late*: its robots.txt answers 500 a few times
(``min_failures`` to ``max_failures``, drawn per host) before it allows everything. Its
root links to three deep pages of host 0 (the shortcuts: a breadth-first
crawl reaches them through the late host only) and to one page of its own.
Host 0 links to the late hosts' roots from various depths, the first few
from its root.

A crawl stores exactly the breadth-first set of such a web only if every
late host is waited for as many times as its robots.txt fails, however the
depth levels around its deferrals go.
"""

from __future__ import annotations

import random

from srcrawl.testweb.generator import loopback_endpoints
from srcrawl.testweb.model import Host, Link, Page, Web

LATE_TEXT = "User-agent: *\nAllow: /\n"
SHORTCUTS = 3
"""Deep pages of host 0 each late host's root links to."""


def _link(url: str) -> Link:
    return Link(target=url, href=url)


def shortcut_web(
    ports: list[int],
    seed: int,
    *,
    pages: int = 400,
    min_failures: int = 2,
    max_failures: int = 3,
    address: str = "127.0.0.1",
) -> Web:
    """The web on ``ports`` (host 0 the long one, every other host late), drawn from ``seed``."""
    rng = random.Random(seed)
    endpoints = loopback_endpoints(len(ports), ports=ports, address=address)
    hosts = [Host(index=0, address=endpoints[0][0], port=endpoints[0][1], robots_mode="missing")]
    for i, (addr, port) in enumerate(endpoints[1:], start=1):
        hosts.append(
            Host(
                index=i,
                address=addr,
                port=port,
                robots_mode="flaky",
                robots_text=LATE_TEXT,
                robots_failures=rng.randint(min_failures, max_failures),
            )
        )
    good = hosts[0].origin
    chain = [hosts[0].root] + [f"{good}/p{i}.html" for i in range(1, pages)]
    links: dict[str, list[str]] = {url: [] for url in chain}
    for i, url in enumerate(chain):
        if i + 1 < pages:
            links[url].append(chain[i + 1])
        for _ in range(2):
            if i + 2 < pages:
                links[url].append(chain[rng.randrange(i + 2, pages)])
    out: dict[str, Page] = {}
    late = hosts[1:]
    for n, host in enumerate(late):
        # the first few from the root (depth 1), the others from pages a few hops in
        source = chain[0] if n < len(late) // 3 + 1 else chain[rng.randrange(1, min(pages, 12))]
        links[source].append(host.root)
        own = f"{host.origin}/own.html"
        deep = [chain[rng.randrange(pages // 4, pages)] for _ in range(SHORTCUTS)]
        out[host.root] = Page(url=host.root, links=tuple(_link(u) for u in [*deep, own]))
        out[own] = Page(url=own)
    for url in chain:
        out[url] = Page(url=url, links=tuple(_link(u) for u in links[url]))
    return Web(hosts=hosts, pages=out, seed=seed, slow_seconds=1.0)
