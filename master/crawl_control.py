"""An operator's hold on a crawl: the jobs Redis knows, pausing and resuming a job, and
what its frontier holds for each host.

A paused job keeps its frontier and takes its slaves' outcomes as before; its master
hands out no task (:meth:`~srcrawl.master.crawl_master.CrawlMaster._hand_out` reads the
flag every DEFAULT_PAUSE_CHECK seconds), so once the tasks already in srq are fetched,
nothing more is. Resuming clears the flag and the hand-out goes on where it stopped.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import redis

from srcrawl.core.keys import Keys
from srcrawl.queues.partitions import partition_keys
from srcrawl.settings.config import Config

PAUSED = "paused"
"""The field of the job's crawl state that holds when it was paused (absent: not paused)."""


def pause_crawl(cfg: Config) -> None:
    """Pause the job's crawl: its master hands out no task until :func:`resume_crawl`."""
    cfg.redis().hset(cfg.keys.crawl_state, PAUSED, repr(time.time()))


def resume_crawl(cfg: Config) -> None:
    cfg.redis().hdel(cfg.keys.crawl_state, PAUSED)


def paused_since(client: redis.Redis, keys: Keys) -> float | None:
    """When the job's crawl was paused, or None when it is not."""
    raw = client.hget(keys.job_keys.crawl_state, PAUSED)
    return float(raw) if raw is not None else None


def jobs(client: redis.Redis) -> list[str]:
    """The jobs whose crawl state Redis holds, by name (a partition's state is its job's)."""
    found = set()
    for key in client.scan_iter(match="srcrawl:{*}:crawl:state", count=1000):
        tag = key.decode().split("{", 1)[1].split("}", 1)[0]
        if "/" not in tag:
            found.add(tag)
    return sorted(found)


@dataclass
class HostQueue:
    """What the frontier holds for one host (or one hash bucket, with ``--policy hash``)."""

    host: str
    queued: int = 0
    """Tasks waiting in its queues."""
    in_flight: int = 0
    backing_off_until: float | None = None
    """Epoch seconds its queue is held back to after a failure of the host (None: it is not)."""
    lagging: bool = False
    """Its head task waits on a robots.txt deferral or a slow answer (the levels go on)."""
    robots_error: dict = field(default_factory=dict)
    """Why its robots.txt could not be had, while it could not (see ``host_errors``)."""


def _host_of_queue(queue: str) -> str:
    # a host's queue is named by the host, or host#n when it has several (--per-host)
    return queue.split("#", 1)[0]


def frontier_hosts(cfg: Config) -> dict[str, HostQueue]:
    """host -> what the job's frontier holds for it, over every partition (a few round
    trips a partition and one LLEN a queue, pipelined)."""
    client = cfg.redis()
    out: dict[str, HostQueue] = {}

    def entry(queue: str) -> HostQueue:
        host = _host_of_queue(queue)
        return out.setdefault(host, HostQueue(host))

    for k in partition_keys(client, cfg.keys):
        prefix = k.crawl_queue_prefix
        queues = [
            q.decode()[len(prefix) :] for q in client.scan_iter(match=f"{prefix}*", count=1000)
        ]
        pipe = client.pipeline(transaction=False)
        for q in queues:
            pipe.llen(k.crawl_queue(q))
        pipe.hkeys(k.crawl_inflight)
        pipe.zrange(k.crawl_backoff_queues, 0, -1, withscores=True)
        pipe.smembers(k.crawl_lagging)
        pipe.hgetall(k.crawl_host_errors)
        *lengths, inflight, backoff, lagging, errors = pipe.execute()
        for q, n in zip(queues, lengths, strict=True):
            entry(q).queued += int(n)
        for q in inflight:
            entry(q.decode()).in_flight += 1
        now = time.time()
        for q, until in backoff:
            if until / 1000 > now:
                e = entry(q.decode())
                e.backing_off_until = max(e.backing_off_until or 0.0, until / 1000)
        for q in lagging:
            entry(q.decode()).lagging = True
        for host, record in errors.items():
            out.setdefault(host.decode(), HostQueue(host.decode())).robots_error = json.loads(
                record
            )
    return out
