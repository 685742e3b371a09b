"""A Redis client for a URL: one server (``redis://``, ``rediss://``, ``unix://``)
or a Redis Cluster (``redis+cluster://host:port,host:port``).

Every key of a job carries the hash tag ``{JOB}``, so on a cluster a job's
keys share one slot and every script, transaction and pipeline of srcrawl
runs on one node, as it does on one server; redis-py's ``RedisCluster``
follows the slot when the cluster moves it or promotes a replica.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import redis
    from redis.cluster import RedisCluster

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""A cluster scheme and the scheme of one of its nodes."""


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def cluster_nodes(url: str) -> tuple[list[tuple[str, int]], str]:
    """The ``(host, port)`` startup nodes of a cluster URL, and a one-node URL
    carrying its credentials and options. Raises ValueError on a bad node."""
    parts = urlsplit(url)
    auth, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad cluster node {item!r} (expected host:port)")
        nodes.append((host, int(port)))
    first = f"[{nodes[0][0]}]" if ":" in nodes[0][0] else nodes[0][0]
    netloc = f"{auth}@{first}:{nodes[0][1]}" if auth else f"{first}:{nodes[0][1]}"
    query = f"?{parts.query}" if parts.query else ""
    return nodes, f"{CLUSTER_SCHEMES[parts.scheme]}://{netloc}/0{query}"


def connect(url: str, **options: Any) -> redis.Redis | RedisCluster:
    """A client of ``url`` with ``options`` (timeouts, health checks) for each connection."""
    import redis

    if not is_cluster_url(url):
        return redis.Redis.from_url(url, **options)
    from redis.cluster import ClusterNode
    from redis.connection import SSLConnection, parse_url

    nodes, one = cluster_nodes(url)
    kwargs = parse_url(one)
    for key in ("host", "port", "db"):
        kwargs.pop(key, None)
    if kwargs.pop("connection_class", None) is SSLConnection:
        kwargs["ssl"] = True
    return _cluster_class()(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes], **kwargs, **options
    )


_UNREACHABLE = "Redis Cluster cannot be connected"


def _cluster_class() -> type:
    from redis.cluster import RedisCluster
    from redis.exceptions import ConnectionError, RedisClusterException

    class Cluster(RedisCluster):
        """A RedisCluster that waits out outages like srcrawl's single-server clients.

        redis-py's cluster retry policy is a count (it reloads the slot map
        between tries, which is how a promoted replica is found), so an
        unbounded policy cannot be set as its retry; ``outage`` (a
        RedisOutage) wraps each command instead and waits once the cluster's
        own tries are spent.
        """

        outage: Any = None

        def execute_command(self, *args: Any, **kwargs: Any) -> Any:
            if self.outage is None:
                return super().execute_command(*args, **kwargs)
            return self.outage.call_with_retry(lambda: self._once(args, kwargs), lambda _e: None)

        def _once(self, args: tuple, kwargs: dict) -> Any:
            return _reachable(lambda: super(Cluster, self).execute_command(*args, **kwargs))

        def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
            """A pipeline; one without a transaction waits out outages as commands do
            (a transaction's caller retries it: its WATCH must be taken again)."""
            pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
            if self.outage is not None and not transaction:
                _wait_out_pipeline(pipe, self.outage)
            return pipe

    def _reachable(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except RedisClusterException as e:  # no node answered: an outage, not a bug
            if str(e).startswith(_UNREACHABLE):
                raise ConnectionError(str(e)) from e
            raise

    def _wait_out_pipeline(pipe: Any, outage: Any) -> None:
        run = pipe.execute
        strategy = getattr(pipe, "_execution_strategy", pipe)

        def execute(raise_on_error: bool = True) -> Any:
            queued = list(strategy.command_queue)  # execute() empties it, even when it fails

            def once() -> Any:
                strategy.command_queue = list(queued)
                return _reachable(lambda: run(raise_on_error))

            return outage.call_with_retry(once, lambda _e: None)

        pipe.execute = execute

    return Cluster


def is_cluster(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster (and so takes ``outage``, not a retry)."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster) and hasattr(client, "outage")
