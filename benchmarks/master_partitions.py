"""``srcrawl bench master --partitions 1,2,4 --masters 1,2``: the master side of a
partitioned crawl, every URL new.

For each pair (P, M) a crawl of P partitions over many hosts is started, M
``srcrawl master start`` processes are started and left to share the
partitions (fair share by lease), and then every partition's nrq is given
``links`` messages of URLs it owns, none seen before: each costs the
master the scope test, a Bloom insert, a queue push and its share of a Redis
commit. The messages are queued while the masters are stopped (SIGSTOP, for
well under the lease TTL), so the benchmark's own pushing takes no CPU from
them. The figure is URLs/s from the masters' SIGCONT until every URL is
scheduled, and the CPU the master processes spent per URL. No slave runs,
so nothing is fetched: this is the master's ceiling, Redis included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import redis

from srcrawl.core.urls import fingerprint
from srcrawl.master.crawl_master import reset_crawl
from srcrawl.master.crawl_run import start_crawl
from srcrawl.queues.crawl_protocol import Links
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.partitions import partition_of_url
from srcrawl.settings.config import Config

_LINKS_PER_MESSAGE = 50
_LEASE_TTL = 30
"""Seconds: the masters are stopped while the messages are queued (2 million URLs take a
few seconds), and no lease may lapse meanwhile."""


@dataclass(frozen=True)
class PartitionRun:
    round: int
    partitions: int
    masters: int
    urls: int
    seconds: float
    cpu_s: float
    redis_cpu_s: float
    """CPU the Redis server spent meanwhile (NaN on a cluster: it is many servers)."""

    @property
    def rate(self) -> float:
        return self.urls / self.seconds

    @property
    def cpu_us_per_url(self) -> float:
        return self.cpu_s / self.urls * 1e6

    @property
    def redis_us_per_url(self) -> float:
        return self.redis_cpu_s / self.urls * 1e6


def run_partition_benchmark(
    cfg: Config,
    partitions: list[int],
    masters: list[int],
    *,
    urls: int,
    hosts: int,
    rounds: int = 1,
    say: Callable[[str], None] = lambda _: None,
) -> list[PartitionRun]:
    """One run per (partitions, masters) pair and round, pairs alternating within a round."""
    out = []
    for r in range(rounds):
        for p in partitions:
            for m in masters:
                say(f"round {r + 1}: {p} partitions, {m} masters")
                out.append(_one(cfg, r + 1, p, m, urls=urls, hosts=hosts))
    return out


def _one(
    cfg: Config, round_no: int, partitions: int, masters: int, *, urls: int, hosts: int
) -> PartitionRun:
    job = cfg.with_job(f"bench-partitions-{os.getpid()}-{time.time_ns()}")
    names = tuple(f"h{h}.bench.example:8080" for h in range(hosts))
    strategy = CrawlStrategy(seed_hosts=names, max_depth=100, partitions=partitions, sitemaps=False)
    start_crawl(job, [f"http://{names[0]}/"], strategy)
    # links of a level reached with no lagging host: the steady state, no depth record
    job.redis().hset(job.keys.crawl_state, "strict", 0)
    env = {**job.child_env(), "SRCRAWL_LEASE_TTL": str(_LEASE_TTL)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "srcrawl.app.cli", "master", "start"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(masters)
    ]
    client = job.redis()
    try:
        _wait_for_shares(job, partitions, masters, procs)
        batches = _messages(urls, names, partitions)
        # the messages are queued while the masters are stopped, so that pushing them (the
        # slaves' work, on other machines in a real crawl) takes no CPU from the masters
        # while they are timed; a stop of well under the lease TTL costs them nothing
        for p in procs:
            p.send_signal(signal.SIGSTOP)
        try:
            for part, msgs in batches.items():
                nrq = job.keys.partition(part, partitions).nrq("crawl")
                for i in range(0, len(msgs), 500):
                    client.rpush(nrq, *msgs[i : i + 500])
        finally:
            cpu0, redis0 = sum(_cpu(p) for p in procs), _redis_cpu(client)
            t0 = time.perf_counter()
            for p in procs:
                p.send_signal(signal.SIGCONT)
        want = urls + 1  # the seed too
        while _scheduled(job, partitions) < want:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a master process ended during the benchmark")
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        cpu = sum(_cpu(p) for p in procs) - cpu0
        redis_cpu = _redis_cpu(client) - redis0
    finally:
        for p in procs:
            p.kill()
            p.wait()
        reset_crawl(job)
    return PartitionRun(round_no, partitions, masters, urls, seconds, cpu, redis_cpu)


def _redis_cpu(client: redis.Redis) -> float:
    try:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    except (KeyError, TypeError, ValueError):  # a cluster answers per node
        return float("nan")


def _cpu(proc: subprocess.Popen) -> float:
    t = psutil.Process(proc.pid).cpu_times()
    return t.user + t.system


def _messages(urls: int, names: tuple[str, ...], partitions: int) -> dict[int, list[bytes]]:
    by_part: dict[int, list[tuple[str, int]]] = {}
    for i in range(urls):
        url = f"http://{names[i % len(names)]}/u/{i}.html"
        by_part.setdefault(partition_of_url(url, partitions), []).append((url, fingerprint(url)))
    return {
        p: [
            Links(links[i : i + _LINKS_PER_MESSAGE], 1).encode()
            for i in range(0, len(links), _LINKS_PER_MESSAGE)
        ]
        for p, links in by_part.items()
    }


def _scheduled(job: Config, partitions: int) -> int:
    client = job.redis()
    return sum(
        int(client.hget(k.stats("crawl"), "scheduled") or 0)
        for k in job.keys.partitions(partitions)
    )


def _wait_for_shares(
    job: Config, partitions: int, masters: int, procs: list[subprocess.Popen]
) -> None:
    """Until every partition has a master and the live masters hold their fair shares."""
    client = job.redis()
    share = -(-partitions // masters)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        held: dict[str, int] = {}
        for k in job.keys.partitions(partitions):
            holder = client.get(k.master_lease("crawl"))
            if holder is not None:
                process = ":".join(holder.decode().split(":")[:2])
                held[process] = held.get(process, 0) + 1
        busy = min(masters, partitions)
        if sum(held.values()) == partitions and len(held) == busy and max(held.values()) <= share:
            return
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a master process ended before the benchmark began")
        time.sleep(0.1)
    raise RuntimeError("the masters did not share the partitions within 60 s")


def render(runs: list[PartitionRun]) -> str:
    """A row a run; beside each, its rate over one master's on as many partitions in the
    same round."""
    base = {(r.round, r.partitions): r.rate for r in runs if r.masters == 1}
    lines = [
        "master side, every URL new: URLs/s from the masters' SIGCONT on the queued URLs "
        "to the last URL scheduled",
        f"  {'partitions':>10} {'masters':>8} {'URLs':>9} {'seconds':>8} {'URLs/s':>10} "
        f"{'CPU µs/URL':>11} {'Redis µs/URL':>13} {'× 1 master':>11}",
    ]
    for r in runs:
        one = base.get((r.round, r.partitions))
        ratio = r.rate / one if one else float("nan")
        lines.append(
            f"  {r.partitions:>10} {r.masters:>8} {r.urls:>9,} {r.seconds:>8.2f} "
            f"{r.rate:>10,.0f} {r.cpu_us_per_url:>11.1f} {r.redis_us_per_url:>13.1f} "
            f"{ratio:>11.2f}"
        )
    return "\n".join(lines)
