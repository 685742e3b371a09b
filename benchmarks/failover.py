"""What the death of a Redis Cluster primary costs a crawl: ``srcrawl bench failover``.

Each round crawls the same loopback test web twice on a fresh 3-primary,
3-replica cluster: once undisturbed (the reference) and once with the
primary that serves the job's slot SIGKILLed mid-crawl. Redis replicates
asynchronously, so writes the dead primary acknowledged but had not yet
sent to its replica are gone after the promotion; what that does to the
crawl is counted, not assumed:

- ``missing``: pages the breadth-first reference reaches that the store lacks;
- ``unexpected``: stored pages it does not reach;
- ``refetched``: page URLs answered 200 more than once (the cost of a
  replayed task, measured from the test web's access log);
- ``failover_s``: from the kill until the job's slot answers again.

With ``--partitions P`` the crawl is partitioned (docs/ARCHITECTURE.md): the
primary killed is the one serving partition 0, and the partitions on the
other primaries go on meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from srcrawl.core.keys import Keys
from srcrawl.core.urls import host_of
from srcrawl.lab.testcluster import RedisClusterProcesses
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope
from srcrawl.testweb import TestWeb
from srcrawl.testweb.accesslog import read_access_log

DEPTH = 3
CRAWL_FLAGS = [
    "--depth",
    str(DEPTH),
    "--slaves",
    "2",
    "--delay",
    "0",
    "--delay-factor",
    "0",
    "--fetch-timeout",
    "2",
    "--robots-defer",
    "0.3",
    "--retry-backoff",
    "0.1",
]


@dataclass
class FailoverRun:
    round: int
    killed: bool
    exit_code: int
    crawl_s: float
    failover_s: float | None
    expected: int
    stored: int
    missing: int
    unexpected: int
    refetched: int


def _env(url: str, job: str, directory: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    env.update(
        SRCRAWL_REDIS_URL=url,
        SRCRAWL_JOB=job,
        SRCRAWL_HOME=str(directory / "home"),
        SRCRAWL_DB_URL=f"sqlite:///{directory}/crawl.db",
    )
    return env


def _stored(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", "export", "pages"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    pages = [json.loads(line) for line in out.stdout.splitlines()]
    return {p["url"]: p["depth"] for p in pages}


def _pages_so_far(cluster: RedisClusterProcesses, parts: list[Keys]) -> int:
    total = 0
    for k in parts:
        port = cluster.primary_of(k.stats("crawl"))
        total += int(redis.Redis(port=port, socket_timeout=2).hget(k.stats("crawl"), "pages") or 0)
    return total


def _kill_mid_crawl(
    cluster: RedisClusterProcesses, parts: list[Keys], crawl: subprocess.Popen, after_pages: int
) -> float:
    """SIGKILL the primary of the (first partition of the) job once ``after_pages`` are
    stored; seconds until it is served again."""
    while crawl.poll() is None:
        try:
            if _pages_so_far(cluster, parts) >= after_pages:
                break
        except redis.RedisError:
            pass
        time.sleep(0.02)
    victim = cluster.primary_of(parts[0].crawl_state)
    cluster.kill(victim)
    killed = time.monotonic()
    while time.monotonic() - killed < 60:
        try:
            if cluster.primary_of(parts[0].crawl_state) != victim:
                _pages_so_far(cluster, parts)
                return time.monotonic() - killed
        except (redis.RedisError, RuntimeError):
            pass
        time.sleep(0.05)
    return float("nan")


def _expected(tw: TestWeb) -> dict[str, int]:
    seeds = tw.seed_urls
    scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=DEPTH))
    return tw.web.expected_crawl(seeds, DEPTH, lambda url: scope.reject(url, 0) is None)


def one_run(
    round_no: int, killed: bool, pages: int, after_pages: int, seed: int, partitions: int = 1
) -> FailoverRun:
    """One crawl of a fresh test web on a fresh cluster, the primary killed or not."""
    with tempfile.TemporaryDirectory(prefix="srcrawl-failover-") as tmp:
        directory = Path(tmp)
        log = directory / "access.jsonl"
        cluster = RedisClusterProcesses(directory / "cluster").start()
        try:
            with TestWeb.generate(
                hosts=4, pages=pages, seed=seed, latency_ms=20, access_log=log, flush_interval=0.05
            ) as tw:
                keys = Keys(f"failover-{uuid.uuid4().hex[:8]}")
                env = _env(cluster.url, keys.job, directory)
                started = time.monotonic()
                flags = [*CRAWL_FLAGS, "--partitions", str(partitions)]
                crawl = subprocess.Popen(
                    [sys.executable, "-m", "srcrawl.app.cli", "crawl", *tw.seed_urls, *flags],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                parts = keys.partitions(partitions)
                failover = _kill_mid_crawl(cluster, parts, crawl, after_pages) if killed else None
                code = crawl.wait(timeout=600)
                crawl_s = time.monotonic() - started
                want = _expected(tw)
            got = _stored(env) if code == 0 else {}
        finally:
            cluster.stop()
        ok = Counter(e["url"] for e in read_access_log(log) if e["status"] == 200 and e["url"])
        return FailoverRun(
            round=round_no,
            killed=killed,
            exit_code=code,
            crawl_s=round(crawl_s, 2),
            failover_s=None if failover is None else round(failover, 2),
            expected=len(want),
            stored=len(got),
            missing=len(set(want) - set(got)),
            unexpected=len(set(got) - set(want)),
            refetched=sum(1 for n in ok.values() if n > 1),
        )


def run_failover_benchmark(
    rounds: int, pages: int, after_pages: int, say: Callable[[str], None], partitions: int = 1
) -> list[FailoverRun]:
    """``rounds`` pairs of runs (undisturbed, primary killed), each on a new seed."""
    runs = []
    for r in range(1, rounds + 1):
        for killed in (False, True):
            say(f"round {r}/{rounds}: {'primary killed' if killed else 'undisturbed'}")
            runs.append(one_run(r, killed, pages, after_pages, 100 + r, partitions))
    return runs


def render(runs: list[FailoverRun]) -> str:
    lines = [
        "round  primary   exit  crawl s  failover s  expected  stored  missing  unexpected"
        "  refetched"
    ]
    for x in runs:
        fo = "-" if x.failover_s is None else f"{x.failover_s:.2f}"
        lines.append(
            f"{x.round:>5}  {'killed' if x.killed else 'alive':<8}  {x.exit_code:>4}  "
            f"{x.crawl_s:>7.1f}  {fo:>10}  {x.expected:>8}  {x.stored:>6}  {x.missing:>7}  "
            f"{x.unexpected:>10}  {x.refetched:>9}"
        )
    killed = [x for x in runs if x.killed]
    exact = sum(1 for x in killed if x.exit_code == 0 and not x.missing and not x.unexpected)
    lines.append(f"killed runs exact: {exact} of {len(killed)}")
    return "\n".join(lines)


def as_json(runs: list[FailoverRun]) -> dict[str, Any]:
    return {"runs": [asdict(x) for x in runs]}
