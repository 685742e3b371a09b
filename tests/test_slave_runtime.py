"""The slave template loop with a pure-logic handler against a real Redis."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from srcrawl.core.errors import StoreError
from srcrawl.core.keys import processing_key
from srcrawl.queues.envelope import decode
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.workers import workers
from srcrawl.settings.config import Config
from srcrawl.slave.runtime import Slave


class Upper:
    phase = "index"
    batch_size = 7
    threads = 3

    def __init__(self) -> None:
        self.seen = 0
        self.lock = threading.Lock()

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        if b"boom" in tasks:
            raise RuntimeError("bug")
        with self.lock:
            self.seen += len(tasks)
        return [t.upper() for t in tasks]

    def stats(self) -> dict[str, float]:
        return {"seen": self.seen}


def make_cfg(redis_url: str, job: str, tmp_path) -> Config:
    return Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": job,
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        }
    )


def test_burst_drains_every_task_once_with_threads(redis_url, redis_client, keys, tmp_path) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    tasks = [b"t%03d" % i for i in range(300)]
    q.srq.push(tasks)
    handler = Upper()
    slave = Slave.from_config(cfg, [handler])
    assert slave.id.startswith("slave-")
    slave.run(burst=True)
    results = q.nrq.pop("m", 1000)
    assert sorted(results) == sorted(t.upper() for t in tasks)
    assert handler.seen == 300 and slave.batches >= 300 // 7
    assert workers(redis_client, keys) == []  # retired cleanly
    cfg.close()


def test_a_handler_bug_reports_the_batch_instead_of_looping(
    redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    q.srq.push([b"ok", b"boom"])
    handler = Upper()
    handler.threads = 1
    slave = Slave.from_config(cfg, [handler])
    slave.run(burst=True)
    [err] = q.nrq.pop("m", 10)
    msg = decode(err)
    assert msg.kind == "error" and msg.get("phase") == "index"
    assert msg.payload.split(b"\n") == [b"ok", b"boom"]
    assert slave.failed_batches == 1 and len(q.srq) == 0
    cfg.close()


class Stored(Upper):
    """Results count only once flush() made them durable; the store fails on "lost"."""

    threads = 4
    batch_size = 1

    def __init__(self) -> None:
        super().__init__()
        self.queued: list[bytes] = []
        self.durable: set[bytes] = set()

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        with self.lock:
            self.queued += tasks
        return [t.upper() for t in tasks]

    def flush(self) -> None:
        with self.lock:
            batch, self.queued = self.queued, []
        if b"lost" in batch:
            raise RuntimeError("store down")
        self.durable.update(batch)


def test_results_are_acknowledged_only_after_flush(redis_url, redis_client, keys, tmp_path) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    tasks = [b"t%03d" % i for i in range(200)]
    q.srq.push(tasks)
    handler = Stored()
    Slave.from_config(cfg, [handler]).run(burst=True)
    assert handler.durable == set(tasks)
    assert sorted(q.nrq.pop("m", 1000)) == sorted(t.upper() for t in tasks)
    # a flush that fails turns the batches it covered into reported failures
    q.srq.push([b"lost"])
    slave = Slave.from_config(cfg, [handler])
    slave.run(burst=True)
    [err] = q.nrq.pop("m", 10)
    assert decode(err).kind == "error" and decode(err).payload == b"lost"
    assert slave.failed_batches == 1 and len(q.srq) == 0
    cfg.close()


class Outage(Stored):
    """The store is down for the first ``failures`` flushes (StoreError), then back."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def flush(self) -> None:
        with self.lock:
            if self.failures:
                self.failures -= 1
                raise StoreError("database is restarting")
            batch, self.queued = self.queued, []
        self.durable.update(batch)


@pytest.mark.slow
def test_a_store_outage_delays_the_ack_and_loses_nothing(
    redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    tasks = [b"t%03d" % i for i in range(40)]
    q.srq.push(tasks)
    handler = Outage(failures=2)
    slave = Slave.from_config(cfg, [handler])
    slave.run(burst=True)
    # every task acknowledged once, each with its result, none as an error
    assert handler.failures == 0 and handler.durable == set(tasks)
    assert sorted(q.nrq.pop("m", 1000)) == sorted(t.upper() for t in tasks)
    assert slave.failed_batches == 0 and len(q.srq) == 0
    assert redis_client.llen(processing_key(q.srq.key, slave.id)) == 0
    cfg.close()


def test_a_slave_stopping_during_an_outage_hands_its_tasks_back(
    redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    q.srq.push([b"a", b"b"])
    handler = Outage(failures=10**6)
    slave = Slave.from_config(cfg, [handler], block_timeout=0.1)
    t = threading.Thread(target=slave.run)
    t.start()
    deadline = time.monotonic() + 10
    while len(handler.queued) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    slave.stopping.set()
    t.join(timeout=20)
    assert not t.is_alive()
    # nothing acknowledged, nothing reported: on leaving, the slave handed its
    # unacknowledged tasks back to the queue for another slave
    assert q.nrq.pop("m", 10) == []
    assert redis_client.llen(processing_key(q.srq.key, slave.id)) == 0
    assert sorted(redis_client.lrange(q.srq.key, 0, -1)) == [b"a", b"b"]
    cfg.close()


class Holding(Stored):
    """Results flushed to a spool and held (:class:`~srcrawl.slave.handler.Holds`) until
    ``publish`` is set, as rows wait for their WARC object."""

    def __init__(self) -> None:
        super().__init__()
        self.spooled: list[bytes] = []
        self.publish = threading.Event()
        self.finals = 0

    def flush(self) -> None:
        with self.lock:
            batch, self.queued = self.queued, []
            self.spooled += batch

    def held(self, final: bool) -> bool:
        with self.lock:
            self.finals += final
            if not self.publish.is_set():
                return bool(self.spooled)
            self.durable.update(self.spooled)
            self.spooled = []
            return False


def test_held_results_are_acknowledged_only_once_released(
    redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    q = PhaseQueues(redis_client, keys, "index")
    tasks = [b"t%03d" % i for i in range(150)]  # more batches than the backlog of 16
    q.srq.push(tasks)
    handler = Holding()
    slave = Slave.from_config(cfg, [handler], block_timeout=0.1)
    t = threading.Thread(target=slave.run, kwargs={"burst": True})
    t.start()
    deadline = time.monotonic() + 30
    while len(handler.spooled) < len(tasks) and time.monotonic() < deadline:
        time.sleep(0.05)
    # every task handled and flushed while held (the acker kept taking batches), none
    # acknowledged: their results are not in nrq, the tasks still in processing
    assert sorted(handler.spooled) == sorted(tasks)
    assert q.nrq.pop("m", 1000) == []
    assert redis_client.llen(processing_key(q.srq.key, slave.id)) == len(tasks)
    handler.publish.set()
    t.join(timeout=30)
    assert not t.is_alive() and handler.finals >= 1  # the last flush said it was final
    assert handler.durable == set(tasks)
    assert sorted(q.nrq.pop("m", 1000)) == sorted(t.upper() for t in tasks)
    assert redis_client.llen(processing_key(q.srq.key, slave.id)) == 0


class RedisGone(Stored):
    """A flush that writes to Redis while it is gone, in a slave told to stop (until then
    the process's client waits; once stopping, a command raises instead)."""

    def flush(self) -> None:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:9. Connection refused.")


def test_a_slave_stopping_during_a_redis_outage_acknowledges_nothing_unwritten(
    redis_url, redis_client, keys, tmp_path
) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    q = PhaseQueues(redis_client, keys, "pagerank")
    q.srq.push([b"a", b"b"])
    handler = RedisGone()
    handler.phase = "pagerank"
    slave = Slave.from_config(cfg, [handler], block_timeout=0.1)
    t = threading.Thread(target=slave.run)
    t.start()
    deadline = time.monotonic() + 10
    while len(handler.queued) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    slave.stopping.set()
    t.join(timeout=20)
    assert not t.is_alive()
    # not acknowledged as failed either: the tasks go back to the queue, to be run again
    assert q.nrq.pop("m", 10) == [] and slave.failed_batches == 0
    assert sorted(redis_client.lrange(q.srq.key, 0, -1)) == [b"a", b"b"]
    cfg.close()


def test_stop_flag_ends_a_blocking_slave(redis_url, keys, tmp_path) -> None:
    cfg = make_cfg(redis_url, keys.job, tmp_path)
    slave = Slave.from_config(cfg, [Upper()], block_timeout=0.1)
    t = threading.Thread(target=slave.run)
    t.start()
    slave.stopping.set()
    t.join(timeout=10)
    assert not t.is_alive()
    cfg.close()
