"""robots.txt, parsed with Protego and cached in Redis for every slave of a job.

One key per origin (``scheme://host:port``) holds the outcome of its last
robots.txt fetch, with a TTL:

- ``R`` + the robots.txt body (2xx): rules; lives ``ttl`` seconds.
- ``A`` (4xx other than 429, too many redirects, a broken redirect): no
  robots.txt, everything is allowed; lives ``ttl`` seconds. A robots.txt
  the crawl's fetch policy does not let the slave request (a redirect out
  of the scope or to a refused address) is no robots.txt either, as RFC
  9309 treats a redirect chain that reaches none; that answer lives
  ``defer`` seconds, so a changed policy is soon asked again.
- ``D`` + a Unix time (5xx, 429, timeout, connection errors): the host is
  deferred until then; lives until then (``defer`` seconds), after which the
  next slave to need the host fetches robots.txt again.

:meth:`RobotsCache.lookup` only reads the cache; the slave calls
:meth:`RobotsCache.fetch_and_store` on a miss. A slave asks for the rules of
a host before every fetch, so the rules it read are kept in the process for
up to ``local_ttl`` seconds (never past the Redis key's own expiry): a
round trip per page was a tenth of a slave's CPU. Parsed rule sets are
memoised per process by the hash of the body, so hosts looked up again and
again are parsed once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import urljoin

import redis
import xxhash
from protego import Protego

from srcrawl.core.defaults import (
    DEFAULT_ROBOTS_DEFER,
    DEFAULT_ROBOTS_LOCAL_TTL,
    DEFAULT_ROBOTS_MAX_BYTES,
    DEFAULT_ROBOTS_MAX_REDIRECTS,
    DEFAULT_ROBOTS_MEMO,
    DEFAULT_ROBOTS_TTL,
)
from srcrawl.core.keys import Keys
from srcrawl.core.useragent import product_token
from srcrawl.slave.fetch import POLICY_ERRORS, Fetcher, FetchResult

_RULES = b"R"
_ALLOW_ALL = b"A"
_DEFER = b"D"


def robots_url(origin: str) -> str:
    """Where ``origin``'s robots.txt is."""
    return f"{origin}/robots.txt"


def robots_states(client: redis.Redis, keys: Keys, origins: list[str]) -> dict[str, str]:
    """origin -> what the shared cache holds of its robots.txt, in words (one round trip):
    ``rules``, ``none`` (no robots.txt: all allowed), ``deferred until HH:MM:SS`` (the host
    failed to answer), or ``not read`` (never, or the cached answer expired)."""
    pipe = client.pipeline(transaction=False)
    for o in origins:
        pipe.get(keys.robots(o))
    out = {}
    for o, value in zip(origins, pipe.execute(), strict=True):
        if value is None:
            out[o] = "not read"
        elif value.startswith(_RULES):
            out[o] = "rules"
        elif value.startswith(_DEFER):
            until = time.strftime("%H:%M:%S", time.localtime(float(value[1:] or 0)))
            out[o] = f"deferred until {until}"
        else:
            out[o] = "none"
    return out


class RobotsRules:
    """What robots.txt says about one origin, for one user agent."""

    __slots__ = ("_parser", "deferred_until", "origin", "source", "user_agent")

    def __init__(
        self,
        origin: str,
        user_agent: str,
        *,
        parser: Protego | None = None,
        deferred_until: float | None = None,
    ) -> None:
        self.origin = origin
        # groups are matched on the crawler's name alone (RFC 9309): Protego finds a
        # group's name anywhere in what it is given, the contact's domain included
        self.user_agent = product_token(user_agent)
        self._parser = parser
        self.deferred_until = deferred_until
        """Unix time before which the host must not be fetched (robots.txt unavailable)."""
        self.source = "defer" if deferred_until is not None else "rules" if parser else "allow"
        """``rules`` (a robots.txt), ``allow`` (none: allow all) or ``defer``."""

    def allowed(self, url: str) -> bool:
        """May ``url`` be fetched? Always False while the host is deferred."""
        if self.deferred_until is not None:
            return False
        if self._parser is None:
            return True
        return self._parser.can_fetch(url, self.user_agent)

    @property
    def sitemaps(self) -> list[str]:
        """The ``Sitemap:`` URLs of robots.txt, absolute (a relative one against robots.txt)."""
        if self._parser is None:
            return []
        base = robots_url(self.origin)
        return [urljoin(base, url.strip()) for url in self._parser.sitemaps if url.strip()]

    @property
    def crawl_delay(self) -> float | None:
        """Seconds between requests that robots.txt asks of this user agent, if any."""
        if self._parser is None:
            return None
        delay = self._parser.crawl_delay(self.user_agent)
        return float(delay) if delay is not None else None

    def __repr__(self) -> str:
        return f"RobotsRules({self.origin!r}, {self.source})"


class RobotsCache:
    """The job-wide robots.txt cache in Redis, shared by every slave.

    ``fetcher`` fetches robots.txt (its own caps and timeouts apply); ``ttl``
    is how long a robots.txt or an allow-all stays cached; ``defer`` how long
    a host waits after its robots.txt could not be had; ``local_ttl`` how
    long this process answers from what it last read (0: ask Redis each time).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        fetcher: Fetcher,
        ttl: float = DEFAULT_ROBOTS_TTL,
        user_agent: str | None = None,
        *,
        defer: float = DEFAULT_ROBOTS_DEFER,
        max_bytes: int = DEFAULT_ROBOTS_MAX_BYTES,
        max_redirects: int = DEFAULT_ROBOTS_MAX_REDIRECTS,
        memo_size: int = DEFAULT_ROBOTS_MEMO,
        local_ttl: float = DEFAULT_ROBOTS_LOCAL_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0 or defer <= 0 or local_ttl < 0:
            raise ValueError("robots.txt ttl and defer must be positive, local_ttl not negative")
        self.client = client
        self.keys = keys
        self.fetcher = fetcher
        self.ttl = ttl
        self.user_agent = fetcher.user_agent if user_agent is None else user_agent
        """Whose rules apply: by default the agent the fetcher sends."""
        self.defer = defer
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.memo_size = memo_size
        self.clock = clock
        self.local_ttl = local_ttl
        self._memo: OrderedDict[int, Protego] = OrderedDict()
        self._local: OrderedDict[str, tuple[float, RobotsRules]] = OrderedDict()
        self._lock = threading.Lock()
        self.parses = 0
        """robots.txt bodies parsed by this process (memo misses)."""

    # -- reading ------------------------------------------------------------
    def lookup(self, origin: str) -> RobotsRules | None:
        """The cached rules of ``origin``, or None when the cache has none.

        Answered from this process's copy while it is fresh; otherwise one
        round trip (GET and PTTL), whose answer is kept for next time.
        """
        if self.local_ttl:
            now = time.monotonic()
            with self._lock:
                kept = self._local.get(origin)
            if kept is not None and kept[0] > now:
                return self._current(kept[1])
            key = self.keys.robots(origin)
            pipe = self.client.pipeline(transaction=False)
            pipe.get(key)
            pipe.pttl(key)
            value, pttl = pipe.execute()
            rules = self._rules(origin, value)
            if rules is not None:
                self._keep(origin, rules, pttl / 1000 if pttl > 0 else 0.0)
            return self._current(rules)
        return self._current(self._rules(origin, self.client.get(self.keys.robots(origin))))

    def _current(self, rules: RobotsRules | None) -> RobotsRules | None:
        """``rules``, or None (a miss: fetch again) for a deferral whose time has come.

        The key of a deferral outlives its time by the moment between computing
        it and storing it; a task sent back exactly when the deferral ends must
        fetch robots.txt again, not be deferred once more without a request
        (which would spend one of the host's tries on nothing).
        """
        deferred = rules is not None and rules.deferred_until is not None
        if deferred and rules.deferred_until <= self.clock():
            return None
        return rules

    def _keep(self, origin: str, rules: RobotsRules, key_ttl: float) -> None:
        """Remember ``rules`` until the Redis key expires, for at most ``local_ttl``."""
        ttl = min(self.local_ttl, key_ttl)
        if ttl <= 0:
            return
        with self._lock:
            self._local[origin] = (time.monotonic() + ttl, rules)
            self._local.move_to_end(origin)
            while len(self._local) > self.memo_size:
                self._local.popitem(last=False)

    def _rules(self, origin: str, value: bytes | None) -> RobotsRules | None:
        if not value:
            return None
        kind, data = value[:1], value[1:]
        if kind == _RULES:
            return RobotsRules(origin, self.user_agent, parser=self._parsed(data))
        if kind == _DEFER:
            try:
                return RobotsRules(origin, self.user_agent, deferred_until=float(data))
            except ValueError:
                return None  # not ours: treat as a miss, the next store overwrites it
        if kind == _ALLOW_ALL:
            return RobotsRules(origin, self.user_agent)
        return None

    def _parsed(self, body: bytes) -> Protego:
        digest = xxhash.xxh64_intdigest(body)
        with self._lock:
            parser = self._memo.get(digest)
            if parser is not None:
                self._memo.move_to_end(digest)
                return parser
        # Parse outside the lock: two threads may both parse a new body, once.
        text = body.decode("utf-8", "replace").lstrip("\ufeff")
        parser = Protego.parse(text)
        with self._lock:
            self.parses += 1
            self._memo[digest] = parser
            while len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)
        return parser

    # -- fetching -----------------------------------------------------------
    def fetch_and_store(self, origin: str) -> tuple[RobotsRules, FetchResult]:
        """Fetch ``origin``'s robots.txt, store the outcome for every slave, return it.

        Redirects are followed up to ``max_redirects`` hops (http and https
        only, each hop through the fetcher's policy, as every fetch). The
        FetchResult is the last hop's.
        """
        result = self.fetcher.fetch(robots_url(origin))
        hops = 0
        while result.redirect is not None and hops < self.max_redirects:
            hops += 1
            result = self.fetcher.fetch(result.redirect)
        return self.store(origin, result), result

    def store(self, origin: str, result: FetchResult) -> RobotsRules:
        """Store what fetching ``origin``'s robots.txt gave (its last hop) for every slave.

        For callers that fetch robots.txt themselves (the crawl's multi
        handle), following up to ``max_redirects`` redirects as
        :meth:`fetch_and_store` does.
        """
        key = self.keys.robots(origin)
        status = result.status
        if result.error in POLICY_ERRORS:
            self.client.set(key, _ALLOW_ALL, px=int(self.defer * 1000))
            rules = RobotsRules(origin, self.user_agent)
            kept = self.defer
        elif 200 <= status < 300 and result.error is None:
            body = result.body[: self.max_bytes]
            self.client.set(key, _RULES + body, px=int(self.ttl * 1000))
            rules = RobotsRules(origin, self.user_agent, parser=self._parsed(body))
            kept = self.ttl
        elif 300 <= status < 500 and status != 429:
            # No robots.txt (4xx), or one behind a redirect chain too long or
            # broken: RFC 9309 says crawl as if there were none.
            self.client.set(key, _ALLOW_ALL, px=int(self.ttl * 1000))
            rules = RobotsRules(origin, self.user_agent)
            kept = self.ttl
        else:
            # 5xx, 429, timeouts, connection errors: RFC 9309 says assume
            # complete disallow for now; try again after a while.
            until = self.clock() + self.defer
            self.client.set(key, _DEFER + repr(until).encode(), px=int(self.defer * 1000))
            rules = RobotsRules(origin, self.user_agent, deferred_until=until)
            kept = self.defer
        if self.local_ttl:
            self._keep(origin, rules, kept)
        return rules
