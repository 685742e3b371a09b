"""A protocol worker for tests: takes tasks from a job's crawl srq and acks
each batch with one result per task (b"done:" + task) into nrq.

usage: echo_worker.py REDIS_URL JOB WORKER_ID BATCH DELAY_S [--burst]
DELAY_S is slept between pop and ack, so a test can kill it mid-task.
"""

import sys
import threading
import time

import redis

from srcrawl.core.keys import Keys
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.workers import Worker


def main() -> None:
    url, job, worker_id, batch, delay = sys.argv[1:6]
    burst = "--burst" in sys.argv
    client = redis.Redis.from_url(url)
    keys = Keys(job)
    q = PhaseQueues(client, keys, "crawl")
    me = Worker(client, keys, worker_id, [q.srq], ttl=1.0)
    me.beat()

    def heartbeat() -> None:
        while True:
            me.beat()
            time.sleep(0.2)

    threading.Thread(target=heartbeat, daemon=True).start()
    while True:
        tasks = q.srq.pop(worker_id, int(batch), timeout=0.2)
        if not tasks:
            if burst:
                break
            continue
        time.sleep(float(delay))
        q.srq.ack(worker_id, tasks, [b"done:" + t for t in tasks], q.nrq)
    me.retire()


if __name__ == "__main__":
    main()
