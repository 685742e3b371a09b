"""``srcrawl bench exactness``: does a crawl with late hosts store exactly the BFS set?

Each run crawls a fresh loopback test web with `srcrawl crawl`, as a user
would, beside several seeds whose robots.txt is late: some answer 500 one to
three times, one answers nothing until the fetch times out, each host a
different number of times, so their deferrals end at different moments while
the other hosts' levels go on without them (every deferral is longer than
``--lag-after``: the lagging path, scaled down, not skipped). Runs differ in
the web's seed, in ``--depth`` (1 to 3) and in whether the hosts serve
sitemaps (their pages are seeds, read only once a host's robots.txt answers).

What the store holds is compared with an independent breadth-first crawl of
the test web's model (srcrawl/testweb/expected.py): every URL and every
depth. A run is exact when nothing is missing, nothing is extra and no page
has another depth. The figure that matters is how many runs in a row are
exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from srcrawl.core import embedded
from srcrawl.core.urls import host_of
from srcrawl.queues.crawl_protocol import ERROR_ROBOTS_GAVE_UP
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope
from srcrawl.testweb import TestWeb

LAGGING_COUNTERS = ("robots_deferred", "depth_improved", "refetched")
HOSTS = 6
PAGES = 18
ROBOTS_DEFER = 0.4
"""Seconds of each robots.txt deferral (60 by default): scaled down with LAG_AFTER."""
LAG_AFTER = 0.1
"""--lag-after of the runs: every deferral above makes its host lagging."""
FETCH_TIMEOUT = 0.5
FLAGS = [
    "--slaves",
    "2",
    "--threads",
    "4",
    "--delay",
    "0.02",
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    str(FETCH_TIMEOUT),
    "--robots-defer",
    str(ROBOTS_DEFER),
    "--lag-after",
    str(LAG_AFTER),
    "--retry-backoff",
    "0.1",
]


def late_hosts(run: int) -> dict[int, tuple[str, int]]:
    """Host index → (robots.txt mode, failures) of run ``run``: five late seeds of six, their
    failures varied from run to run so their deferrals end at other moments."""
    return {
        0: ("flaky", 1 + run % 2),
        1: ("flaky", 1 + run % 3),
        2: ("hang", 1),
        3: ("flaky", 2 + run % 2),
        5: ("flaky", 3 - run % 3),
    }


@dataclass
class ExactnessRun:
    run: int
    depth: int
    sitemaps: bool
    exit_code: int
    seconds: float
    expected: int
    stored: int
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    wrong_depth: dict[str, tuple[int, int]] = field(default_factory=dict)
    """URL → (stored depth, BFS depth)."""
    counters: dict[str, int] = field(default_factory=dict)
    """The crawl's counters of the lagging path: deferrals, depths improved, refetches."""
    web: str = "late"
    """The kind of test web: ``late`` (late seeds) or ``shortcuts`` (see exactness_shortcuts.py)."""
    given_up: dict[str, str] = field(default_factory=dict)
    """URL → the reason of its row, for URLs the crawl ended without a request (a BFS URL
    among them is missing, with its reason stated)."""
    unaccounted: list[str] = field(default_factory=list)
    """Missing URLs with no row that no URL given up explains: lost without a word."""

    @property
    def exact(self) -> bool:
        wrong = self.missing or self.unexpected or self.wrong_depth or self.given_up
        return self.exit_code == 0 and not wrong


def expected_pages(
    tw: TestWeb, depth: int, sitemaps: bool, blocked: set[str] | frozenset[str] = frozenset()
) -> dict[str, int]:
    """The BFS of the test web's model from its seeds: URL → depth (``blocked``: URLs not
    fetched, nor what only they lead to)."""
    seeds = tw.seed_urls
    scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=depth))
    return tw.web.expected_crawl(
        seeds,
        depth,
        lambda url: url not in blocked and scope.reject(url, 0) is None,
        sitemaps=sitemaps,
    )


def bench_env(redis_url: str, directory: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    env.update(
        SRCRAWL_REDIS_URL=redis_url,
        SRCRAWL_JOB=f"exact-{uuid.uuid4().hex[:8]}",
        SRCRAWL_HOME=str(directory / "home"),
        SRCRAWL_DB_URL=f"sqlite:///{directory}/crawl.db",
    )
    return env


NO_REQUEST_ERRORS = frozenset({ERROR_ROBOTS_GAVE_UP})
"""Row errors of URLs given up without a request: no fetch of the BFS's."""


def stored_rows(env: dict[str, str]) -> tuple[dict[str, int], dict[str, str]]:
    """What `srcrawl export pages` lists: URL → depth of every fetch (a failed one too),
    and URL → reason of the URLs given up without a request."""
    out = subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", "export", "pages"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    fetched, given_up = {}, {}
    for p in map(json.loads, out.stdout.splitlines()):
        if p["error"] in NO_REQUEST_ERRORS:
            given_up[p["url"]] = p["error"]
        else:
            fetched[p["url"]] = p["depth"]
    return fetched, given_up


def compared(
    run: ExactnessRun,
    want: dict[str, int],
    got: dict[str, int],
    given_up: dict[str, str],
    reachable: Callable[[set[str]], set[str]],
) -> ExactnessRun:
    """``run`` with the store compared to the BFS ``want``. ``reachable(blocked)``: the
    BFS's URLs when ``blocked`` URLs are not fetched, so that a missing URL a URL given
    up explains (it was never found) is told from one lost without a row."""
    run.stored, run.expected = len(got), len(want)
    run.missing = sorted(set(want) - set(got))
    run.unexpected = sorted(set(got) - set(want))
    run.wrong_depth = {
        u: (got[u], want[u]) for u in sorted(set(got) & set(want)) if got[u] != want[u]
    }
    run.given_up = dict(sorted(given_up.items()))
    explained = set(want) - reachable(set(given_up)) if given_up else set()
    run.unaccounted = [u for u in run.missing if u not in given_up and u not in explained]
    return run


def one_run(run: int, redis_url: str, partitions: int = 1) -> ExactnessRun:
    """Crawl run ``run``'s web (over ``partitions`` frontier partitions) and compare the
    store with its BFS."""
    depth, sitemaps = 1 + run % 3, run % 2 == 0
    with tempfile.TemporaryDirectory(prefix="srcrawl-exact-") as tmp:
        directory = Path(tmp)
        web = TestWeb.generate(
            hosts=HOSTS,
            pages=PAGES,
            seed=300 + run,
            slow_seconds=1.0,
            sitemaps=sitemaps,
            sitemap_links=sitemaps,
            late_robots=late_hosts(run),
        )
        with web as tw:
            env = bench_env(redis_url, directory)
            started = time.monotonic()
            crawl = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "srcrawl.app.cli",
                    "crawl",
                    *tw.seed_urls,
                    "--depth",
                    str(depth),
                    *FLAGS,
                    "--partitions",
                    str(partitions),
                    *([] if sitemaps else ["--no-sitemaps"]),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            seconds = time.monotonic() - started
            want = expected_pages(tw, depth, sitemaps)

            def reachable(blocked: set[str]) -> set[str]:
                return set(expected_pages(tw, depth, sitemaps, blocked))

            got, given_up = stored_rows(env) if crawl.returncode == 0 else ({}, {})
    summary = json.loads(crawl.stdout) if crawl.returncode == 0 else {}
    counters = {k: int(summary.get(k, 0)) for k in LAGGING_COUNTERS}
    result = ExactnessRun(
        run=run,
        depth=depth,
        sitemaps=sitemaps,
        exit_code=crawl.returncode,
        seconds=round(seconds, 2),
        expected=0,
        stored=0,
        counters=counters,
    )
    return compared(result, want, got, given_up, reachable)


def run_exactness_benchmark(
    runs: int,
    say: Callable[[str], None],
    *,
    first: int = 0,
    partitions: int = 1,
    redis_url: str | None = None,
    web: str = "late",
    load: int = 0,
) -> list[ExactnessRun]:
    """``runs`` crawls in a row (runs ``first`` … ``first + runs - 1``) of ``web``'s kind
    (``late`` or ``shortcuts``), beside ``load`` busy processes, on a Redis server of their
    own unless ``redis_url`` names one."""
    from srcrawl.benchmarks.exactness_shortcuts import shortcut_run

    one = shortcut_run if web == "shortcuts" else one_run
    with tempfile.TemporaryDirectory(prefix="srcrawl-exact-redis-") as tmp, cpu_load(load):
        proc = None
        if redis_url is None:
            redis_url, proc = embedded.start_server(Path(tmp), appendonly=False, daemonize=False)
        try:
            out = []
            for n in range(first, first + runs):
                exact = sum(r.exact for r in out)
                say(f"run {n - first + 1}/{runs} ({exact} exact so far)")
                out.append(one(n, redis_url, partitions))
            return out
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)


@contextlib.contextmanager
def cpu_load(n: int) -> Iterator[None]:
    """``n`` processes that keep a core busy each while the block runs: the crawls' timing
    under a loaded machine, where races between hosts, levels and slaves show."""
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    try:
        yield
    finally:
        for p in busy:
            p.kill()
            p.wait(timeout=10)


def in_a_row(runs: list[ExactnessRun]) -> int:
    """Exact runs from the first one until the first that is not."""
    n = 0
    for r in runs:
        if not r.exact:
            break
        n += 1
    return n


def render(runs: list[ExactnessRun]) -> str:
    lines = [
        "  run  depth  sitemaps  exit  seconds  expected  stored  missing  extra  "
        "wrong depth  deferred  improved  refetched"
    ]
    for r in runs:
        lines.append(
            f"{r.run:>5}  {r.depth:>5}  {'yes' if r.sitemaps else 'no':>8}  {r.exit_code:>4}  "
            f"{r.seconds:>7.1f}  {r.expected:>8}  {r.stored:>6}  {len(r.missing):>7}  "
            f"{len(r.unexpected):>5}  {len(r.wrong_depth):>11}  "
            + "  ".join(
                f"{r.counters.get(k, 0):>{len(h)}}"
                for k, h in zip(
                    LAGGING_COUNTERS, ("deferred", "improved", "refetched"), strict=True
                )
            )
        )
    exact = sum(r.exact for r in runs)
    lines.append(f"exact runs: {exact} of {len(runs)}; in a row from the first: {in_a_row(runs)}")
    for r in runs:
        if not r.exact:
            sample = dict(list(r.wrong_depth.items())[:3])
            lines.append(
                f"run {r.run}: missing {r.missing[:3]} extra {r.unexpected[:3]} "
                f"stored/BFS depth {sample}"
            )
            if r.given_up or r.unaccounted:
                # every URL not stored is a row with its reason, or the check says it is not
                reasons = sorted(set(r.given_up.values()))
                lines.append(
                    f"run {r.run}: {len(r.given_up)} URLs given up, each a row with its "
                    f"reason ({', '.join(reasons) or '-'}); {len(r.unaccounted)} missing "
                    f"with no row and nothing given up before them {r.unaccounted[:3]}"
                )
    return "\n".join(lines)


def as_json(runs: list[ExactnessRun]) -> dict[str, Any]:
    return {"runs": [asdict(r) for r in runs], "in_a_row": in_a_row(runs)}
