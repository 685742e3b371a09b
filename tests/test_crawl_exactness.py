"""`srcrawl crawl` beside late hosts stores exactly what a BFS of the test web reaches.

The runs of `srcrawl bench exactness` (benchmarks/exactness.py): five of six seeds
with a late robots.txt (500 or no answer, one to three times, each deferral long
enough to make its host lagging), --depth 1 to 3, with and without sitemaps whose
pages another host links to. Every URL and every depth is compared with the BFS.
The benchmark runs 50 in a row (docs/BENCHMARKS.md); here one run, and six in
the slow tier.

Those runs rarely meet a URL found nearer after its deeper fetch began, and a
crawl that went wrong there would still pass them: a web made by hand below
makes that happen on purpose, and checks that it did (the access log's order,
the crawl's counters) before it checks the depths.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from srcrawl.benchmarks.exactness import one_run
from srcrawl.core.keys import Keys
from srcrawl.testweb import TestWeb
from srcrawl.testweb.model import Host, Link, Page, Web
from srcrawl.testweb.server import free_loopback_sockets

from .conftest import cli_env, logged_requests, run_cli, stored_pages

pytestmark = pytest.mark.slow  # every test here runs for more than a second


def check(run: int, redis_url: str) -> None:
    r = one_run(run, redis_url)
    assert r.exit_code == 0
    assert r.counters["robots_deferred"] >= 4  # the lagging path ran
    assert (r.missing, r.unexpected, r.wrong_depth) == ([], [], {})
    assert r.stored == r.expected


def test_late_hosts_and_their_sitemaps_leave_every_depth_exact(redis_url) -> None:
    # run 0: --depth 1, sitemaps whose pages another seed links to (stored one level
    # too deep when their host's robots.txt came late, before the depth record began
    # with the crawl)
    check(0, redis_url)


@pytest.mark.slow
@pytest.mark.parametrize("run", range(1, 6))
def test_late_hosts_leave_every_depth_exact(redis_url, run) -> None:
    check(run, redis_url)


# -- a shorter path that comes while the deeper fetch is in flight -----------------

SLOW = 4.5
"""Seconds the slow page x keeps its fetch in flight (it answers then, in the timeout)."""
CRAWL_DELAY = 2
"""The late host's Crawl-delay: its pages come one every 2 s once its robots.txt answers."""
ALLOW = "User-agent: *\nAllow: /\n"


def _page(url: str, *targets: str, behavior: str = "normal") -> Page:
    return Page(url, links=tuple(Link(t, t) for t in targets), title=url, behavior=behavior)


def _nearer_web(ports: list[int]) -> Web:
    """Host A reaches x at depth 4, and z at 6 through host C while x is in flight; host B,
    late (robots.txt 500 twice, then a Crawl-delay), links x and y at 1 and z at 3.

    BFS: x 1, z 2 (B → x → z), y 1, yc 2. The crawl finds x nearer while its slow fetch is
    in flight (its links, z among them, take x's nearer depth), y nearer once fetched (it
    is fetched again), and z nearer while it waits in the next level (replaced). Then B's
    b2 links z at 3: deeper than z's improved depth 2, shallower than the 6 it was first
    scheduled at. Only the depth record's rewrite (z: 6 → 2) tells the master that 3 is
    no shorter path; the slave sends it, having seen z only on pages at depth 4 and 5.
    """
    a, b, c = (
        Host(0, "127.0.0.1", ports[0], robots_text=ALLOW),
        Host(
            1,
            "127.0.0.1",
            ports[1],
            robots_mode="flaky",
            robots_failures=2,
            robots_text=f"User-agent: *\nCrawl-delay: {CRAWL_DELAY}\n",
        ),
        Host(2, "127.0.0.1", ports[2], robots_text=ALLOW),
    )
    oa, ob, oc = a.origin, b.origin, c.origin
    pages = [
        _page(a.root, f"{oa}/a1"),
        _page(f"{oa}/a1", f"{oa}/a2"),
        _page(f"{oa}/a2", f"{oa}/a3", f"{oc}/y"),
        _page(f"{oa}/a3", f"{oa}/x", f"{oc}/c4"),
        _page(f"{oa}/x", f"{oc}/z", behavior="stall-headers"),
        _page(f"{oc}/c4", f"{oc}/r"),
        _page(f"{oc}/r", f"{oc}/z"),
        _page(f"{oc}/z"),
        _page(f"{oc}/y", f"{oc}/yc"),
        _page(f"{oc}/yc"),
        _page(c.root),
        _page(b.root, f"{oa}/x", f"{oc}/y", f"{ob}/b1"),
        _page(f"{ob}/b1", f"{ob}/b2"),
        _page(f"{ob}/b2", f"{oc}/z"),
    ]
    return Web(hosts=[a, b, c], pages={p.url: p for p in pages}, slow_seconds=SLOW)


def _request(entries: list[dict[str, Any]], url: str) -> dict[str, Any]:
    """The first request for ``url`` in the access log."""
    return min((e for e in entries if e["url"] == url), key=lambda e: e["start_mono"])


def test_a_shorter_path_found_while_the_deeper_fetch_is_in_flight_leaves_depths_exact(
    redis_url: str, keys: Keys, tmp_path: Path
) -> None:
    socks = free_loopback_sockets(3)
    web = _nearer_web([s.getsockname()[1] for s in socks])
    # x answers after SLOW seconds, within the fetch timeout: for the BFS a page like another
    answered = {u: dataclasses.replace(p, behavior="normal") for u, p in web.pages.items()}
    want = Web(hosts=web.hosts, pages=answered).expected_crawl(web.seed_urls, 6)
    env = cli_env(redis_url, keys.job, tmp_path)
    # one slave: its link cache is the one that sends b2's link to z at 3 (see _nearer_web)
    flags = ["--depth", "6", "--slaves", "1", "--delay", "0.02", "--delay-factor", "0"]
    flags += ["--max-delay", str(CRAWL_DELAY + 1), "--fetch-timeout", str(SLOW + 3)]
    flags += ["--robots-defer", "0.5", "--lag-after", "0.1", "--no-sitemaps"]
    log = tmp_path / "access.jsonl"
    with TestWeb(web, sockets=socks, access_log=log, flush_interval=0.1) as tw:
        r = run_cli(["crawl", *web.seed_urls, *flags], env)
        assert r.returncode == 0, r.stderr[-3000:]
        entries = logged_requests(tw)
    assert {p["url"]: p["depth"] for p in stored_pages(env)} == want
    oa, ob, oc = (h.origin for h in web.hosts)
    x, r_, late_root, b2 = (
        _request(entries, u) for u in (f"{oa}/x", f"{oc}/r", f"{ob}/", f"{ob}/b2")
    )
    # the case happened: r (z at 6) and B's root (x at 1) answered while x was in flight,
    # and b2 (z at 3) came after x had answered (z at 2)
    assert x["start_mono"] < r_["end_mono"] < x["end_mono"], (x, r_)
    assert x["start_mono"] < late_root["end_mono"] < x["end_mono"], (x, late_root)
    assert b2["start_mono"] > x["end_mono"], (x, b2)
    summary = json.loads(r.stdout)
    assert summary["depth_improved_in_flight"] >= 1  # x
    # y, fetched at 3 before B's root said 1, is fetched again; z is replaced while it
    # waits in the next level, or fetched again when the levels went on past the slow x
    # (a queue whose fetch is out for --lag-after lags) and z was fetched at 6 already
    again = summary.get("depth_improved_queued", 0) + summary.get("depth_refetch", 0)
    assert summary.get("depth_refetch", 0) >= 1 and again >= 2, summary
