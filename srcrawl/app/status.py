"""What ``srcrawl status`` reports: queues per phase, live workers, counters."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from srcrawl.core.defaults import INDEX_REPLICA_REPORT_EVERY, PHASES
from srcrawl.core.keys import Keys, processing_key
from srcrawl.master.crawl_control import paused_since
from srcrawl.master.guards import guard_sentences
from srcrawl.queues import workers as worker_registry
from srcrawl.queues.partitions import partition_keys


def collect(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    """A snapshot of a job's queues and workers, in a few round trips (the crawl's are
    summed over its partitions, and each partition is listed with its master)."""
    found = worker_registry.workers(client, keys)
    parts = partition_keys(client, keys)
    pipe = client.pipeline(transaction=False)
    for phase in PHASES:
        for k in parts if phase == "crawl" else [keys]:
            pipe.llen(k.srq(phase))
            pipe.llen(k.nrq(phase))
            pipe.hgetall(k.stats(phase))
    replies = iter(pipe.execute())
    phases: dict[str, Any] = {}
    per_partition: list[dict[str, Any]] = []
    for phase in PHASES:
        total: dict[str, Any] = {"srq": 0, "nrq": 0, "counters": {}}
        for k in parts if phase == "crawl" else [keys]:
            srq, nrq, stats = next(replies), next(replies), next(replies)
            counters = {c.decode(): _number(v) for c, v in sorted(stats.items())}
            total["srq"] += int(srq)
            total["nrq"] += int(nrq)
            for c, v in counters.items():
                was = total["counters"].get(c, 0)
                total["counters"][c] = was + v if isinstance(v, int | float) else v
            if phase == "crawl" and len(parts) > 1:
                per_partition.append(
                    {
                        "partition": k.part,
                        "srq": int(srq),
                        "nrq": int(nrq),
                        "pages": counters.get("pages", 0),
                    }
                )
        total["in_flight"] = _in_flight(client, found, parts if phase == "crawl" else [keys], phase)
        total["counters"] = dict(sorted(total["counters"].items()))
        phases[phase] = total
    for entry, k in zip(per_partition, parts, strict=False):
        holder = client.get(k.master_lease("crawl"))
        entry["master"] = holder.decode() if holder is not None else None
    version = 0
    if per_partition:
        raw = client.hgetall(keys.crawl_assignment)
        version = int(raw.get(b"version", 0))
        for entry in per_partition:
            taken = raw.get(str(entry["partition"]).encode())
            entry["assigned_to"] = taken.decode() if taken is not None else None
    guards = {k.decode(): json.loads(v) for k, v in client.hgetall(keys.guards).items()}
    return {
        "paused": paused_since(client, keys),
        "index_copies": index_copies(client, keys),
        "job": keys.job,
        "guards": guards,
        "phases": phases,
        "partitions": per_partition,
        "assignment_version": version,
        "workers": [{"id": w.id, "alive": w.alive, "stats": w.stats} for w in found],
    }


def index_copies(client: redis.Redis, keys: Keys, now: float | None = None) -> dict[str, Any]:
    """The index commit last published to an object store and each replica's lag: the
    commit it holds, how old that commit is, how long it took from its publish to being
    searchable there, whether a later one is published, and when it last reported."""
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.index_published)
    pipe.hgetall(keys.index_replicas)
    raw_published, raw_replicas = pipe.execute()
    published = {k.decode(): _number(v) for k, v in raw_published.items()} or None
    latest = published.get("commit") if published else None
    replicas = []
    for raw in raw_replicas.values():
        r = json.loads(raw)
        at, searchable = r.get("published_at"), r.get("searchable_at")
        r["age_s"] = round(now - at, 3) if at else None
        r["searchable_after_s"] = round(searchable - at, 3) if at and searchable else None
        r["behind"] = latest is not None and r.get("commit") is not None and r["commit"] < latest
        r["silent"] = not r.get("stopped") and now - r.get("at", 0) > 3 * INDEX_REPLICA_REPORT_EVERY
        replicas.append(r)
    if published:
        published["age_s"] = round(now - float(published.get("published_at", now)), 3)
    return {"published": published, "replicas": sorted(replicas, key=lambda r: r["id"])}


def _index_lines(copies: dict[str, Any]) -> list[str]:
    """The published commit and the replicas, a line each (none when nothing is published)."""
    published = copies.get("published")
    if not published and not copies.get("replicas"):
        return []
    lines = []
    if published:
        lines.append(
            f"index published: commit {published.get('commit')} {published['age_s']:.1f} s ago, "
            f"{published.get('files')} files, {int(published.get('bytes', 0)) / 1e6:.1f} MB"
        )
    else:
        lines.append("index published: nothing yet")
    for r in copies.get("replicas", []):
        if r.get("commit") is None:
            held = "no commit yet"
        else:
            held = f"commit {r['commit']} (published {r['age_s']:.1f} s ago"
            if r.get("searchable_after_s") is not None:
                held += f", searchable {r['searchable_after_s']:.2f} s after"
            held += ")"
        flags = [
            f
            for f, on in (
                ("behind", r.get("behind")),
                ("silent", r.get("silent")),
                ("stopped", r.get("stopped")),
            )
            if on
        ]
        if r.get("error"):
            flags.append(f"error: {r['error']}")
        lines.append(f"  replica {r['id']}  {held}" + (f"  [{'; '.join(flags)}]" if flags else ""))
    return lines


def _in_flight(
    client: redis.Redis, found: list[worker_registry.WorkerInfo], keys: list[Keys], phase: str
) -> int:
    """Tasks the workers hold of a phase's queues (their processing lists)."""
    pipe = client.pipeline(transaction=False)
    n = 0
    for w in found:
        for k in keys:
            for q in (k.srq(phase), k.nrq(phase)):
                if q in w.queues:
                    pipe.llen(processing_key(q, w.id))
                    n += 1
    return sum(int(x) for x in pipe.execute()) if n else 0


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
    if snapshot.get("paused"):
        since = time.strftime("%H:%M:%S", time.localtime(snapshot["paused"]))
        lines.append(f"  PAUSED since {since} (resume it in the portal's admin area)")
    lines += [f"  {s}" for s in guard_sentences(snapshot.get("guards", {}))]
    lines.append(f"  {'phase':<9} {'srq':>9} {'nrq':>9} {'in flight':>10}  counters")
    for phase, p in snapshot["phases"].items():
        counters = " ".join(f"{k}={v}" for k, v in p["counters"].items()) or "-"
        lines.append(f"  {phase:<9} {p['srq']:>9} {p['nrq']:>9} {p['in_flight']:>10}  {counters}")
    crawl = snapshot["phases"].get("crawl", {}).get("counters", {})
    failed = {k[len("error_") :]: v for k, v in crawl.items() if k.startswith("error_")}
    if failed or crawl.get("fetch_retries"):
        kinds = ", ".join(f"{k} {v}" for k, v in failed.items()) or "none"
        lines.append(f"  failed fetches: {kinds} (retried {crawl.get('fetch_retries', 0)})")
    if snapshot.get("partitions"):
        lines.append(
            f"crawl partitions: {len(snapshot['partitions'])} (assignment version "
            f"{snapshot.get('assignment_version', 0)})"
        )
        for part in snapshot["partitions"]:
            master = part["master"] or "(none: another takes it once its lease lapses)"
            lines.append(
                f"  {part['partition']:>4}  srq {part['srq']:>7}  nrq {part['nrq']:>7}  "
                f"pages {part['pages']:>8}  master {master}"
            )
    lines += _index_lines(snapshot.get("index_copies", {}))
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
