"""Worker registry and heartbeats.

Every worker (a slave process, or the master for the ``nrq`` it consumes)
registers the queues it consumes and refreshes a heartbeat key with a TTL.
:func:`reap` returns the processing lists of workers whose heartbeat expired
to the head of their queues: a worker killed mid-task loses nothing.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from srcrawl.core.defaults import DEFAULT_HEARTBEAT_TTL
from srcrawl.core.keys import Keys
from srcrawl.core.telemetry import open_files
from srcrawl.queues.work_queue import WorkQueue


def process_stats() -> dict[str, float]:
    """CPU seconds, resident memory and open files of this process, for heartbeats."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: peak RSS is the best we have
        rss = usage.ru_maxrss * 1024
    return {
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "rss_mb": round(rss / 2**20, 1),
        "open_files": open_files(),
    }


@dataclass
class WorkerInfo:
    id: str
    alive: bool
    queues: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


class Worker:
    """This process's presence in the registry."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        worker_id: str,
        queues: Iterable[WorkQueue],
        *,
        role: str = "slave",
        ttl: float = DEFAULT_HEARTBEAT_TTL,
    ) -> None:
        self.client = client
        self.keys = keys
        self.id = worker_id
        self.role = role
        self.ttl = ttl
        self.set_queues(queues)

    def set_queues(self, queues: Iterable[WorkQueue]) -> None:
        """The queues whose processing lists this worker may hold (registered at the next
        beat; a crawl started anew with other partitions changes them)."""
        self.queues = list(queues)
        self._record = json.dumps(
            {
                "queues": [q.key for q in self.queues],
                "role": self.role,
                "host": socket.gethostname(),
                "pid": os.getpid(),
            }
        )

    def beat(self, stats: dict | None = None) -> None:
        """Refresh the heartbeat (and the registration, in case a reaper removed it)."""
        # host and pid: `srcrawl health slave` finds the slaves of its host (container)
        payload = {
            "at": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **process_stats(),
            **(stats or {}),
        }
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.keys.workers, self.id, self._record)
        pipe.set(self.keys.heartbeat(self.id), json.dumps(payload), px=int(self.ttl * 1000))
        pipe.execute()

    def retire(self) -> int:
        """Leave cleanly: hand back anything unacknowledged, then unregister."""
        returned = sum(q.requeue(self.id) for q in self.queues)
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(self.keys.workers, self.id)
        pipe.delete(self.keys.heartbeat(self.id))
        pipe.execute()
        return returned


def workers(client: redis.Redis, keys: Keys) -> list[WorkerInfo]:
    """Every registered worker, alive or not, with its last heartbeat stats."""
    registry = client.hgetall(keys.workers)
    ids = sorted(k.decode() for k in registry)
    if not ids:
        return []
    beats = client.mget([keys.heartbeat(w) for w in ids])
    out = []
    for wid, beat in zip(ids, beats, strict=True):
        record = json.loads(registry[wid.encode()])
        out.append(
            WorkerInfo(
                id=wid,
                alive=beat is not None,
                queues=list(record.get("queues", [])),
                stats=json.loads(beat) if beat else {},
            )
        )
    return out


def reap(client: redis.Redis, keys: Keys) -> dict[str, dict[str, int]]:
    """Requeue the processing lists of every worker whose heartbeat expired.

    Returns worker id -> {queue key: messages returned to it} (queues it held
    nothing of are left out). A worker that was only slow, not dead, finds
    its acks refused afterwards (see WorkQueue.ack), so no result is ever
    counted twice.
    """
    returned: dict[str, dict[str, int]] = {}
    for info in workers(client, keys):
        if info.alive:
            continue
        counts = {q: WorkQueue(client, q).requeue(info.id) for q in info.queues}
        returned[info.id] = {q: n for q, n in counts.items() if n}
        client.hdel(keys.workers, info.id)
    return returned


def reaped_sentences(returned: dict[str, dict[str, int]]) -> list[str]:
    """What :func:`reap` did, one sentence per dead worker, for a log."""
    out = []
    for worker, per in returned.items():
        n = sum(per.values())
        if n:
            out.append(f"requeued {n} task{'s' if n != 1 else ''} of dead worker {worker}")
        else:
            out.append(f"worker {worker} is dead (it held no task)")
    return out


def requeued(returned: dict[str, dict[str, int]], queue: str | None = None) -> int:
    """Messages :func:`reap` returned, to ``queue`` only or to every queue."""
    return sum(n for per in returned.values() for q, n in per.items() if queue in (None, q))
