"""The master lease against a real Redis: atomic acquire, renew and release, and fencing."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis

from srcrawl.core.errors import LeaseHeld, LeaseLost
from srcrawl.core.keys import Keys
from srcrawl.queues.lease import MasterLease, holder_id

_COUNT = "redis.call('INCR', KEYS[1]) return redis.call('GET', KEYS[1]) + tonumber(ARGV[1])"


def _lease(client: redis.Redis, keys: Keys, role: str, ttl: float = 5.0) -> MasterLease:
    return MasterLease(client, keys.master_lease("crawl"), holder_id(role), ttl)


def test_one_holder_at_a_time_and_release_is_only_the_holders(redis_client, keys):
    first, second = _lease(redis_client, keys, "a"), _lease(redis_client, keys, "b")
    first.acquire()
    with pytest.raises(LeaseHeld, match="holds"):
        second.acquire(wait=0.3)
    assert not second.release()  # not second's to drop
    assert first.held()
    assert first.release()
    second.acquire()
    assert second.held() and not first.renew()


def test_a_lapsed_lease_cannot_be_renewed_over_its_successor(redis_client, keys):
    stalled = _lease(redis_client, keys, "stalled", ttl=0.2)
    stalled.acquire()
    time.sleep(0.3)
    successor = _lease(redis_client, keys, "successor")
    successor.acquire()
    assert not stalled.renew()
    with pytest.raises(LeaseLost, match="successor"):
        stalled.keep()
    assert not stalled.release()
    assert successor.held()


def test_fenced_scripts_and_transactions_change_nothing_after_the_lease_is_lost(redis_client, keys):
    counter = f"{keys.prefix}:test:counter"
    old = _lease(redis_client, keys, "old", ttl=0.2)
    old.acquire()
    count = old.script(_COUNT)
    # the script reads its own KEYS[1] and ARGV[1]: the lease's are removed first
    assert count(keys=[counter], args=[10]) == 11
    time.sleep(0.3)
    new = _lease(redis_client, keys, "new")
    new.acquire()
    with pytest.raises(LeaseLost):
        count(keys=[counter], args=[10])
    with redis_client.pipeline() as pipe, pytest.raises(LeaseLost):
        old.guard(pipe)
    assert redis_client.get(counter) == b"1"
    # other script errors pass through unchanged
    broken = new.script("return redis.call('NOSUCH')")
    with pytest.raises(redis.ResponseError):
        broken()


def test_a_transaction_fails_if_the_lease_moves_between_guard_and_exec(redis_client, keys):
    counter = f"{keys.prefix}:test:counter"
    old = _lease(redis_client, keys, "old")
    old.acquire()
    with redis_client.pipeline() as pipe:
        old.guard(pipe)
        pipe.incr(counter)
        redis_client.set(old.key, "someone else")  # taken over meanwhile
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert redis_client.get(counter) is None


def test_a_dead_local_holder_is_taken_over_at_once(redis_client, keys):
    key = keys.master_lease("index")
    code = (
        "import redis, sys\nfrom srcrawl.queues.lease import MasterLease, holder_id\n"
        f"MasterLease(redis.Redis.from_url(sys.argv[1]), {key!r}, holder_id('x'), 60).acquire()\n"
    )
    url = redis_client.connection_pool.connection_kwargs
    subprocess.run(
        [sys.executable, "-c", code, f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}"],
        check=True,
    )
    assert redis_client.pttl(key) > 30_000  # the dead holder's lease is still there
    MasterLease(redis_client, key, holder_id("y"), 5).acquire()
    assert b":y:" in redis_client.get(key)


def test_a_lease_that_lapsed_with_nobody_taking_it_is_taken_back(redis_client, keys):
    """Redis away past the TTL: the key expired with nobody else acquiring it. Its holder
    takes it back on its next renewal, fenced script or transaction."""
    counter = f"{keys.prefix}:test:counter"
    lease = _lease(redis_client, keys, "holder", ttl=5)
    lease.acquire()
    count = lease.script(_COUNT)
    redis_client.delete(lease.key)  # lapsed
    lease.keep()
    assert lease.held()
    redis_client.delete(lease.key)
    assert count(keys=[counter], args=[10]) == 11 and lease.held()
    redis_client.delete(lease.key)
    with redis_client.pipeline() as pipe:
        lease.guard(pipe)
        pipe.incr(counter)
        pipe.execute()
    assert redis_client.get(counter) == b"2" and lease.held()


def test_a_lapsed_lease_another_master_held_meanwhile_stays_lost(redis_client, keys):
    """Another master acquired it while it had lapsed, and let it go (or lost it): its
    first holder's view of the phase may be stale, so it is not taken back."""
    counter = f"{keys.prefix}:test:counter"
    first = _lease(redis_client, keys, "first", ttl=5)
    first.acquire()
    count = first.script(_COUNT)
    redis_client.delete(first.key)
    other = _lease(redis_client, keys, "other")
    other.acquire()
    assert other.release()
    with pytest.raises(LeaseLost, match="lapsed"):
        first.keep()
    with pytest.raises(LeaseLost):
        count(keys=[counter], args=[10])
    with redis_client.pipeline() as pipe, pytest.raises(LeaseLost):
        first.guard(pipe)
    assert redis_client.get(counter) is None and first.current_holder() is None


def test_a_master_of_a_crawl_that_was_reset_never_takes_its_lease_back(redis_url, keys, tmp_path):
    """`crawl reset` deletes the lease and its last acquirer: the old master's next renewal
    finds the lease lapsed and may not take it back."""
    from srcrawl.master.crawl_master import reset_crawl
    from srcrawl.settings.config import Config

    from .conftest import cli_env

    cfg = Config.load(env=cli_env(redis_url, keys.job, tmp_path))
    lease = MasterLease(cfg.redis(), cfg.keys.master_lease("crawl"), holder_id("old"), 5)
    lease.acquire()
    reset_crawl(cfg)
    with pytest.raises(LeaseLost, match="lapsed"):
        lease.keep()
    assert lease.current_holder() is None
    cfg.close()
