"""Waiting out a Redis outage: every command is tried again, with back-off, until Redis answers.

The long-running roles (master, slaves) and a local run's progress polling
give their Redis client a :class:`RedisOutage` as its redis-py retry
policy, so every command — a pop, an ack, a heartbeat, a Lua script — waits
for Redis to come back instead of raising. The process says once that
Redis went away and once that it is back, whatever number of threads or
commands were waiting. Retrying a command is what redis-py already does on
a dropped connection; the acks and frontier commits are written to be safe
to repeat.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError
from redis.retry import Retry

from srcrawl.core.defaults import REDIS_OUTAGE_FIRST_WAIT, REDIS_OUTAGE_MAX_WAIT
from srcrawl.core.redis_connect import is_cluster

T = TypeVar("T")

REDIS_DOWN = (
    redis.ConnectionError,
    redis.TimeoutError,
    socket.timeout,
    ConnectionError,
    # a cluster between a primary's death and its replica's promotion
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,
)
"""What a Redis client raises when the server cannot be reached (or is still loading)."""


class RedisOutage(Retry):
    """A redis-py retry policy that waits for Redis for as long as it takes.

    ``stopping``: once set, a command that fails raises instead of waiting
    (a process asked to stop does not wait for a Redis that may never come
    back). ``on_failure``: called after each failed attempt (the local run
    restarts its embedded server there).
    """

    def __init__(
        self,
        log: logging.Logger,
        *,
        stopping: threading.Event | None = None,
        on_failure: Callable[[], None] | None = None,
        first_wait: float = REDIS_OUTAGE_FIRST_WAIT,
        max_wait: float = REDIS_OUTAGE_MAX_WAIT,
    ) -> None:
        super().__init__(ExponentialBackoff(cap=max_wait, base=first_wait), -1, REDIS_DOWN)
        self.log = log
        self.stopping = stopping
        self.on_failure = on_failure
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self.comebacks = 0
        """Times Redis came back after an outage (a restarted server may have lost what it
        kept out of its AOF: PageRank's shards and rank pieces)."""

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__

    def __deepcopy__(self, memo: dict) -> RedisOutage:
        return self  # one policy per process: its connections share the outage's state

    @property
    def down(self) -> bool:
        """True while Redis is known to be unreachable."""
        return self._down_since is not None

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        failures = 0
        while True:
            try:
                result = do()
            except REDIS_DOWN as error:
                if is_retryable and not is_retryable(error):
                    raise
                failures += 1
                if with_failure_count:
                    fail(error, failures)
                else:
                    fail(error)
                self._went_away(error)
                if self.stopping is not None and self.stopping.is_set():
                    raise
                if self.on_failure is not None:
                    self.on_failure()
                pause = self._backoff.compute(failures - 1)
                if self.stopping is not None:
                    self.stopping.wait(pause)
                else:
                    time.sleep(pause)
                continue
            except redis.ResponseError:
                # an error reply is a reply: a restarted server that lacks the call's
                # script (NOSCRIPT) is back too; redis-py loads the script and calls
                # again, and that call, which never failed, would not say so
                if failures and self._down_since is not None:
                    self._came_back()
                raise
            # only a call that failed and then got through proves Redis is back
            # (a connect() on a socket not yet found dead "succeeds" without a word)
            if failures and self._down_since is not None:
                self._came_back()
            return result

    def _went_away(self, error: Exception) -> None:
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
                reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                self.log.warning("Redis is unreachable (%s); waiting for it to come back", reason)

    def _came_back(self) -> None:
        with self._lock:
            if self._down_since is not None:
                self.log.warning("Redis is back after %.1f s", time.monotonic() - self._down_since)
                self._down_since = None
                self.comebacks += 1


def wait_out_outages(client: redis.Redis, policy: RedisOutage) -> RedisOutage:
    """Give ``client`` (and its open connections) ``policy``; return it."""
    if is_cluster(client):  # its retry is a count: see srcrawl/core/redis_connect.py
        client.outage = policy
    else:
        client.set_retry(policy)
    return policy


def master_waits_out(
    client: redis.Redis,
    log: logging.Logger,
    stopping: threading.Event | None = None,
    *,
    on_failure: Callable[[], None] | None = None,
) -> RedisOutage:
    """Have a phase master's Redis client wait out outages (one line when Redis goes, one
    when it is back; with ``stopping`` set, a command fails instead of waiting). The crawl,
    index and PageRank masters and the local runner all call it on the client they share
    in a process: a policy the client has already is kept, and learns what it lacks
    (``stopping`` from a master, ``on_failure`` from the runner, which restarts the
    embedded server there). Returns the policy in force."""
    current = getattr(client, "outage", None) if is_cluster(client) else client.get_retry()
    if isinstance(current, RedisOutage):
        current.stopping = current.stopping or stopping
        current.on_failure = current.on_failure or on_failure
        return current
    return wait_out_outages(client, RedisOutage(log, stopping=stopping, on_failure=on_failure))
