"""A Lua script whose call outlives a restarted Redis server.

A server keeps its scripts in memory only: one started again (from its AOF, or
a primary's replica promoted) has none. redis-py's ``Script`` loads the script
once when the server answers NOSCRIPT, then calls it again. That is not
enough while a role waits out an outage (srcrawl/core/outage.py): a call in
flight when the server dies is sent again, once the server is back, by the
client's retry policy, and that server lacks a script loaded only a moment
before. Every script of srcrawl is registered here, and is loaded again as
often as a server answers NOSCRIPT, up to :data:`SCRIPT_LOADS` times. A
NOSCRIPT reply means the script did not run, so running it again is safe.
"""

from __future__ import annotations

from typing import Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError

SCRIPT_LOADS = 5
"""Times a call loads its script again before it gives up (each after a server
without it: a restart each time)."""


class RestartSafeScript(Script):
    """redis-py's ``Script``, loaded again each time the server answers NOSCRIPT."""

    def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        for _ in range(SCRIPT_LOADS - 1):
            try:
                return super().__call__(keys, args, client)
            except NoScriptError:
                continue  # a server started again between the script's load and its call
        return super().__call__(keys, args, client)


def register_script(client: Any, source: str) -> RestartSafeScript:
    """The script ``source`` on ``client`` (a Redis or RedisCluster client), as
    ``client.register_script`` makes it, but safe across a restarted server."""
    return RestartSafeScript(client, source)
