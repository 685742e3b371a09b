"""The one configuration object, built once from click options and ``SRCRAWL_*``.

Precedence: an explicit option, then the environment, then the embedded
defaults (a Redis server and a SQLite file under ``./.srcrawl``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from srcrawl.core.credentials import FILE_SUFFIX, read_setting, redact_url
from srcrawl.core.defaults import (
    DEFAULT_HOME,
    DEFAULT_INDEX_DIR_NAME,
    DEFAULT_INDEX_LOCAL_DIR_NAME,
    DEFAULT_INDEX_REPLICA_DIR_NAME,
    DEFAULT_INDEX_SYNC_PERIOD,
    DEFAULT_JOB,
    DEFAULT_MASTER_LEASE_TTL,
    DEFAULT_SQLITE_NAME,
    DEFAULT_WARC_DIR_NAME,
    DEFAULT_WARC_SPOOL_DIR_NAME,
    REDIS_CONNECT_TIMEOUT,
    REDIS_SOCKET_TIMEOUT,
    WARC_OBJECT_MAX_AGE,
)
from srcrawl.core.errors import ConfigError, SrcrawlError
from srcrawl.core.keys import Keys
from srcrawl.core.object_store import is_object_url, valid_bucket
from srcrawl.core.redis_connect import CLUSTER_SCHEMES, cluster_nodes, connect
from srcrawl.sql.database_url import ENV_DB_URL, DatabaseURL

if TYPE_CHECKING:
    import redis

    from srcrawl.sql.store import Store
    from srcrawl.warc.storage import WarcStorage

ENV_REDIS_URL = "SRCRAWL_REDIS_URL"
ENV_JOB = "SRCRAWL_JOB"
ENV_HOME = "SRCRAWL_HOME"
ENV_LEASE_TTL = "SRCRAWL_MASTER_LEASE_TTL"
ENV_WARC_DIR = "SRCRAWL_WARC_DIR"
ENV_WARC_PUBLISH_AGE = "SRCRAWL_WARC_PUBLISH_AGE"
ENV_INDEX_DIR = "SRCRAWL_INDEX_DIR"
ENV_INDEX_SYNC_PERIOD = "SRCRAWL_INDEX_SYNC_PERIOD"
ENV_STATUS_PUBLIC = "SRCRAWL_STATUS_PUBLIC"
STATUS_PUBLIC = ("loopback", "all", "admin")
"""Who may read the portal's /status, /api/status and /metrics without the admin session:
clients on a loopback address (the default), everyone, or no one."""
ENV_REDIS_URL_FILE = ENV_REDIS_URL + FILE_SUFFIX
ENV_DB_URL_FILE = ENV_DB_URL + FILE_SUFFIX
ENV_VARS = (
    ENV_REDIS_URL,
    ENV_DB_URL,
    ENV_JOB,
    ENV_HOME,
    ENV_REDIS_URL_FILE,
    ENV_DB_URL_FILE,
    ENV_LEASE_TTL,
    ENV_WARC_DIR,
    ENV_WARC_PUBLISH_AGE,
    ENV_INDEX_DIR,
    ENV_INDEX_SYNC_PERIOD,
    ENV_STATUS_PUBLIC,
)
"""Every environment variable the configuration reads."""

_JOB_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_MALFORMED_NETLOC = "bad host or port; percent-encode special characters of the user and password"

# TLS options of a rediss:// URL: redis-py reads them from the query (see from_url)
_REDIS_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_REDIS_TLS_OPTIONS = (*_REDIS_TLS_FILES, "ssl_ca_path", "ssl_cert_reqs", "ssl_password")
_REDIS_CERT_REQS = ("none", "optional", "required")


def _redis_query_options() -> frozenset[str]:
    # late, like every import of redis here: a command that never talks to Redis
    # (search, --version) does not pay for importing it
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS

    return frozenset(URL_QUERY_ARGUMENT_PARSERS) | frozenset(_REDIS_TLS_OPTIONS)


def _check_redis_url(url: str) -> str:
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        if parts.scheme not in CLUSTER_SCHEMES:  # host:port,host:port is not one port
            _ = parts.port
        options = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ConfigError(
            f"{ENV_REDIS_URL} is malformed: {shown!r} ({_MALFORMED_NETLOC})"
        ) from None
    if parts.scheme in CLUSTER_SCHEMES:
        try:
            cluster_nodes(url)
        except ValueError as e:
            raise ConfigError(f"{ENV_REDIS_URL} is malformed: {shown!r} ({e})") from None
    elif parts.scheme not in _REDIS_SCHEMES or (parts.scheme != "unix" and not parts.hostname):
        raise ConfigError(
            f"{ENV_REDIS_URL} is malformed: {shown!r} "
            "(expected redis://host:port/db, rediss://host:port/db, unix://path "
            "or redis+cluster://host:port,host:port)"
        )
    for key, value in options:
        if key not in _redis_query_options():
            raise ConfigError(
                f"{ENV_REDIS_URL}: unknown option {key!r} (TLS: {', '.join(_REDIS_TLS_OPTIONS)})"
            )
        if key.startswith("ssl_") and parts.scheme not in ("rediss", "rediss+cluster"):
            raise ConfigError(f"{ENV_REDIS_URL}: {key} is a TLS option: use rediss://")
        if key in _REDIS_TLS_FILES and not os.path.isfile(value):
            raise ConfigError(f"{ENV_REDIS_URL}: {key} {value} is not a readable file")
        if key == "ssl_cert_reqs" and value not in _REDIS_CERT_REQS:
            raise ConfigError(
                f"{ENV_REDIS_URL}: ssl_cert_reqs {value!r} is not one of "
                + ", ".join(_REDIS_CERT_REQS)
            )
    return url


def _local_dir(env: Mapping[str, str], name: str) -> Path | None:
    """The directory the variable ``name`` names (None: unset, or an object store)."""
    raw = env.get(name)
    return Path(raw) if raw and not is_object_url(raw) else None


def _object_url(env: Mapping[str, str], name: str) -> str | None:
    """The variable ``name`` when it names an object store (``s3://BUCKET[/PREFIX]``)."""
    raw = env.get(name)
    if not raw or not is_object_url(raw):
        return None
    if not valid_bucket(raw):
        raise ConfigError(f"{name} is malformed: {raw!r} (s3://BUCKET/PREFIX)")
    return raw.rstrip("/")


def _sync_period(env: Mapping[str, str]) -> float:
    raw = env.get(ENV_INDEX_SYNC_PERIOD)
    if not raw:
        return DEFAULT_INDEX_SYNC_PERIOD
    try:
        period = float(raw)
    except ValueError:
        period = -1.0
    if not 0.05 <= period <= 3600:
        raise ConfigError(f"{ENV_INDEX_SYNC_PERIOD} is malformed: {raw!r} (seconds, 0.05 to 3600)")
    return period


def _publish_age(env: Mapping[str, str]) -> float:
    raw = env.get(ENV_WARC_PUBLISH_AGE)
    if not raw:
        return WARC_OBJECT_MAX_AGE
    try:
        age = float(raw)
    except ValueError:
        age = -1.0
    if not 0 <= age <= 3600:
        raise ConfigError(f"{ENV_WARC_PUBLISH_AGE} is malformed: {raw!r} (seconds, 0 to 3600)")
    return age


def _status_public(env: Mapping[str, str]) -> str:
    raw = env.get(ENV_STATUS_PUBLIC) or STATUS_PUBLIC[0]
    if raw not in STATUS_PUBLIC:
        raise ConfigError(
            f"{ENV_STATUS_PUBLIC} is malformed: {raw!r} (one of {', '.join(STATUS_PUBLIC)})"
        )
    return raw


def _lease_ttl(env: Mapping[str, str]) -> float:
    raw = env.get(ENV_LEASE_TTL)
    if not raw:
        return DEFAULT_MASTER_LEASE_TTL
    try:
        ttl = float(raw)
    except ValueError:
        ttl = 0.0
    if not 0.5 <= ttl <= 3600:
        raise ConfigError(f"{ENV_LEASE_TTL} is malformed: {raw!r} (seconds, 0.5 to 3600)")
    return ttl


@dataclass(frozen=True)
class Config:
    """Where Redis and the store are, and which job this process works on."""

    redis_url: str | None = field(repr=False)
    """None means: the embedded server under ``home``."""
    db: DatabaseURL
    job: str
    home: Path
    redis_url_file: Path | None = None
    """The file the Redis URL was read from (``SRCRAWL_REDIS_URL_FILE``), for child processes."""
    lease_ttl: float = DEFAULT_MASTER_LEASE_TTL
    """Seconds a phase master's lease lives unrenewed (``SRCRAWL_MASTER_LEASE_TTL``)."""
    warc_dir: Path | None = None
    """Where crawl slaves write WARC files (``SRCRAWL_WARC_DIR``); None: ``home/warc``.
    In a cluster, a directory every slave and reader mounts."""
    warc_url: str | None = None
    """The object store that keeps the WARC files instead, ``s3://BUCKET/PREFIX``
    (``SRCRAWL_WARC_DIR`` naming one); its endpoint and keys are the AWS SDK's variables."""
    warc_publish_age: float = WARC_OBJECT_MAX_AGE
    """Seconds after which a slave publishes its spool file however small
    (``SRCRAWL_WARC_PUBLISH_AGE``): how long at most its pages' rows and acks wait."""
    index_dir: Path | None = None
    """The job's search index, a Tantivy directory (``SRCRAWL_INDEX_DIR``); None:
    ``home/index/<job>``. The index master writes it; the CLI and the portal read it."""
    index_url: str | None = None
    """The object store the index is published to instead, ``s3://BUCKET/PREFIX``
    (``SRCRAWL_INDEX_DIR`` naming one): the index master writes ``home/index-local/<job>``
    and publishes each commit under ``PREFIX/<job>/``; the CLI and the portal read a
    replica in ``home/index-replica/<job>`` that follows the commits."""
    index_sync_period: float = DEFAULT_INDEX_SYNC_PERIOD
    """Seconds between two looks of a replica at the published commit
    (``SRCRAWL_INDEX_SYNC_PERIOD``)."""
    status_public: str = STATUS_PUBLIC[0]
    """Who reads the portal's /status, /api/status and /metrics without the admin session
    (``SRCRAWL_STATUS_PUBLIC``): ``loopback`` (clients on a loopback address), ``all``,
    or ``admin`` (no one)."""
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(
        cls,
        *,
        redis_url: str | None = None,
        db_url: str | None = None,
        job: str | None = None,
        home: str | Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Config:
        """Build the configuration; raise ConfigError on anything malformed."""
        env = os.environ if env is None else env
        home_path = Path(home or env.get(ENV_HOME) or DEFAULT_HOME)
        redis_url_file = db_url_file = None
        if not redis_url:  # an option wins over the variable and its _FILE alike
            redis_url, redis_url_file = read_setting(env, ENV_REDIS_URL)
        if redis_url is not None:
            _check_redis_url(redis_url)
        if not db_url:
            db_url, db_url_file = read_setting(env, ENV_DB_URL)
        db = (
            replace(DatabaseURL.parse(db_url), source_file=db_url_file)
            if db_url
            else DatabaseURL(
                kind="sqlite", path=str(home_path / DEFAULT_SQLITE_NAME), create_dirs=True
            )
        )
        job = job or env.get(ENV_JOB) or DEFAULT_JOB
        if not _JOB_RE.match(job):
            raise ConfigError(
                f"{ENV_JOB} is malformed: {job!r} (letters, digits, '_', '.', '-'; at most 64)"
            )
        return cls(
            redis_url=redis_url,
            db=db,
            job=job,
            home=home_path,
            redis_url_file=redis_url_file,
            lease_ttl=_lease_ttl(env),
            warc_dir=_local_dir(env, ENV_WARC_DIR),
            warc_url=_object_url(env, ENV_WARC_DIR),
            warc_publish_age=_publish_age(env),
            index_dir=_local_dir(env, ENV_INDEX_DIR),
            index_url=_object_url(env, ENV_INDEX_DIR),
            index_sync_period=_sync_period(env),
            status_public=_status_public(env),
        )

    @property
    def keys(self) -> Keys:
        return Keys(self.job)

    @property
    def warc_root(self) -> Path:
        """The directory of the WARC files (``SRCRAWL_WARC_DIR``, else ``home/warc``)."""
        return self.warc_dir if self.warc_dir is not None else self.home / DEFAULT_WARC_DIR_NAME

    def warc_storage(self) -> WarcStorage:
        """Where the WARC files are: the object store of :attr:`warc_url` (its spool files
        in ``home/warc-spool``), else the directory :attr:`warc_root` (one per Config)."""
        storage = self._cache.get("warc")
        if storage is None:
            from srcrawl.warc.storage import LocalWarcStorage

            if self.warc_url is not None:
                from srcrawl.warc.objects import ObjectWarcStorage

                storage = ObjectWarcStorage(
                    self.warc_url, self.warc_volume, max_age=self.warc_publish_age
                )
            else:
                storage = LocalWarcStorage(self.warc_root)
            self._cache["warc"] = storage
        return storage

    @property
    def warc_volume(self) -> Path:
        """The local directory a slave's WARC writes fill: the WARC directory, or the spool
        files' (``home/warc-spool``) when the files go to an object store."""
        if self.warc_url is not None:
            return self.home / DEFAULT_WARC_SPOOL_DIR_NAME
        return self.warc_root

    @property
    def warc_source(self) -> Path | WarcStorage:
        """What readers of page texts and bodies read: the WARC directory, or the object
        store (``SRCRAWL_WARC_DIR=s3://…``)."""
        return self.warc_storage() if self.warc_url is not None else self.warc_root

    @property
    def index_path(self) -> Path:
        """The index directory searches read: ``SRCRAWL_INDEX_DIR``, else
        ``home/index/<job>``; with an object store, the replica ``home/index-replica/<job>``."""
        if self.index_url is not None:
            return self.home / DEFAULT_INDEX_REPLICA_DIR_NAME / self.job
        if self.index_dir is not None:
            return self.index_dir
        return self.home / DEFAULT_INDEX_DIR_NAME / self.job

    @property
    def index_work_path(self) -> Path:
        """The index directory the index master writes: :attr:`index_path`, or with an
        object store its working directory ``home/index-local/<job>``."""
        if self.index_url is not None:
            return self.home / DEFAULT_INDEX_LOCAL_DIR_NAME / self.job
        return self.index_path

    @property
    def embedded(self) -> bool:
        return self.redis_url is None

    def resolved_redis_url(self) -> str:
        """The Redis URL to connect to, starting the embedded server if needed."""
        if self.redis_url is not None:
            return self.redis_url
        if "embedded_url" not in self._cache:
            try:
                from srcrawl.core import embedded

                self._cache["embedded_url"] = embedded.ensure_running(self.home)
            except SrcrawlError as e:
                raise ConfigError(f"cannot start the embedded Redis: {e}") from e
        return self._cache["embedded_url"]

    def redis(self) -> redis.Redis:
        """A client of the configured Redis (one per Config), checked with PING."""
        client = self._cache.get("redis")
        if client is None:
            import redis
            from redis.exceptions import RedisClusterException  # not a RedisError

            url = self.resolved_redis_url()
            try:
                client = connect(
                    url,
                    socket_timeout=REDIS_SOCKET_TIMEOUT,
                    socket_connect_timeout=REDIS_CONNECT_TIMEOUT,
                    health_check_interval=30,
                )
                client.ping()
            except (redis.RedisError, RedisClusterException, OSError, ValueError) as e:
                raise ConfigError(
                    f"cannot reach Redis at {redact_url(url)}: {redact_url(_one_line(e))}"
                ) from None
            self._cache["redis"] = client
        return client

    def store(self) -> Store:
        """An open store of the configured database with its schema applied (one per Config)."""
        store = self._cache.get("store")
        if store is None:
            from srcrawl.sql.store import open_store  # late: keeps `srcrawl --version` fast

            store = open_store(self.db, self.warc_source)
            try:
                store.init_schema()  # idempotent, so no command depends on `db init` first
            except SrcrawlError:
                store.close()
                raise
            self._cache["store"] = store
        return store

    def check(self) -> None:
        """Ping Redis and connect the store; raise ConfigError naming what failed."""
        self.redis()
        self.store()

    def child_env(self) -> dict[str, str]:
        """Environment for a child process that must see the same Redis, store and job.

        URLs go in the environment, never in arguments (which every user
        sees in the process list); one read from a file is passed on as
        that file's name.
        """
        env = dict(os.environ)
        for name in (ENV_REDIS_URL, ENV_REDIS_URL_FILE, ENV_DB_URL, ENV_DB_URL_FILE):
            env.pop(name, None)
        if self.redis_url_file is not None and self.redis_url is not None:
            env[ENV_REDIS_URL_FILE] = str(self.redis_url_file)
        else:
            env[ENV_REDIS_URL] = self.resolved_redis_url()
        if self.db.kind == "sqlite" and self.db.path != ":memory:":
            env[ENV_DB_URL] = f"sqlite:///{Path(self.db.path).resolve()}"
        elif self.db.source_file is not None:
            env[ENV_DB_URL_FILE] = str(self.db.source_file)
        else:
            env[ENV_DB_URL] = self.db.url()
        if self.db.create_dirs:  # the child is handed a named path: its directory must exist
            Path(self.db.path).parent.mkdir(parents=True, exist_ok=True)
        env[ENV_JOB] = self.job
        env[ENV_STATUS_PUBLIC] = self.status_public
        env[ENV_HOME] = str(self.home.resolve())
        env.pop(ENV_WARC_DIR, None)
        if self.warc_url is not None:
            env[ENV_WARC_DIR] = self.warc_url
        elif self.warc_dir is not None:
            env[ENV_WARC_DIR] = str(self.warc_dir.resolve())
        env.pop(ENV_INDEX_DIR, None)
        if self.index_url is not None:
            env[ENV_INDEX_DIR] = self.index_url
        elif self.index_dir is not None:
            env[ENV_INDEX_DIR] = str(self.index_dir.resolve())
        return env

    def with_job(self, job: str) -> Config:
        """The same services, another job."""
        if not _JOB_RE.match(job):
            raise ConfigError(f"job name is malformed: {job!r}")
        return replace(self, job=job, _cache=self._cache)

    def close(self) -> None:
        store = self._cache.pop("store", None)
        if store is not None:
            store.close()
        client = self._cache.pop("redis", None)
        if client is not None:
            client.close()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
