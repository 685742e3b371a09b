"""Every default value srcrawl uses, in one place.

Each constant is documented where it is defined; options and environment
variables override them through :class:`srcrawl.config.Config`.
"""

DEFAULT_JOB = "default"
"""Name of the job when neither ``--job`` nor ``SRCRAWL_JOB`` is given."""

DEFAULT_HOME = ".srcrawl"
"""Directory (relative to the working directory) for the embedded Redis and SQLite."""

DEFAULT_SQLITE_NAME = "srcrawl.db"
"""File name of the SQLite store inside the home directory."""

PHASES = ("crawl", "index", "pagerank")
"""The three phases that share the srq/nrq/trq protocol."""

ENVELOPE_VERSION = 1
"""Version written into every queue message; readers reject other versions."""

DEFAULT_HEARTBEAT_TTL = 15.0
"""Seconds a worker's heartbeat lives; a worker silent this long is presumed dead."""

DEFAULT_HEARTBEAT_INTERVAL = 3.0
"""Seconds between heartbeats of a live worker (well below the TTL)."""

DEFAULT_POP_BATCH = 100
"""Messages moved from a queue per round trip by a consumer."""

DEFAULT_BLOCK_TIMEOUT = 1.0
"""Seconds a consumer blocks on an empty queue before it looks at its stop flag."""

DEFAULT_STORE_BATCH = 500
"""Rows written per transaction by batched store writers."""

REDIS_SOCKET_TIMEOUT = 30.0
"""Seconds a Redis command may take before the client gives up."""

REDIS_CONNECT_TIMEOUT = 5.0
"""Seconds to establish a Redis connection."""

LUA_UNPACK_CHUNK = 4000
"""Largest number of values passed to one Lua ``unpack`` (its C stack is ~8000)."""
