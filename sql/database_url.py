"""Where the store is: a parsed ``SRCRAWL_DB_URL`` (SQLite path or MySQL server and TLS)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from srcrawl.core.credentials import redact_url
from srcrawl.core.defaults import DEFAULT_MYSQL_TLS_MODE
from srcrawl.core.errors import ConfigError

ENV_DB_URL = "SRCRAWL_DB_URL"
_DB_SCHEMES = ("sqlite", "mysql", "mysql+pymysql")
_MALFORMED_NETLOC = "bad host or port; percent-encode special characters of the user and password"

# TLS of a mysql:// URL, named after the MySQL client's --ssl-mode and --ssl-ca/-cert/-key
MYSQL_TLS_MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")
_MYSQL_TLS_FILES = ("ssl_ca", "ssl_cert", "ssl_key")


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed ``SRCRAWL_DB_URL``: ``sqlite:///path`` or ``mysql://user:pw@host:port/db``."""

    kind: str  # "sqlite" or "mysql"
    path: str = ""
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str = ""
    ssl_mode: str = ""
    """One of MYSQL_TLS_MODES; empty: pymysql's own (TLS if the server offers it, unverified)."""
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    source_file: Path | None = field(default=None, compare=False)
    """The file the URL was read from (``SRCRAWL_DB_URL_FILE``), handed on to child processes."""
    create_dirs: bool = False
    """SQLite: the default store under the home directory, whose directories may be
    created; a path the user named must be in a directory that exists."""

    @classmethod
    def parse(cls, url: str) -> DatabaseURL:
        shown = redact_url(url)
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ConfigError(
                f"{ENV_DB_URL} is malformed: {shown!r} ({_MALFORMED_NETLOC})"
            ) from None
        if parts.scheme not in _DB_SCHEMES:
            raise ConfigError(
                f"{ENV_DB_URL} is malformed: {shown!r} (scheme must be sqlite:// or mysql://)"
            )
        if parts.scheme == "sqlite":
            # sqlite:///relative.db, sqlite:////absolute.db, sqlite:///:memory:
            if not url.startswith("sqlite:///") or len(parts.path) < 2:
                raise ConfigError(
                    f"{ENV_DB_URL} is malformed: {shown!r} (use sqlite:///relative/path.db "
                    "or sqlite:////absolute/path.db)"
                )
            return cls(kind="sqlite", path=unquote(parts.path[1:]))
        database = parts.path.lstrip("/")
        if not parts.hostname or not database or "/" in database:
            raise ConfigError(
                f"{ENV_DB_URL} is malformed: {shown!r} "
                "(use mysql://user:password@host:port/database)"
            )
        return cls(
            kind="mysql",
            host=parts.hostname,
            port=port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=unquote(database),
            **_mysql_tls(parts.query),
        )

    def redacted(self) -> str:
        """The URL without its password: what errors, logs and ``status`` show."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.path}"
        return f"mysql://{quote(self.user, safe='')}@{self._location()}"

    def url(self) -> str:
        """The whole URL, password included: only for a child process's environment."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.path}"
        cred = quote(self.user, safe="")
        if self.password:
            cred += ":" + quote(self.password, safe="")
        return f"mysql://{cred}@{self._location()}"

    def _location(self) -> str:
        tls = {k: getattr(self, k) for k in ("ssl_mode", *_MYSQL_TLS_FILES) if getattr(self, k)}
        query = "?" + urlencode(tls, safe="/") if tls else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}/{quote(self.database, safe='')}{query}"


def _mysql_tls(query: str) -> dict[str, str]:
    """The TLS fields of a mysql:// URL's query, checked (files must exist)."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigError(f"{ENV_DB_URL}: malformed query {redact_url('?' + query)!r}") from None
    tls: dict[str, str] = {}
    known = ("ssl_mode", *_MYSQL_TLS_FILES)
    for key, value in pairs:
        if key not in known or key in tls:
            raise ConfigError(
                f"{ENV_DB_URL}: unknown or repeated option {key!r} (known: {', '.join(known)})"
            )
        tls[key] = value
    for key in _MYSQL_TLS_FILES:
        if key in tls and not os.path.isfile(tls[key]):
            raise ConfigError(f"{ENV_DB_URL}: {key} {tls[key]} is not a readable file")
    if "ssl_key" in tls and "ssl_cert" not in tls:
        raise ConfigError(f"{ENV_DB_URL}: ssl_key needs ssl_cert (the client certificate)")
    mode = tls.get("ssl_mode", "").lower()
    if mode and mode not in MYSQL_TLS_MODES:
        raise ConfigError(
            f"{ENV_DB_URL}: ssl_mode {mode!r} is not one of {', '.join(MYSQL_TLS_MODES)}"
        )
    if not mode and any(k in tls for k in _MYSQL_TLS_FILES):
        mode = DEFAULT_MYSQL_TLS_MODE  # a CA or a client certificate given: TLS, verified
    if mode in ("disabled", "preferred") and len(tls) > 1:
        # pymysql would ignore the files: say so rather than seem to check the server
        raise ConfigError(f"{ENV_DB_URL}: ssl_mode={mode} uses no TLS files; drop them")
    tls["ssl_mode"] = "" if mode == "preferred" else mode
    return tls
