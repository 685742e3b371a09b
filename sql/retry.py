"""How a store transaction that failed for a passing reason is run again.

A MySQL/MariaDB server fails a transaction now and then for reasons that pass:
a deadlock (1213), a lock wait timeout (1205), a snapshot conflict (1020,
``Record has changed since last read``: MariaDB 11.8 turns
``innodb_snapshot_isolation`` on by default), a connection lost or killed
(2006, 2013). The transaction is the unit: it is rolled back and run again
whole, from its first statement, after a jittered exponential wait, a bounded
number of times. Every write of the store is idempotent as a transaction
(upserts, INSERT-or-ignore, replace-by-delete), so a transaction whose COMMIT
reached the server before the connection broke, run again, doubles nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from srcrawl.core.defaults import (
    DEFAULT_MAX_STORE_RETRY_DELAY,
    DEFAULT_STORE_RETRY_DELAY,
    DEFAULT_STORE_TRIES,
)

TRANSIENT_MYSQL_ERRORS = frozenset({1020, 1205, 1213, 1927, 2006, 2013, 2055, 4031})
"""MySQL/MariaDB error numbers after which a transaction is run again: 1020 snapshot
conflict, 1205 lock wait timeout, 1213 deadlock, 1927 connection killed (MariaDB), 2006
server gone away, 2013 connection lost during a query, 2055 connection lost (TLS or
socket error), 4031 disconnected for inactivity (MySQL 8)."""

LOST_CONNECTION_ERRORS = frozenset({1927, 2006, 2013, 2055, 4031})
"""Of those, the errors after which the connection is opened again."""


@dataclass(frozen=True)
class Backoff:
    """How often and after how long a failed transaction is run again."""

    tries: int = DEFAULT_STORE_TRIES
    delay: float = DEFAULT_STORE_RETRY_DELAY
    max_delay: float = DEFAULT_MAX_STORE_RETRY_DELAY

    def wait(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th run failed: doubling from ``delay`` up to
        ``max_delay``, each drawn from its upper half, so processes that collided once do
        not collide again in lockstep."""
        ceiling = min(self.max_delay, self.delay * 2 ** (failed - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)
