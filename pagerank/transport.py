"""Writing the large values of a run (shards, rank vectors) to Redis.

Two costs grow with the bytes written, and both are avoided here:

- the copy on the way out: with hiredis installed, redis-py's default
  serializer copies every argument of a command into one buffer (about
  1 ms per MB); the pure-Python serializer of :func:`bulk_client` hands large
  values to the socket as they are;
- the append-only file: written to it, a run of a 1M-page graph would add
  8 MB per iteration and keep Redis rewriting the file (a fork and a full
  dump every few seconds). :class:`TransientWriter` writes through scripts
  that turn replication off, so these values never reach the AOF or
  replicas. A script pays about 2 ms per MB to take its argument, less than
  the AOF costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from srcrawl.core.redis_script import register_script

try:  # redis-py internals: without them, the ordinary client still works, a little slower
    from redis.connection import Encoder, PythonRespSerializer
except ImportError:  # pragma: no cover - depends on the installed redis-py
    Encoder = PythonRespSerializer = None  # type: ignore[assignment,misc]

_BUFFER_CUTOFF = 6000
"""Arguments longer than this go to the socket uncopied (redis-py's own cutoff)."""


def bulk_client(client: redis.Redis) -> redis.Redis:
    """A client of the server ``client`` talks to, with the copy-free serializer."""
    if PythonRespSerializer is None or not hasattr(client, "connection_pool"):
        return client  # a cluster client has a pool per node: it keeps its own serializer
    kwargs = dict(client.connection_pool.connection_kwargs)
    encoder = Encoder(
        kwargs.get("encoding", "utf-8"),
        kwargs.get("encoding_errors", "strict"),
        kwargs.get("decode_responses", False),
    )
    kwargs["command_packer"] = PythonRespSerializer(_BUFFER_CUTOFF, encoder.encode)
    pool = redis.ConnectionPool(connection_class=client.connection_pool.connection_class, **kwargs)
    return redis.Redis(connection_pool=pool)


# KEYS[1] the key; ARGV[1] the value, ARGV[2] its time to live in seconds.
# Sets the key without propagating the write to the AOF or replicas; returns 1.
_SET_UNLOGGED = """
redis.set_repl(redis.REPL_NONE)
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""

# KEYS[1] the key; ARGV[1] its time to live in seconds, ARGV[2…] the values.
# Replaces the key by a list of the values, without propagating the write to the
# AOF or replicas; returns 1. One RPUSH per value: a shard has a handful.
_LIST_UNLOGGED = """
redis.set_repl(redis.REPL_NONE)
redis.call('DEL', KEYS[1])
for i = 2, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# KEYS[1] the key, KEYS[2] a guard key; ARGV[1] the value, ARGV[2] its time to
# live in seconds. If the guard key exists, sets the key without propagating the
# write to the AOF or replicas and returns 1; otherwise writes nothing, returns 0.
_SET_GUARDED = """
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.set_repl(redis.REPL_NONE)
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""


class TransientWriter:
    """Writes values that live for one run and are never persisted.

    A run's shards and rank vectors are derived from the store; written to
    the append-only file they would add megabytes per iteration and keep
    Redis rewriting the file (a fork and a full dump each time). Scripts
    that turn replication off keep them out of the AOF and replicas. If
    Redis restarts mid-run they are gone; the master notices (or the slaves
    report them missing) and starts the run again (pagerank/master.py).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.parent = client
        self.client = bulk_client(client)
        self.own_pool = self.client is not client
        self._set = register_script(self.client, _SET_UNLOGGED)
        self._set_guarded = register_script(self.client, _SET_GUARDED)
        self._list = register_script(self.client, _LIST_UNLOGGED)

    def _follow(self) -> None:
        """Retry as the client this writer was made from does, whenever it was given its
        policy: a slave's handler (and so its writer) exists before the slave runtime
        makes the process's client wait out Redis outages, and a write left with the
        copied default policy would fail the task at the first outage."""
        if self.own_pool:
            policy = self.parent.get_retry()
            if policy is not None and self.client.get_retry() is not policy:
                self.client.set_retry(policy)

    def set(self, key: str, value: bytes | memoryview, ttl: int) -> None:
        self._follow()
        self._set(keys=[key], args=[value, ttl])

    def set_list(self, key: str, values: Sequence[bytes | memoryview], ttl: int) -> None:
        """Make ``key`` the list of ``values`` (read back with one LRANGE)."""
        self._follow()
        self._list(keys=[key], args=[ttl, *values])

    def set_while(self, key: str, value: bytes | memoryview, ttl: int, guard: str) -> bool:
        """Set ``key`` if ``guard`` exists; whether it did.

        The check and the write are one atomic step: once ``guard`` is deleted,
        no late writer can create ``key`` any more.
        """
        self._follow()
        return bool(self._set_guarded(keys=[key, guard], args=[value, ttl]))

    def close(self) -> None:
        """Close this writer's connections. The pool :func:`bulk_client` made is this
        writer's own, and redis-py closes a pool given to a client only when asked: left
        open, a ``pagerank --every`` holds a run's sockets until the garbage collector
        finds them (open files climbing run after run)."""
        self.client.close()
        if self.own_pool:
            self.client.connection_pool.disconnect()
