"""`srcrawl crawl` beside late hosts stores exactly what a BFS of the test web reaches.

The runs of `srcrawl bench exactness` (benchmarks/exactness.py): five of six seeds
with a late robots.txt (500 or no answer, one to three times, each deferral long
enough to make its host lagging), --depth 1 to 3, with and without sitemaps whose
pages another host links to. Every URL and every depth is compared with the BFS.
The benchmark runs 50 in a row (docs/BENCHMARKS.md); here one run, and six in
the slow tier.
"""

from __future__ import annotations

import pytest

from srcrawl.benchmarks.exactness import one_run

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
