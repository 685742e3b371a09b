"""The master lease: at most one master per phase of a job, and fencing for its commits.

A lease is one Redis string, ``Keys.master_lease(phase)``, holding the id of the
master that owns the phase, with a TTL the holder renews while it works. The
three operations are atomic: acquire is ``SET NX PX``; renew and release run
as Lua scripts that touch the key only while it still names the caller, so a
master that stalled past its TTL can neither extend nor delete its
successor's lease.

Renewing is not enough on its own: a master that was paused (SIGSTOP, a long
GC, a swapped-out VM) wakes up believing it still leads, and may commit before
its next renewal notices the loss. Every commit a master makes is therefore
*fenced*: its Lua script (``MasterLease.script``) or its transaction
(``MasterLease.guard``) first checks, in the same atomic step, that the lease
still names this master, and changes nothing if it does not. A master that
lost its lease gets ``LeaseLost`` from its next commit and stops.

A lease can also lapse with nobody taking it: Redis was away longer than its TTL
(restarted from its AOF, the key had expired meanwhile). Its holder may then take
it back (``reclaim``), but only if no other master held it in between: each
acquisition writes the acquirer's id beside the lease (``lease_acquirer_key``, no
TTL; ids are unique across processes and restarts), and a holder takes its lapsed
lease back only while that id is still its own. What it knows of the phase is then
what Redis holds, as it was when the lease lapsed. A crawl reset deletes both keys,
so a master of the crawl before it never takes a lease back.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from srcrawl.core.defaults import DEFAULT_LEASE_WAITING_RENEW, DEFAULT_LEASE_WAITING_TTL
from srcrawl.core.errors import LeaseHeld, LeaseLost
from srcrawl.core.keys import lease_acquirer_key, lease_waiting_key
from srcrawl.core.redis_script import register_script

# The error a fenced script returns; LeaseLost is raised from it.
_LOST = "SRCRAWL_LEASE_LOST"

# Prepended to every fenced script: KEYS[1] is the lease, ARGV[1] the holder.
# Both are removed from KEYS and ARGV, so the script below them reads its own
# keys and arguments from index 1 as if it were not fenced.
_FENCE = f"""
local _lease = table.remove(KEYS, 1)
local _holder = table.remove(ARGV, 1)
if redis.call('GET', _lease) ~= _holder then
  return redis.error_reply('{_LOST} ' .. _lease)
end
"""

# KEYS[1] the lease; ARGV[1] holder, ARGV[2] TTL ms. Extends the TTL only if
# ARGV[1] still holds it; returns 1 if so.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""

# KEYS[1] the lease; ARGV[1] holder. Deletes it only if ARGV[1] still holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS[1] the lease, KEYS[2] its last acquirer; ARGV[1] holder, ARGV[2] TTL ms. Takes
# the lease if nobody holds it, naming the holder its last acquirer; 1 if it did.
_ACQUIRE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
return 1
"""

# KEYS[1] the lease, KEYS[2] its last acquirer; ARGV[1] the dead holder, ARGV[2] new
# holder, ARGV[3] TTL ms. Takes the lease over from a holder known to be dead, if it
# still holds it; 1 if it did.
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""

# KEYS[1] the lease, KEYS[2] its last acquirer; ARGV[1] holder, ARGV[2] TTL ms. Takes a
# lapsed lease back if nobody acquired it since the holder did.
_RECLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
"""

log = logging.getLogger("srcrawl.lease")


def holder_id(role: str) -> str:
    """A holder id unique across processes and restarts: ``host:pid:role:ns``.

    The host and pid come first so that a master on the same host can tell a
    holder that died (``MasterLease.acquire``) from one that is merely slow.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{role}:{time.time_ns()}"


def holder_lives_here(holder: str) -> bool:
    """True if ``holder`` names a process of this host that is running."""
    pid = _local_pid(holder)
    return pid is not None and _running(pid)


def _local_pid(holder: str) -> int | None:
    """The process id ``holder`` names if it names a process of this host, else None."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    return int(pid) if host == socket.gethostname() and pid.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def mark_waiting(client: redis.Redis, lease_key: str, holder: str) -> None:
    """Say for DEFAULT_LEASE_WAITING_TTL seconds that ``holder`` (a process of this host)
    waits for the lease ``lease_key``: renewed while it waits, it makes the process
    healthy (srcrawl/app/health.py) though it holds nothing yet."""
    key = lease_waiting_key(lease_key, socket.gethostname())
    client.set(key, holder, px=int(DEFAULT_LEASE_WAITING_TTL * 1000))


def clear_waiting(client: redis.Redis, lease_key: str) -> None:
    """Take back this host's word that it waits for ``lease_key`` (:func:`mark_waiting`)."""
    client.delete(lease_waiting_key(lease_key, socket.gethostname()))


def _local_holder_is_dead(holder: str) -> bool:
    """True if ``holder`` names a process on this host that no longer exists."""
    pid = _local_pid(holder)
    return pid is not None and not _running(pid)


class FencedScript:
    """A Lua script that runs only while the lease is held (see the module doc)."""

    def __init__(self, lease: MasterLease, source: str) -> None:
        self.lease = lease
        self._script = register_script(lease.client, _FENCE + source)

    def __call__(
        self,
        keys: Sequence[Any] = (),
        args: Sequence[Any] = (),
        client: redis.Redis | redis.client.Pipeline | None = None,
    ) -> Any:
        for attempt in range(2):
            try:
                return self._script(
                    keys=[self.lease.key, *keys], args=[self.lease.holder, *args], client=client
                )
            except redis.ResponseError as exc:
                lost = self.lease.lost_error(exc)
                if lost is exc:
                    raise
                # a lease that lapsed with nobody taking it is taken back, and the
                # script run again (not in a pipeline: its reply is the pipeline's)
                if attempt or client is not None or not self.lease.reclaim():
                    raise lost from exc
        raise AssertionError("unreachable")


class MasterLease:
    """The lease of one phase's master: acquire, renew, release, fence."""

    def __init__(self, client: redis.Redis, key: str, holder: str, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError("a lease needs a positive TTL")
        self.client = client
        self.key = key
        self.holder = holder
        self.ttl_ms = max(1, int(ttl * 1000))
        self.acquirer_key = lease_acquirer_key(key)
        self.acquired = False
        """Whether this holder acquired the lease (it may then take it back, see reclaim)."""
        self._acquire = register_script(client, _ACQUIRE)
        self._renew = register_script(client, _RENEW)
        self._release = register_script(client, _RELEASE)
        self._take_over = register_script(client, _TAKE_OVER)
        self._reclaim = register_script(client, _RECLAIM)

    # -- owning it ----------------------------------------------------------
    def current_holder(self) -> str | None:
        value = self.client.get(self.key)
        return value.decode() if value is not None else None

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it, or if its holder died on this host."""
        keys = [self.key, self.acquirer_key]
        taken = bool(self._acquire(keys=keys, args=[self.holder, self.ttl_ms]))
        if not taken:
            holder = self.current_holder()
            if holder is not None and _local_holder_is_dead(holder):
                args = [holder, self.holder, self.ttl_ms]
                taken = bool(self._take_over(keys=keys, args=args))
        self.acquired = self.acquired or taken
        return taken

    def acquire(
        self,
        wait: float = 0.0,
        *,
        what: str = "master",
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        """Take the lease, waiting up to ``wait`` seconds for its holder to let go.

        A holder on another host that died keeps the lease until its TTL
        lapses, so a successor that should take over waits at least that long.
        Raises ``LeaseHeld`` naming the holder if the lease is still taken.
        """
        deadline = time.monotonic() + wait
        said = 0.0
        while not self.try_acquire():
            if time.monotonic() >= deadline or (stopping is not None and stopping()):
                raise LeaseHeld(f"another {what} ({self.current_holder() or '?'}) holds {self.key}")
            if time.monotonic() - said >= DEFAULT_LEASE_WAITING_RENEW:
                mark_waiting(self.client, self.key, self.holder)  # a standby, healthy
                said = time.monotonic()
            time.sleep(0.2)
        if said:
            clear_waiting(self.client, self.key)

    def renew(self) -> bool:
        """Extend the TTL; False if the lease is no longer ours (it lapsed or was taken)."""
        return bool(self._renew(keys=[self.key], args=[self.holder, self.ttl_ms]))

    def keep(self) -> None:
        """Renew (or take back a lease that lapsed with nobody taking it, see
        :meth:`reclaim`), or raise ``LeaseLost`` if the lease is gone."""
        if not self.renew() and not self.reclaim():
            raise LeaseLost(self._lost_message())

    def reclaim(self) -> bool:
        """Take back this holder's lease if it lapsed and no other master acquired it
        since (this holder is still its last acquirer); whether it did. A lease lapses
        so when Redis is away longer than its TTL."""
        if not self.acquired:
            return False
        keys, args = [self.key, self.acquirer_key], [self.holder, self.ttl_ms]
        if not self._reclaim(keys=keys, args=args):
            return False
        log.warning(
            "the lease %s lapsed with nobody taking it (Redis away longer than its TTL?); "
            "this master (%s) took it back",
            self.key,
            self.holder,
        )
        return True

    def release(self) -> bool:
        """Let the lease go if it is still ours; True if it was."""
        return bool(self._release(keys=[self.key], args=[self.holder]))

    def held(self) -> bool:
        return self.current_holder() == self.holder

    # -- fencing ------------------------------------------------------------
    def script(self, source: str) -> FencedScript:
        """Register ``source`` as a fenced script: it runs only while we hold the lease.

        Call it with the script's own keys and arguments; the lease key and the
        holder are passed first and removed before ``source`` runs.
        """
        return FencedScript(self, source)

    def guard(self, pipe: redis.client.Pipeline) -> None:
        """Fence a WATCH/MULTI transaction: call first, queue commands, then ``execute``.

        WATCHes the lease, checks it is ours and starts MULTI; if the lease
        changes before EXEC, the transaction fails with ``redis.WatchError``
        (call ``lost_error`` or retry) and nothing is written.
        """
        pipe.watch(self.key)
        value = pipe.get(self.key)
        if value is None and self.reclaim():  # lapsed, taken back: watched again
            pipe.unwatch()
            pipe.watch(self.key)
            value = pipe.get(self.key)
        if value is None or value.decode() != self.holder:
            pipe.reset()
            raise LeaseLost(self._lost_message())
        pipe.multi()

    def lost_error(self, exc: redis.ResponseError) -> Exception:
        """``LeaseLost`` if ``exc`` is a fenced script's refusal, else ``exc`` itself."""
        if str(exc).startswith(_LOST):
            return LeaseLost(self._lost_message())
        return exc

    def _lost_message(self) -> str:
        now = self.current_holder()
        taken = f"; {now} holds it now" if now else "; it lapsed"
        return f"this master ({self.holder}) lost its lease {self.key}{taken}"
