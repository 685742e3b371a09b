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
from urllib.parse import unquote, urlsplit

import redis

from srcrawl import embedded
from srcrawl.defaults import (
    DEFAULT_HOME,
    DEFAULT_JOB,
    DEFAULT_SQLITE_NAME,
    REDIS_CONNECT_TIMEOUT,
    REDIS_SOCKET_TIMEOUT,
)
from srcrawl.errors import ConfigError, SrcrawlError
from srcrawl.keys import Keys

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

ENV_REDIS_URL = "SRCRAWL_REDIS_URL"
ENV_DB_URL = "SRCRAWL_DB_URL"
ENV_JOB = "SRCRAWL_JOB"
ENV_HOME = "SRCRAWL_HOME"
ENV_VARS = (ENV_REDIS_URL, ENV_DB_URL, ENV_JOB, ENV_HOME)
"""Every environment variable the configuration reads."""

_JOB_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_DB_SCHEMES = ("sqlite", "mysql", "mysql+pymysql")


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed ``SRCRAWL_DB_URL``: ``sqlite:///path`` or ``mysql://user:pw@host:port/db``."""

    kind: str  # "sqlite" or "mysql"
    path: str = ""
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = ""
    database: str = ""
    create_dirs: bool = False
    """SQLite: the default store under the home directory, whose directories may be
    created; a path the user named must be in a directory that exists."""

    @classmethod
    def parse(cls, url: str) -> DatabaseURL:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as e:
            raise ConfigError(f"{ENV_DB_URL} is malformed: {url!r} ({e})") from e
        if parts.scheme not in _DB_SCHEMES:
            raise ConfigError(
                f"{ENV_DB_URL} is malformed: {url!r} (scheme must be sqlite:// or mysql://)"
            )
        if parts.scheme == "sqlite":
            # sqlite:///relative.db, sqlite:////absolute.db, sqlite:///:memory:
            if not url.startswith("sqlite:///") or len(parts.path) < 2:
                raise ConfigError(
                    f"{ENV_DB_URL} is malformed: {url!r} (use sqlite:///relative/path.db "
                    "or sqlite:////absolute/path.db)"
                )
            return cls(kind="sqlite", path=unquote(parts.path[1:]))
        database = parts.path.lstrip("/")
        if not parts.hostname or not database or "/" in database:
            raise ConfigError(
                f"{ENV_DB_URL} is malformed: {url!r} (use mysql://user:password@host:port/database)"
            )
        return cls(
            kind="mysql",
            host=parts.hostname,
            port=port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=unquote(database),
        )

    def redacted(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.path}"
        return f"mysql://{self.user}@{self.host}:{self.port}/{self.database}"


def _check_redis_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as e:
        raise ConfigError(f"{ENV_REDIS_URL} is malformed: {url!r} ({e})") from e
    if parts.scheme not in _REDIS_SCHEMES or (parts.scheme != "unix" and not parts.hostname):
        raise ConfigError(
            f"{ENV_REDIS_URL} is malformed: {url!r} (expected redis://host:port/db or unix://path)"
        )
    return url


@dataclass(frozen=True)
class Config:
    """Where Redis and the store are, and which job this process works on."""

    redis_url: str | None
    """None means: the embedded server under ``home``."""
    db: DatabaseURL
    job: str
    home: Path
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
        redis_url = redis_url or env.get(ENV_REDIS_URL) or None
        if redis_url is not None:
            _check_redis_url(redis_url)
        db_url = db_url or env.get(ENV_DB_URL) or None
        db = (
            DatabaseURL.parse(db_url)
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
        return cls(redis_url=redis_url, db=db, job=job, home=home_path)

    @property
    def keys(self) -> Keys:
        return Keys(self.job)

    @property
    def embedded(self) -> bool:
        return self.redis_url is None

    def resolved_redis_url(self) -> str:
        """The Redis URL to connect to, starting the embedded server if needed."""
        if self.redis_url is not None:
            return self.redis_url
        if "embedded_url" not in self._cache:
            try:
                self._cache["embedded_url"] = embedded.ensure_running(self.home)
            except SrcrawlError as e:
                raise ConfigError(f"cannot start the embedded Redis: {e}") from e
        return self._cache["embedded_url"]

    def redis(self) -> redis.Redis:
        """A client of the configured Redis (one per Config), checked with PING."""
        client = self._cache.get("redis")
        if client is None:
            url = self.resolved_redis_url()
            try:
                client = redis.Redis.from_url(
                    url,
                    socket_timeout=REDIS_SOCKET_TIMEOUT,
                    socket_connect_timeout=REDIS_CONNECT_TIMEOUT,
                    health_check_interval=30,
                )
                client.ping()
            except (redis.RedisError, OSError, ValueError) as e:
                raise ConfigError(f"cannot reach Redis at {url}: {_one_line(e)}") from e
            self._cache["redis"] = client
        return client

    def store(self) -> Store:
        """An open store of the configured database with its schema applied (one per Config)."""
        store = self._cache.get("store")
        if store is None:
            from srcrawl.sql.store import open_store  # late: keeps `srcrawl --version` fast

            store = open_store(self.db)
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
        """Environment for a child process that must see the same Redis, store and job."""
        env = dict(os.environ)
        env[ENV_REDIS_URL] = self.resolved_redis_url()
        env[ENV_DB_URL] = (
            f"sqlite:///{Path(self.db.path).resolve()}"
            if self.db.kind == "sqlite" and self.db.path != ":memory:"
            else self._db_url_with_password()
        )
        if self.db.create_dirs:  # the child is handed a named path: its directory must exist
            Path(self.db.path).parent.mkdir(parents=True, exist_ok=True)
        env[ENV_JOB] = self.job
        env[ENV_HOME] = str(self.home.resolve())
        return env

    def _db_url_with_password(self) -> str:
        from urllib.parse import quote

        d = self.db
        cred = quote(d.user, safe="") + (":" + quote(d.password, safe="") if d.password else "")
        return f"mysql://{cred}@{d.host}:{d.port}/{quote(d.database, safe='')}"

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
