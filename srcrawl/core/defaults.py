"""Every default value srcrawl uses, in one place.

Each constant is documented where it is defined; options and environment
variables override them through :class:`srcrawl.settings.config.Config`.
"""

from srcrawl import __version__

DEFAULT_JOB = "default"
"""Name of the job when neither ``--job`` nor ``SRCRAWL_JOB`` is given."""

DEFAULT_HOME = ".srcrawl"
"""Directory (relative to the working directory) for the embedded Redis and SQLite."""

DEFAULT_SQLITE_NAME = "srcrawl.db"
"""File name of the SQLite store inside the home directory."""

DEFAULT_WARC_DIR_NAME = "warc"
DEFAULT_INDEX_DIR_NAME = "index"
"""Under the home: ``index/<job>``, a job's Tantivy index directory."""
"""Directory of the WARC files inside the home directory (``SRCRAWL_WARC_DIR`` moves it)."""

DEFAULT_WARC_MAX_BYTES = 1_000_000_000
"""Bytes after which a slave closes its WARC file and starts the next (``--warc-max-bytes``)."""

DEFAULT_WARC_SPOOL_DIR_NAME = "warc-spool"
"""Under the home: the files a slave writes before it publishes each as one object, when the
WARC location is an object store (``SRCRAWL_WARC_DIR=s3://BUCKET/PREFIX``)."""

WARC_OBJECT_MAX_BYTES = 4 << 20
"""Bytes after which a slave publishes its spool file as one object (when the crawl's
``--warc-max-bytes`` is not smaller): a few MB keep a PUT short and a slave's rows waiting
a few seconds at most."""

WARC_OBJECT_MAX_AGE = 5.0
"""Seconds after which a spool file with records is published however small: the rows of
its pages (and the acknowledgement of their tasks) wait that long at most."""

WARC_OBJECT_CACHE_BYTES = 64 << 20
"""Bytes of object blocks a reader keeps (an LRU), so that a page's records read one after
the other (its body, then its text) cost one ranged GET."""

BODY_STORES = ("warc", "sql")
"""Where a crawl keeps the pages' bodies (``--body-store``): WARC files beside the store, or
compressed in the store's pages table (as before schema 6)."""

PHASES = ("crawl", "index", "pagerank")
"""The three phases that share the srq/nrq/trq protocol."""

ENVELOPE_VERSION = 1
"""Version written into every queue message; readers reject other versions."""

DEFAULT_HEARTBEAT_TTL = 15.0
"""Seconds a worker's heartbeat lives; a worker silent this long is presumed dead."""

DEFAULT_HEARTBEAT_INTERVAL = 3.0
"""Seconds between heartbeats of a live worker (well below the TTL)."""

STORE_ERROR_FRESH = 300.0
"""Seconds a slave's failed store write keeps `srcrawl health slave` failing when no
write has succeeded since: a slave with work retries within seconds (and clears it),
an idle one never writes again, and then the check's own store probe speaks."""

DEFAULT_MASTER_LEASE_TTL = 15.0
"""Seconds a phase master's lease lives unrenewed; a master silent this long loses the phase to
a successor, and every commit it tries after that is refused (``queues/lease.py``)."""

DEFAULT_LEASE_WAITING_TTL = 30.0
"""Seconds a process's word that it waits for a phase's lease lives unrenewed (renewed
every few seconds while it waits): `srcrawl health` of a master, indexer or ranker that
holds no lease is healthy only while it is there."""

DEFAULT_LEASE_WAITING_RENEW = 5.0
"""Seconds between renewals of that word by a process that waits (well below its TTL)."""

DEFAULT_BLOCK_TIMEOUT = 0.25
"""Seconds a consumer blocks on an empty queue before it looks at its stop flag (how long a
stopped slave may take to leave; an idle slave costs Redis one call per this)."""

DEFAULT_STORE_BATCH = 500
"""Rows written per transaction by batched store writers."""

DEFAULT_STORE_TRIES = 10
"""Times a store transaction is run before a passing server error (a deadlock, a snapshot
conflict, a lock wait timeout, a lost connection) is given up on (``sql/retry.py``)."""

DEFAULT_STORE_RETRY_DELAY = 0.05
"""Seconds before a transaction's second run; doubled for each run after, with jitter."""

DEFAULT_MAX_STORE_RETRY_DELAY = 5.0
"""The wait before a transaction is run again never exceeds this: ten runs wait at most
16 s in all (8 s at least), enough for a burst of deadlocks at start-up or a failover."""

DEFAULT_SCHEMA_LOCK_TIMEOUT = 600.0
"""Seconds a process waits for another one that creates or migrates the schema (MySQL's
``GET_LOCK``): a migration of a large store rewrites tables."""

REDIS_SOCKET_TIMEOUT = 30.0
"""Seconds a Redis command may take before the client gives up."""

REDIS_CONNECT_TIMEOUT = 5.0
"""Seconds to establish a Redis connection."""

LUA_UNPACK_CHUNK = 4000
"""Largest number of values passed to one Lua ``unpack`` (its C stack is ~8000)."""

DEFAULT_MYSQL_TLS_MODE = "verify_identity"
"""TLS of a ``mysql://`` URL that names a CA or client certificate but no ``ssl_mode``:
required, with the server's certificate and host name checked."""

REDIS_OUTAGE_FIRST_WAIT = 0.1
"""Seconds a process waits after Redis first fails to answer before it asks again."""

REDIS_OUTAGE_MAX_WAIT = 10.0
"""Longest wait between two attempts to reach a Redis that is down (the back-off's cap)."""

CHILD_STOP_TIMEOUT = 20.0
"""Seconds a local run gives its master and slaves to finish their batch after SIGTERM."""

# -- crawl -------------------------------------------------------------------

DEFAULT_BLOOM_ERROR_RATE = 1e-6
"""False-positive rate of the seen test's Bloom filter."""

DEFAULT_BLOOM_CAPACITY = 1_000_000
"""URLs the first Bloom filter slice holds before the scalable filter grows."""

DEFAULT_SEEN_CACHE = 50_000
"""Entries of the cache in front of the Bloom filter ([URL caching]: ~80% hits at 50k)."""

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
MAX_PARTITIONS = 1024
"""Most partitions of a crawl's frontier (--partitions): each is a lease and a loop."""
PARTITION_POLL = 0.1
"""Seconds a slave of a partitioned crawl blocks on one partition's srq before it looks
at the others again (Redis Cluster has no blocking pop across slots)."""
PARTITION_REFRESH = 2.0
"""Seconds between an idle slave's looks at how many partitions the crawl has."""
BALANCE_RATIO = 2.0
"""A master hands partitions to the least loaded other when its queued URLs are more than
this many times the other's (the thesis's threshold a)."""
BALANCE_MIN_LOAD = 1000
"""Below this many queued URLs in all, masters share partitions by count, not by load."""
BALANCE_SUSTAIN = 30.0
"""Seconds the loads must call for a move on end before a master hands partitions over."""
BALANCE_COOLDOWN = 10.0
"""Seconds after a master hands partitions over before it moves any again (loads settle)."""
MASTER_REGISTRATION_TTL = 10.0
"""Seconds a crawl master's registration lasts unless renewed: the masters that count
when each works out its fair share of a partitioned crawl."""
"""Queues of the `hash` assignment policy."""

QUEUES_PER_LIMIT = 4
"""Frontier queues per request a host may have in flight (``--per-host N`` > 1: 4N queues).
A depth level lasts at least as long as its longest queue takes one URL at a time: spread
over more queues than its limit, a host's longest queue is shorter, and whichever of its
queues are longest fill the N slots as they come free."""

HOST_TASKS_OUT = 2
"""Tasks of a host allowed N requests in flight (N > 1) that the master hands out at once:
HOST_TASKS_OUT × N. The slaves hold the N themselves (slave/host_slots.py), so when a
request ends the host's next task is already with a slave or in srq, not behind the
master's commit and schedule (20-40 ms of every slot's cycle otherwise)."""

HOST_SLOT_RETRY = 0.005
"""Seconds between a slave's tries for a host slot while tasks of the host wait in it and
none of its own requests to the host ends (a slot another slave frees says nothing)."""

HOST_SLOT_RETRY_MAX = 0.04
"""The longest wait between a slave's tries for a host slot: the retry wait doubles up to it
while tries find none and none of the slave's own requests ends."""

HOST_SLOT_MARGIN = 10.0
"""Seconds past the fetch deadline after which a request's host slot is free whatever
became of it: a slave killed mid-request holds its slots no longer."""

DEFAULT_ROBOTS_TRIES = 5
"""Deferrals (robots.txt 5xx or unreachable) before a URL is given up."""

DEFAULT_ROBOTS_TRIES_UNREACHABLE = 2
"""Deferrals before a URL is given up when its host could not be connected to at all (no
server, unknown name): one more try after --robots-defer, as such a host is most often a
mistyped or stopped seed."""

DEFAULT_FETCH_THREADS = 32
"""Fetches a crawl slave keeps in flight at once (``--threads``; one thread drives them all)."""

DEFAULT_NO_SLAVE_WARNING = 30.0
"""Seconds without a live crawl slave after which the master says that nothing fetches."""

DEFAULT_DEFERRED_END_WAIT = 5.0
"""Seconds away the next try of every host deferred by robots.txt must be for a one-shot
`srcrawl crawl` with nothing else left to end rather than wait (--resume tries them again)."""

DEFAULT_LAG_AFTER = 1.0
"""Seconds a host's robots.txt deferral must last for the depth levels to stop waiting for it
(shorter waits keep the level barrier: they cost little, and the depths need no bookkeeping)."""

DEFAULT_FETCH_TRIES = 3
"""Fetches of a URL whose fetch failed for a passing reason (timeout, broken connection, cut-off
body, 5xx, 429) before it is stored as failed (``--fetch-tries``)."""

DEFAULT_RETRY_BACKOFF = 2.0
"""Seconds a URL waits before its second try (``--retry-backoff``); doubled for each try after."""

DEFAULT_MAX_RETRY_BACKOFF = 60.0
"""The wait before a retry never exceeds this, a server's Retry-After included."""

# -- recrawl: when a stored page is fetched again ------------------------------------

DEFAULT_REVISIT = 86_400.0
"""Seconds from a page's first fetch to its second (``--revisit``, 1d)."""

DEFAULT_MIN_REVISIT = 60.0
"""The adaptive interval never goes below this (``--min-revisit``; Nutch's default, 1m)."""

DEFAULT_MAX_REVISIT = 30 * 86_400.0
"""…nor above this (``--max-revisit``, 30d); a page that went away is retried at it."""

DEFAULT_REVISIT_INC_RATE = 0.4
"""An unchanged page's interval grows by this share (Nutch AdaptiveFetchSchedule inc_rate)."""

DEFAULT_REVISIT_DEC_RATE = 0.2
"""A changed page's interval shrinks by this share (Nutch AdaptiveFetchSchedule dec_rate)."""

DEFAULT_REVISIT_POLICIES = ("adaptive", "nutch", "uniform")
"""``--revisit-policy``: each page's interval from its estimated change rate, Nutch's
AdaptiveFetchSchedule steps, or every page at ``--revisit``."""

DEFAULT_REVISIT_FETCH_VALUE = 0.1
"""The adaptive policy's worth of one fetch, in seconds of one page's freshness, as a share of
``--revisit``: a page changing faster than 1 / (this × --revisit) is given up
(queues/change_rate.py explains the choice)."""

DEFAULT_RECRAWL_BATCH = 1000
"""Due pages the master moves into their host queues per scheduling step."""

# -- crawl slave: fetch, decode, parse, robots.txt ---------------------------------

DEFAULT_USER_AGENT = f"srcrawl/{__version__} (+https://github.com/srcrawl/srcrawl)"
"""User-Agent of every request (``--user-agent``, ``SRCRAWL_USER_AGENT``): the crawler's
name and where to learn about it. Its product token (``srcrawl``, before the first '/')
is what robots.txt groups are matched against. An operator crawling other people's
sites names their own crawler and a contact instead."""

DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to open a TCP (and TLS) connection to a host."""

DEFAULT_READ_TIMEOUT = 10.0
"""Seconds a fetch waits for the next bytes of a response."""

DEFAULT_FETCH_DEADLINE = 30.0
"""Seconds a whole fetch may take: a server that drips bytes cannot hold a thread longer."""

DEFAULT_FETCH_HOST_POOLS = 512
"""Hosts whose idle keep-alive connections a slave keeps (least recently used go first)."""

DEFAULT_MAX_PAGE_BYTES = 2 * 1024 * 1024
"""Bytes of a response body kept (after decompression); the rest is not read."""

DEFAULT_CHARSET_PRESCAN_BYTES = 4096
"""Bytes at the start of a page searched for `<meta charset>` when HTTP names none."""

DEFAULT_CHARSET_DETECT_BYTES = 65536
"""Bytes of a page without any declared charset given to the charset detector."""

DEFAULT_ROBOTS_TTL = 3600.0
"""Seconds a fetched robots.txt (or an allow-all after a 4xx) stays in the shared cache."""

DEFAULT_ROBOTS_DEFER = 60.0
"""Seconds a host waits after its robots.txt answered 5xx or could not be reached."""

DEFAULT_ROBOTS_MAX_BYTES = 500 * 1024
"""Bytes of a robots.txt that are parsed (RFC 9309 asks for at least 500 KiB)."""

DEFAULT_ROBOTS_MAX_REDIRECTS = 5
"""Redirects of a robots.txt followed (RFC 9309); more count as no robots.txt."""

DEFAULT_ROBOTS_LOCAL_TTL = 30.0
"""Seconds a slave answers a host's robots rules from its own copy before reading Redis again."""

DEFAULT_ROBOTS_MEMO = 1024
"""Parsed robots.txt rule sets a slave process keeps in memory, by body hash (and hosts whose
rules it keeps for DEFAULT_ROBOTS_LOCAL_TTL)."""

DEFAULT_LINK_CACHE = 50_000
"""Entries of a slave's CLOCK cache of emitted link fingerprints ([URL caching]: ~80% hits)."""

DEFAULT_PARSE_THREADS = 2
"""Threads of a crawl slave that decode and parse fetched pages beside the thread driving the
fetches, so that a page slow to parse never holds up the network."""

DEFAULT_PARSE_INLINE_BYTES = 64 * 1024
"""Bodies up to this size are parsed by the thread driving the fetches (a few ms at most: the
hand-off to a parse thread would cost more CPU than most such pages' parse); larger ones go to
the parse threads."""

DEFAULT_FALLBACK_PARSE_CHARS = 256 * 1024
"""Characters of a page libxml2 gave up on (nesting past its limit) that the BeautifulSoup fallback
parses: pure Python at ~50 µs a tag, a hostile page of unclosed tags would take it minutes.
The rest of such a page yields no text and no links."""

DEFAULT_CRAWL_BACKLOG_PER_THREAD = 2
"""Crawl tasks the master keeps waiting in srq per fetch thread of the live slaves: enough
that no thread waits for the master, few enough that the master picks the next hosts."""

DEFAULT_MASTER_BATCH = 500
"""nrq messages the master takes per round trip."""

DEFAULT_MASTER_IDLE_WAIT = 0.2
"""Seconds the crawl master blocks on nrq while no host is due (an outcome wakes it at once)."""

DEFAULT_PAUSE_CHECK = 0.5
"""Seconds between two looks of the crawl master at the job's ``paused`` flag: a pause
stops the hand-out within this (plus the tasks already in srq, at most the backlog)."""

DEFAULT_RECRAWL_HOST_LIMIT = 100_000
"""Most stored pages of one host a recrawl of the host (the portal's admin area) queues."""

ADMIN_SESSION_TTL = 12 * 3600
"""Seconds an admin session of the portal lives after its login."""

ADMIN_LOGIN_FAILURES = 5
"""Failed logins a client address may make in ADMIN_LOGIN_WINDOW before it is answered 429."""

ADMIN_LOGIN_WINDOW = 60
"""Seconds of the window the failed logins of a client address are counted in."""

REDIS_TIMER_TICK = 0.1
"""Seconds between two ticks of Redis' timer (1/hz, hz 10 by default): a blocking command's
timeout ends on a tick, so a wait that must end on time blocks only until a tick before it."""

DEFAULT_MASTER_POLL = 0.002
"""Seconds between the crawl master's looks at nrq in the last tick before a host is due."""

# -- pagerank ------------------------------------------------------------------

DEFAULT_PAGERANK_ITERATIONS = 30
"""Iterations `srcrawl pagerank` runs unless --tol stops it sooner."""

DEFAULT_PAGERANK_DAMPING = 0.85
"""Probability of following a link rather than teleporting to a random page."""

DEFAULT_PAGERANK_TOL = 0.0
"""Stop once the L1 change of an iteration falls below this; 0 runs every iteration."""

DEFAULT_PAGERANK_POLL = 15.0
"""Seconds between looks at a store that has no pages or no links yet, by `srcrawl pagerank
--every` (``--poll``): the first ranks come this soon after a crawl stores its first
pages, not a whole ``--every`` later."""

DEFAULT_PAGERANK_SLAVES = 2
"""Local slave processes `srcrawl pagerank` starts (0: rely on slaves started elsewhere)."""

DEFAULT_PAGERANK_SHARD_EDGES = 1_000_000
"""Edges per graph shard (one map task per shard and iteration)."""

DEFAULT_PAGERANK_SHARD_CHUNK = 1 << 20
"""Bytes per value of a shard stored in Redis: a shard is a list of such chunks, read in
one LRANGE (an 8 MB shard: about half the time of one 8 MB GET)."""

DEFAULT_PAGERANK_REAP_INTERVAL = 1.0
"""Seconds between two looks for dead slaves while the master waits for partial sums."""

DEFAULT_PAGERANK_STALL_TIMEOUT = 30.0
"""Seconds without any answer, with no map task left in srq, after which the master offers
the iteration's missing shards again (a slave that claimed one may have left without it).
The load round gives up after as long without an answer: the shards left are loaded by the
slaves that claim them in the first iteration."""

DEFAULT_PAGERANK_KEY_TTL = 86_400
"""Seconds the header, shards and rank pieces of a graph live in Redis if their master dies."""

DEFAULT_PAGERANK_RESTARTS = 3
"""Times a PageRank run starts again after its graph or rank pieces were lost (a Redis
restarted mid-run keeps nothing written out of its AOF) before it fails."""

DEFAULT_PAGERANK_STEAL_AFTER = 0.1
"""Seconds a pagerank slave hands back the tasks of an iteration in which only shards other
slaves hold are left, before it takes one of those (and reads it from Redis)."""

DEFAULT_PAGERANK_CLAIM_RETRY = 0.005
"""Seconds a pagerank slave pauses after handing a task back, before it pops again."""

DEFAULT_PAGERANK_WRITE_TRIES = 4
"""Attempts of a pagerank slave to write a computed piece before it reports the task failed."""

DEFAULT_PAGERANK_WRITE_RETRY_DELAY = 0.1
"""Seconds before the second attempt to write a piece; each further wait doubles."""

DEFAULT_STORE_BULK_BATCH = 50_000
"""Rows per transaction batch while a store is in bulk-load mode (pages; links ×10)."""

DEFAULT_SQLITE_BULK_CACHE_MB = 1024
"""SQLite page cache while bulk loading, so index pages stay in memory between batches."""

DEFAULT_TESTWEB_HOSTS = 4
"""Hosts of the synthetic test web (four hosts cover every robots.txt variant)."""

DEFAULT_TESTWEB_PAGES = 200
"""Regular pages per host of the synthetic test web."""

DEFAULT_TESTWEB_SEED = 1
"""Seed of the synthetic test web's generator."""

DEFAULT_TESTWEB_PORT_BASE = 18700
"""First port of the test web (host i listens on base + i); below the ephemeral range."""

DEFAULT_TESTWEB_CRAWL_DELAY = 0.2
"""Seconds of ``Crawl-delay`` in the robots.txt of the test web hosts that set one."""

DEFAULT_TESTWEB_ROBOTS_FAILURES = 3
"""How many times the flaky test web host answers 500 for /robots.txt before it works."""

DEFAULT_TESTWEB_SLOW_SECONDS = 30.0
"""Seconds the test web's timeout pages keep a client waiting."""

DEFAULT_TESTWEB_LARGE_BYTES = 10_000_000
"""Body size of the test web's large page."""

DEFAULT_TESTWEB_LOG_FLUSH = 1.0
"""Seconds between flushes of the test web's access log."""

DEFAULT_TESTWEB_TRAP_STEPS = 12
"""Steps into each infinite trap that ``srcrawl testweb graph`` prints."""

# -- sitemaps -------------------------------------------------------------------

DEFAULT_SITEMAP_MAX_BYTES = 10 * 1024 * 1024
"""Bytes of one sitemap read after decompression (a gzip bomb stops here, counted)."""

DEFAULT_SITEMAP_MAX_URLS = 5000
"""URLs taken from one sitemap; the rest of it is not read (counted)."""

DEFAULT_SITEMAP_MAX_DEPTH = 2
"""Levels of sitemap indexes followed below the first sitemap (an index of indexes: 2)."""

DEFAULT_SITEMAPS_PER_HOST = 8
"""Sitemaps (and indexes) fetched per host, however many robots.txt and indexes name."""

DEFAULT_SITEMAP_LASTMOD_MAX = 1_000_000
"""Fingerprints whose sitemap ``<lastmod>`` is kept in Redis (about 100 MB at most)."""

DEFAULT_SITEMAP_PROBE = "/sitemap.xml"
"""Where a host's sitemap is looked for when its robots.txt names none (one request)."""

DEFAULT_SITEMAP_EVERY = 3600.0
"""Seconds between two reads of a host's sitemaps by an always-on crawl (--sitemap-every)."""

DEFAULT_SITEMAP_THREADS = 8
"""Threads of a crawl slave reading hosts' sitemaps beside its fetch loop (each holds one
host's first task while it reads, waiting the host's politeness between requests)."""

# -- index and search ----------------------------------------------------------

MAX_TERM_CHARS = 64
"""Longest term indexed; longer tokens (hashes, base64, junk) are dropped."""

DEFAULT_INDEX_REMOVE_BATCH = 1000
"""Pages that went away taken out of the index per transaction."""

DEFAULT_INDEX_SLAVES = 2
"""Local slave processes `srcrawl index` starts (0: rely on slaves started elsewhere)."""

DEFAULT_INDEX_BATCH_PAGES = 50
"""Page ids per index task in srq (one task: one store read, one documents message)."""

DEFAULT_INDEX_WINDOW = 64
"""Index tasks the master keeps queued or in flight; it tops srq up as results come."""

DEFAULT_INDEX_MERGE_DOCS = 5000
"""Documents the index master gathers into one Tantivy commit (each commit ends a segment
and fsyncs; Tantivy merges the segments in the background)."""

DEFAULT_INDEX_MERGE_WAIT = 30.0
"""Seconds the index master lets results gather before it commits fewer documents: a
freshness bound (``index --follow`` commits within half its delay)."""

DEFAULT_INDEX_WRITER_HEAP = 128_000_000
"""Bytes of the Tantivy writer's indexing buffer (one thread); a segment is written when it
fills or at a commit."""

DEFAULT_INDEX_WRITER_WAIT = 30.0
"""Seconds an index master waits for the index directory's writer lock (a master that lost
its lease may still be finishing its last commit) before it gives up."""

DEFAULT_INDEX_MAX_CHARS = 2_000_000
"""Characters of a page (title and text) that are tokenized; the rest is not indexed."""

DEFAULT_INDEX_REAP_INTERVAL = 2.0
"""Seconds between two looks for dead slaves while the index master waits."""

DEFAULT_INDEX_FOLLOW_DELAY = 10.0
"""``srcrawl index --follow``: the delay it aims at from a page's store write to its being
searchable. It looks for unindexed pages every quarter of it and merges what it holds
within half of it, so tokenizing has the rest."""

DEFAULT_INDEX_FOLLOW_SAMPLES = 2000
"""Recent pages whose delay ``index --follow`` keeps for its p50/p95 (a bounded window)."""

DEFAULT_INDEX_FOLLOW_LOG_INTERVAL = 60.0
"""Seconds between two log lines of ``index --follow`` with the delay's p50 and p95."""

DEFAULT_INDEX_LOCAL_DIR_NAME = "index-local"
"""Under the home: ``index-local/<job>``, the index master's working Tantivy directory when
the index is published to an object store (``SRCRAWL_INDEX_DIR=s3://BUCKET/PREFIX``)."""

DEFAULT_INDEX_REPLICA_DIR_NAME = "index-replica"
"""Under the home: ``index-replica/<job>``, the local replica that ``srcrawl serve`` and
``srcrawl search`` keep of an index published to an object store."""

DEFAULT_INDEX_SYNC_PERIOD = 1.0
"""Seconds between two looks of a replica at the published commit
(``SRCRAWL_INDEX_SYNC_PERIOD``): about the most a commit waits to be searchable there."""

INDEX_DROPPED_GRACE = 60.0
"""Seconds a segment file dropped from the published index stays in the object store after
the commit that dropped it: a replica still fetching the commit before has time to end."""

INDEX_REPLICA_REPORT_EVERY = 10.0
"""Seconds between two records of a replica's state in Redis when nothing changed (a
new commit is recorded at once); ``srcrawl status`` calls it silent after three."""

INDEX_REPLICA_FORGET_AFTER = 86_400.0
"""Seconds after its last record that a replica's state is removed from Redis (by any
replica recording its own): a search server gone for a day, or a search that synced
once and ended, no longer fills ``srcrawl status``."""

INDEX_STORE_FIRST_WAIT = 0.5
"""Seconds before a publish or a replica's sync that failed is tried again; doubled after
each failure, up to INDEX_STORE_MAX_WAIT (an outage of the store is waited out)."""

INDEX_STORE_MAX_WAIT = 10.0

BM25_K1 = 1.2
"""BM25 term-frequency saturation."""

BM25_B = 0.75
"""BM25 document-length normalisation (0: none, 1: full)."""

RANKS_KEPT = 2_000_000
"""PageRank scores a search process keeps in memory (sql/ranks.py's KeptRanks: 16 bytes a
page, 32 MB at most): a rank run of more pages is read by SQL, a pool's pages at a time."""

DEFAULT_RANK_WEIGHT = 0.2
"""How much PageRank can raise a BM25 score: by at most this fraction (a page of average
rank by half of it). Small, because rank is query-independent: on real documentation sites
tables of contents and chapter pages hold the most rank and outranked the sections that
answer (MRR 0.82 blended at 0.5 on the SQL index, 0.90 without rank). Chosen on the
real-corpus evaluation (`srcrawl bench search --corpus django-en --corpus
debian-handbook-zh`, docs/benchmarks-journal.md, "Ranking on real documentation, on the
Tantivy index"): on the Tantivy index every weight from 0 to 0.3
gives the same ranks on both corpora, 0.5 and 1.0 put one more English answer second
(success@1 0.912 -> 0.895); 0.2 keeps a margin below that and still orders pages whose
text scores within 20 % of each other (the known-item test web, where links mean
something, keeps MRR 0.997)."""

LONG_QUERY_WORDS = 4
"""A query of this many words or more is a long one, whose words weigh the title and the
anchor text by their own weights (indexer/search/weights.py, ``long_title``): the
known-item queries that name a page (its title, a menu label, a link's words) are
shorter, and the tasks and questions of a user's own words longer."""

SOME_WORDS_SHARE = 0.5
"""What the score of a page lacking one or more of a query's words counts against pages
with every word (indexer/search/collect.py): a soft "every word first". Strict tiers (a page
with every word always first) put a table of contents that holds each word once above the
section that answers in other words. 0.5, chosen together with the title's weight, words
near each other and the whole page's idf by leaving one corpus out
(``srcrawl bench loco --joint``, docs/search.md, "Why these weights"): a page short of a
word passes one with every word when its words score twice as much. It was 0.25, chosen
alone on two manuals and on the generated pages of `bench search --pages` (random words,
queries of random words of one page: there every word is what singles the page out,
and 0.5 alone put the source page first less often; with the weights chosen together it
is first for 84 of 200 queries on 10,000 pages, 81 before); the manuals whose queries
are a user's own words need the softer tier."""

DEFAULT_RERANK_POOL = 200
"""BM25 hits a query rescores with PageRank and collapses duplicates among (widened when a
page below the pool could still rise into the results: the ranking stays exact)."""

SIMHASH_NEAR_BITS = 3
"""Pages whose 64-bit body simhashes differ in at most this many bits are near-duplicates
(Manku, Jain and Das Sarma, WWW 2007)."""

SIMILAR_URLS = 20
"""URLs a search hit lists of the duplicates and near-duplicates collapsed into it (it
counts them all): enough to show them, and a bounded store read a hit."""

DEFAULT_SEARCH_TOP = 10
"""Hits `srcrawl search` prints."""

BENCH_CORPUS_DEPTH = 50
"""Link hops `srcrawl bench search --corpus` crawls a documentation tree to: deeper than
any real documentation's table of contents, so the whole tree is crawled."""

DEFAULT_MAX_QUERY_TERMS = 32
"""Distinct query terms used; the rest of a longer query is ignored."""

DEFAULT_MAX_QUERY_CHARS = 10_000
"""Characters of a query that are tokenized; the rest is ignored."""

DEFAULT_SNIPPET_CHARS = 160
"""Characters of page text around the query terms shown per hit."""

SNIPPET_TEXT_CHARS = 60_000
"""Characters of a page's own text kept in the index for its snippets (the ``text``
field): a term found later is not shown (the text of most pages is shorter; the scan of
a longer one costs more than the search)."""

LANGUAGE_MIN_SCORE = 0.4
"""The language model's least probability for a page's language to be named; below it
the page's language is ``und`` (indexer/language.py)."""
FACET_SITES = 10
"""Hosts counted in a search's facets (the hosts with the most matching pages)."""
FACET_MONTHS = 12
"""Fetch months counted in a search's facets (the latest months with matching pages)."""

# -- metrics and guards (srcrawl/core/telemetry.py, master/guards.py, portal/metrics.py) --
FETCH_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds (s) of the fetch time histogram the slaves publish."""
DEFAULT_MIN_FREE_DISK = 2 * 2**30
"""Bytes that must stay free on the WARC and store volumes (``--min-free-disk``); below
it the crawl master hands out no fetch until space is back."""
DEFAULT_MAX_REDIS_MEMORY = 0
"""Redis ``used_memory`` above which the crawl admits no new URL (``--max-redis-memory``;
0: Redis's own ``maxmemory`` less a tenth when it has one, else no limit)."""
