"""Who may use the portal's admin area: the password, the sessions, the login limit.

- The password comes from ``SRCRAWL_ADMIN_PASSWORD`` or the file ``SRCRAWL_ADMIN_PASSWORD_FILE``
  names; the process keeps only its scrypt hash (a random salt of its own) and compares
  hashes in constant time. No password: the admin area is disabled.
- Sessions live in Redis (``admin_session``, expiring after ADMIN_SESSION_TTL): every
  worker process of the portal sees a login made through another, and logging out ends
  the session everywhere. The cookie holds the session id and its HMAC under a random
  key kept in Redis (``admin_secret``), so a cookie changed by one bit is refused before
  Redis is asked about it.
- Each form posted in a session carries a CSRF token: the HMAC of its session id under
  another use of the same key, checked on every POST.
- Failed logins are counted in Redis per client address (``admin_login_failures``, a
  window of ADMIN_LOGIN_WINDOW seconds): the count is the same whichever worker a
  request reaches, which a count in each process would not be.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis

from srcrawl.core.credentials import read_setting
from srcrawl.core.defaults import ADMIN_LOGIN_FAILURES, ADMIN_LOGIN_WINDOW, ADMIN_SESSION_TTL
from srcrawl.settings.config import Config

ENV_ADMIN_PASSWORD = "SRCRAWL_ADMIN_PASSWORD"
SESSION_COOKIE = "srcrawl_admin"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
"""scrypt's cost: 16 MiB and 0.05-0.2 s of CPU a hash, once per login attempt."""


@dataclass(frozen=True)
class AdminPassword:
    """A password, as its salted scrypt hash only."""

    salt: bytes
    digest: bytes = field(repr=False)

    @classmethod
    def of(cls, password: str) -> AdminPassword:
        salt = secrets.token_bytes(16)
        return cls(salt, _scrypt(password, salt))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AdminPassword | None:
        """The password ``SRCRAWL_ADMIN_PASSWORD`` (or its ``_FILE``) sets, or None."""
        value, _file = read_setting(os.environ if env is None else env, ENV_ADMIN_PASSWORD)
        return cls.of(value) if value else None

    def matches(self, given: str) -> bool:
        return hmac.compare_digest(_scrypt(given, self.salt), self.digest)


def _scrypt(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, **_SCRYPT)


def is_loopback(address: str | None) -> bool:
    """Is ``address`` (a request's client host) a loopback address?"""
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:  # no IP address (a test client's name, a Unix socket)
        return False


class AdminSessions:
    """The admin sessions of one job's portal, and its failed logins, in Redis."""

    def __init__(self, cfg: Config) -> None:
        self.cfg, self.keys = cfg, cfg.keys
        self._key: bytes | None = None

    @property
    def client(self) -> redis.Redis:
        # asked for at the first use: building the app connects to nothing
        return self.cfg.redis()

    def key(self) -> bytes:
        """The signing key every worker shares: made once (SET NX), then read and kept."""
        if self._key is None:
            self.client.set(self.keys.admin_secret, secrets.token_bytes(32), nx=True)
            self._key = self.client.get(self.keys.admin_secret)
        return self._key

    def _sign(self, use: str, session: str) -> str:
        mac = hmac.new(self.key(), f"{use}:{session}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def start(self) -> str:
        """A new session; returns its cookie value."""
        session = secrets.token_urlsafe(24)
        self.client.set(self.keys.admin_session(session), b"1", ex=ADMIN_SESSION_TTL)
        return f"{session}.{self._sign('session', session)}"

    def session_of(self, cookie: str | None) -> str | None:
        """The live session a cookie names, or None (none, forged, ended or expired)."""
        session, _, mac = (cookie or "").partition(".")
        if not session or not hmac.compare_digest(mac, self._sign("session", session)):
            return None
        return session if self.client.exists(self.keys.admin_session(session)) else None

    def end(self, session: str) -> None:
        self.client.delete(self.keys.admin_session(session))

    def csrf_token(self, session: str) -> str:
        return self._sign("csrf", session)

    def csrf_ok(self, session: str, token: str | None) -> bool:
        return hmac.compare_digest((token or "").encode(), self.csrf_token(session).encode())

    def locked_out(self, client: str) -> bool:
        """Has ``client`` failed to log in ADMIN_LOGIN_FAILURES times in the window?"""
        n = self.client.get(self.keys.admin_login_failures(client))
        return n is not None and int(n) >= ADMIN_LOGIN_FAILURES

    def failed(self, client: str) -> None:
        key = self.keys.admin_login_failures(client)
        pipe = self.client.pipeline(transaction=True)
        # the window starts at the first failure (NX); INCR keeps the key's expiry
        pipe.set(key, 0, ex=ADMIN_LOGIN_WINDOW, nx=True)
        pipe.incr(key)
        pipe.execute()
