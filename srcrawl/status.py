"""What ``srcrawl status`` reports: queues per phase, live workers, counters."""

from __future__ import annotations

from typing import Any

import redis

from srcrawl.defaults import PHASES
from srcrawl.keys import Keys, processing_key
from srcrawl.queues import workers as worker_registry


def collect(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    """A snapshot of a job's queues and workers, in two round trips."""
    found = worker_registry.workers(client, keys)
    pipe = client.pipeline(transaction=False)
    for phase in PHASES:
        pipe.llen(keys.srq(phase))
        pipe.llen(keys.nrq(phase))
        pipe.hgetall(keys.stats(phase))
        for w in found:
            for q in (keys.srq(phase), keys.nrq(phase)):
                if q in w.queues:
                    pipe.llen(processing_key(q, w.id))
    replies = iter(pipe.execute())
    phases: dict[str, Any] = {}
    for phase in PHASES:
        srq, nrq, stats = next(replies), next(replies), next(replies)
        in_flight = 0
        for w in found:
            for q in (keys.srq(phase), keys.nrq(phase)):
                if q in w.queues:
                    in_flight += int(next(replies))
        phases[phase] = {
            "srq": int(srq),
            "nrq": int(nrq),
            "in_flight": in_flight,
            "counters": {k.decode(): _number(v) for k, v in sorted(stats.items())},
        }
    return {
        "job": keys.job,
        "phases": phases,
        "workers": [{"id": w.id, "alive": w.alive, "stats": w.stats} for w in found],
    }


def _number(raw: bytes) -> int | float | str:
    text = raw.decode()
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def render(snapshot: dict[str, Any]) -> str:
    """The snapshot as a few aligned lines for a terminal."""
    lines = [f"job {snapshot['job']}"]
    lines.append(f"  {'phase':<9} {'srq':>9} {'nrq':>9} {'in flight':>10}  counters")
    for phase, p in snapshot["phases"].items():
        counters = " ".join(f"{k}={v}" for k, v in p["counters"].items()) or "-"
        lines.append(f"  {phase:<9} {p['srq']:>9} {p['nrq']:>9} {p['in_flight']:>10}  {counters}")
    crawl = snapshot["phases"].get("crawl", {}).get("counters", {})
    failed = {k[len("error_") :]: v for k, v in crawl.items() if k.startswith("error_")}
    if failed or crawl.get("fetch_retries"):
        kinds = ", ".join(f"{k} {v}" for k, v in failed.items()) or "none"
        lines.append(f"  failed fetches: {kinds} (retried {crawl.get('fetch_retries', 0)})")
    alive = [w for w in snapshot["workers"] if w["alive"]]
    dead = len(snapshot["workers"]) - len(alive)
    lines.append(f"workers: {len(alive)} alive" + (f", {dead} without heartbeat" if dead else ""))
    for w in alive:
        s = w["stats"]
        lines.append(
            f"  {w['id']:<12} cpu {s.get('cpu_s', 0):>8.1f}s  rss {s.get('rss_mb', 0):>7.1f} MB"
            + "".join(f"  {k} {v}" for k, v in s.items() if k not in ("cpu_s", "rss_mb", "at"))
        )
    return "\n".join(lines)
