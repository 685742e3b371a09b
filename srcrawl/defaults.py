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

# -- crawl -------------------------------------------------------------------

DEFAULT_BLOOM_ERROR_RATE = 1e-6
"""False-positive rate of the seen test's Bloom filter."""

DEFAULT_BLOOM_CAPACITY = 1_000_000
"""URLs the first Bloom filter slice holds before the scalable filter grows."""

DEFAULT_SEEN_CACHE = 50_000
"""Entries of the cache in front of the Bloom filter (seed 004: ~80% hits at 50k)."""

DEFAULT_SNAPSHOT_EVERY = 50_000
"""New URLs between two snapshots of the seen set (the journal covers the rest)."""

DEFAULT_DELAY = 1.0
"""min_delay: seconds between the end of one request to a host and the start of the next."""

DEFAULT_DELAY_FACTOR = 2.0
"""The next request to a host waits factor × the last fetch time (clamped)."""

DEFAULT_MAX_DELAY = 30.0
"""max_delay: the politeness wait never exceeds this (robots Crawl-delay aside)."""

DEFAULT_MAX_CRAWL_DELAY = 60.0
"""Largest robots.txt Crawl-delay honoured; longer ones are capped."""

DEFAULT_MAX_DEPTH = 3
"""Link hops from the seeds a crawl follows when --depth is not given."""

DEFAULT_MAX_URL_LENGTH = 1024
"""Canonical URLs longer than this are dropped as likely traps."""

DEFAULT_MAX_REPEATED_SEGMENTS = 3
"""A path with one segment more often than this (/a/a/a/a) is a trap."""

DEFAULT_HASH_BUCKETS = 64
"""Queues of the `hash` assignment policy."""

DEFAULT_ROBOTS_TRIES = 5
"""Deferrals (robots.txt 5xx or unreachable) before a URL is given up."""

DEFAULT_FETCH_THREADS = 8
"""Fetch threads per crawl slave."""

DEFAULT_MASTER_BATCH = 500
"""nrq messages the master takes per round trip."""

# -- pagerank ------------------------------------------------------------------

DEFAULT_PAGERANK_ITERATIONS = 30
"""Iterations `srcrawl pagerank` runs unless --tol stops it sooner."""

DEFAULT_PAGERANK_DAMPING = 0.85
"""Probability of following a link rather than teleporting to a random page."""

DEFAULT_PAGERANK_TOL = 0.0
"""Stop once the L1 change of an iteration falls below this; 0 runs every iteration."""

DEFAULT_PAGERANK_SLAVES = 2
"""Local slave processes `srcrawl pagerank` starts (0: rely on slaves started elsewhere)."""

DEFAULT_PAGERANK_SHARD_EDGES = 1_000_000
"""Edges per graph shard (one map task per shard and iteration)."""

DEFAULT_PAGERANK_REAP_INTERVAL = 1.0
"""Seconds between two looks for dead slaves while the master waits for partial sums."""

DEFAULT_PAGERANK_KEY_TTL = 86_400
"""Seconds the shards and rank vector of a graph live in Redis if their master dies."""

DEFAULT_STORE_BULK_BATCH = 50_000
"""Rows per transaction batch while a store is in bulk-load mode (pages; links ×10)."""
