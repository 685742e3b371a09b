"""Runs of ``srcrawl bench exactness --web shortcuts``: a long host and late hosts that
hold shortcuts into it (srcrawl/testweb/shortcuts.py), crawled as a user would.

Every late host's robots.txt answers 500 two or three times, then allows everything:
within the five tries a host gets, so a correct crawl gives none up and stores exactly
the BFS set, the long host's deep pages at the depth their shortcuts give them. The
deferrals (``--robots-defer 1.5``) are above ``--lag-after`` (1 s by default): the levels
go on without the late hosts, and levels overlap their tails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from srcrawl.benchmarks.exactness import (
    LAGGING_COUNTERS,
    ExactnessRun,
    bench_env,
    compared,
    stored_rows,
)
from srcrawl.testweb import TestWeb
from srcrawl.testweb.server import free_loopback_sockets
from srcrawl.testweb.shortcuts import shortcut_web

LATE_HOSTS = 12
PAGES = 400
FLAGS = [
    "--allow-private",
    "--allow-domain",
    "127.0.0.1",
    "--slaves",
    "2",
    "--delay",
    "0",
    "--delay-factor",
    "0",
    "--robots-defer",
    "1.5",
    "--no-sitemaps",
]


def shortcut_run(run: int, redis_url: str, partitions: int = 1) -> ExactnessRun:
    """Crawl run ``run``'s shortcut web (``--depth`` 1 to 3) and compare the store with
    its BFS."""
    depth = 1 + run % 3
    socks = free_loopback_sockets(1 + LATE_HOSTS)
    web = shortcut_web([s.getsockname()[1] for s in socks], seed=700 + run, pages=PAGES)
    seed = web.hosts[0].root
    with tempfile.TemporaryDirectory(prefix="srcrawl-exact-") as tmp, TestWeb(web, sockets=socks):
        env = bench_env(redis_url, Path(tmp))
        started = time.monotonic()
        args = ["crawl", seed, "--depth", str(depth), *FLAGS, "--partitions", str(partitions)]
        crawl = subprocess.run(
            [sys.executable, "-m", "srcrawl.app.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        seconds = time.monotonic() - started
        got, given_up = stored_rows(env) if crawl.returncode == 0 else ({}, {})
    summary = json.loads(crawl.stdout) if crawl.returncode == 0 else {}
    result = ExactnessRun(
        run=run,
        depth=depth,
        sitemaps=False,
        exit_code=crawl.returncode,
        seconds=round(seconds, 2),
        expected=0,
        stored=0,
        counters={k: int(summary.get(k, 0)) for k in LAGGING_COUNTERS},
        web="shortcuts",
    )

    def reachable(blocked: set[str]) -> set[str]:
        return set(web.expected_crawl([seed], depth, lambda url: url not in blocked))

    return compared(result, web.expected_crawl([seed], depth), got, given_up, reachable)
