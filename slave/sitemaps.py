"""Sitemaps (sitemaps.org): page URLs and their ``<lastmod>``, read with hard limits.

A sitemap is a ``<urlset>`` of ``<url><loc>…</loc><lastmod>…</lastmod></url>``
or a ``<sitemapindex>`` of ``<sitemap><loc>…</loc></sitemap>`` naming more
sitemaps, either one possibly gzip-compressed. Everything about it may be
hostile, so :func:`read_sitemaps` bounds each thing it could be made to do:

- bytes after decompression (:data:`DEFAULT_SITEMAP_MAX_BYTES`): a gzip bomb
  is inflated only that far, and the XML is parsed from those bytes alone;
- URLs per sitemap, levels of indexes below the first sitemap, sitemaps
  fetched per host (:data:`DEFAULT_SITEMAP_MAX_URLS`,
  :data:`DEFAULT_SITEMAP_MAX_DEPTH`, :data:`DEFAULT_SITEMAPS_PER_HOST`);
- the parser: lxml's ``iterparse`` with entities left unresolved, no DTD
  loaded, no network and libxml2's default size limits (``huge_tree`` off),
  each entry cleared once read so memory stays flat;
- where it goes: a sitemap URL is fetched only if ``allowed`` says so (the
  crawl's scope, the host's robots.txt, the same origin as the robots.txt
  that named it), each once (an index naming itself or a loop is read once).

:func:`read_host_sitemaps` reads one host's sitemaps for the crawl slave:
the ``Sitemap:`` lines of its robots.txt or a probe of ``/sitemap.xml``,
each request through the crawl's fetcher and policy, after the host's
politeness wait.

Malformed XML keeps the entries read before the error. Whatever was cut,
refused or malformed is counted in the :class:`SitemapReport`, never raised.
"""

from __future__ import annotations

import io
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from lxml import etree

from srcrawl.core.defaults import (
    DEFAULT_ROBOTS_MAX_REDIRECTS,
    DEFAULT_SITEMAP_MAX_BYTES,
    DEFAULT_SITEMAP_MAX_DEPTH,
    DEFAULT_SITEMAP_MAX_URLS,
    DEFAULT_SITEMAP_PROBE,
    DEFAULT_SITEMAPS_PER_HOST,
)
from srcrawl.core.urls import InvalidURL, canonicalize, origin
from srcrawl.slave.fetch import Fetcher
from srcrawl.slave.robots import RobotsRules

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class SitemapLimits:
    max_bytes: int = DEFAULT_SITEMAP_MAX_BYTES
    max_urls: int = DEFAULT_SITEMAP_MAX_URLS
    max_depth: int = DEFAULT_SITEMAP_MAX_DEPTH
    per_host: int = DEFAULT_SITEMAPS_PER_HOST


@dataclass
class SitemapReport:
    """What reading a host's sitemaps gave, and what was cut or refused on the way."""

    urls: dict[str, float | None] = field(default_factory=dict)
    """canonical page URL -> its ``<lastmod>`` (epoch seconds), None when it gave none."""
    fetched: int = 0  # sitemaps fetched
    refused: int = 0  # sitemap URLs not fetched: out of scope, disallowed, another origin
    capped: int = 0  # sitemaps cut: too large, too many URLs, too deep, too many per host
    malformed: int = 0  # sitemaps whose XML or gzip broke off (what came before is kept)
    invalid: int = 0  # <loc> values that are no URL

    def counters(self) -> dict[str, int]:
        """The crawl counters this adds to (``srcrawl status``)."""
        names = {
            "sitemaps_fetched": self.fetched,
            "sitemap_refused": self.refused,
            "sitemap_capped": self.capped,
            "sitemap_malformed": self.malformed,
            "sitemap_invalid_urls": self.invalid,
            "sitemap_urls": len(self.urls),
        }
        return {k: v for k, v in names.items() if v}


def parse_lastmod(text: str | None) -> float | None:
    """A W3C datetime (``2024``, ``2024-05``, ``2024-05-06``, ``2024-05-06T10:00:00+02:00``)
    as epoch seconds; None when it is none (UTC when it names no zone)."""
    if not text:
        return None
    value = text.strip()
    if len(value) == 4:
        value += "-01-01"
    elif len(value) == 7:
        value += "-01"
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def inflate(body: bytes, max_bytes: int) -> tuple[bytes, bool, bool]:
    """(the sitemap's bytes, whether they were cut at ``max_bytes``, whether gzip broke).

    A gzip body is inflated no further than ``max_bytes`` + 1 bytes, whatever it
    claims; a plain one is cut there.
    """
    if not body.startswith(_GZIP_MAGIC):
        return body[:max_bytes], len(body) > max_bytes, False
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error:
        return b"", False, True
    return out[:max_bytes], len(out) > max_bytes, False


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _child_text(element: etree._Element, name: str) -> str | None:
    for child in element:
        if _local(child.tag) == name:
            return (child.text or "").strip() or None
    return None


@dataclass
class _Parsed:
    pages: list[tuple[str, float | None]] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    capped: bool = False
    malformed: bool = False


def parse_sitemap(data: bytes, max_urls: int) -> _Parsed:
    """The entries of one sitemap or index: at most ``max_urls`` in all."""
    out = _Parsed()
    events = etree.iterparse(
        io.BytesIO(data),
        events=("end",),
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    try:
        for _event, element in events:
            kind = _local(element.tag)
            if kind not in ("url", "sitemap"):
                continue
            if len(out.pages) + len(out.sitemaps) >= max_urls:
                out.capped = True
                break
            loc = _child_text(element, "loc")
            if loc is not None:
                if kind == "url":
                    out.pages.append((loc, parse_lastmod(_child_text(element, "lastmod"))))
                else:
                    out.sitemaps.append(loc)
            element.clear()
    except etree.XMLSyntaxError:
        out.malformed = True
    return out


def read_sitemaps(
    starts: Iterable[str],
    fetch: Callable[[str], bytes | None],
    allowed: Callable[[str], bool],
    limits: SitemapLimits | None = None,
) -> SitemapReport:
    """Read the sitemaps ``starts`` name and the ones their indexes name, within ``limits``.

    ``fetch`` returns a sitemap's body (None when it could not be had: a 404, a
    timeout, a redirect the fetch policy refused); ``allowed`` says whether a
    sitemap URL may be fetched at all.
    """
    limits = limits or SitemapLimits()
    report = SitemapReport()
    todo: deque[tuple[str, int]] = deque((url, 0) for url in starts)
    visited: set[str] = set()
    while todo:
        url, depth = todo.popleft()
        if url in visited:
            continue  # an index naming itself, or two naming one sitemap
        visited.add(url)
        if not allowed(url):
            report.refused += 1
            continue
        if report.fetched >= limits.per_host:
            report.capped += 1
            continue
        report.fetched += 1
        body = fetch(url)
        if not body:
            continue
        parsed = _read_one(body, limits, report)
        _take_pages(parsed.pages, report)
        if parsed.sitemaps and depth + 1 > limits.max_depth:
            report.capped += 1  # an index below the deepest level followed
            continue
        todo.extend((child, depth + 1) for child in parsed.sitemaps)
    return report


def _read_one(body: bytes, limits: SitemapLimits, report: SitemapReport) -> _Parsed:
    data, cut, broken = inflate(body, limits.max_bytes)
    parsed = parse_sitemap(data, limits.max_urls) if data else _Parsed()
    report.capped += cut or parsed.capped
    # a sitemap cut at max_bytes breaks off mid-XML: counted as cut, not as malformed
    report.malformed += broken or (parsed.malformed and not cut)
    return parsed


def _take_pages(pages: list[tuple[str, float | None]], report: SitemapReport) -> None:
    for loc, lastmod in pages:
        try:
            url = canonicalize(loc)
        except InvalidURL:
            report.invalid += 1
            continue
        if lastmod is not None or url not in report.urls:
            report.urls[url] = lastmod


def read_host_sitemaps(
    rules: RobotsRules,
    fetcher: Fetcher,
    wait: Callable[[float], float],
    *,
    after_ms: float,
    limits: SitemapLimits | None = None,
    max_redirects: int = DEFAULT_ROBOTS_MAX_REDIRECTS,
    stopping: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[SitemapReport, float]:
    """Read the sitemaps of the origin whose robots.txt gave ``rules``, politely.

    The ``Sitemap:`` lines of robots.txt, or, when it names none, one probe of
    :data:`DEFAULT_SITEMAP_PROBE`. A sitemap URL (each redirect hop too) is
    fetched only on that origin, in the crawl's scope (``fetcher``'s policy,
    which also checks every address) and allowed by ``rules``. Before each
    request the host's politeness is waited out: ``wait(fetch_ms)`` seconds
    after a request that took ``fetch_ms`` (the robots.txt one took
    ``after_ms``). Returns the report and the last request's time in ms.
    """
    site = rules.origin
    last = [after_ms]
    hops_refused = [0]

    def allowed(url: str) -> bool:
        try:
            url = canonicalize(url)
        except InvalidURL:
            return False
        policy = fetcher.policy
        return (
            origin(url) == site
            and rules.allowed(url)
            and (policy is None or policy.refuse_url(url) is None)
        )

    def fetch(url: str) -> bytes | None:
        url = canonicalize(url)  # allowed() said it can be
        for _hop in range(max_redirects + 1):
            if stopping():
                return None
            sleep(wait(last[0]))
            result = fetcher.fetch(url)
            last[0] = result.elapsed_ms
            if result.redirect is None:
                return result.body if result.ok else None
            if not allowed(result.redirect):
                hops_refused[0] += 1
                return None
            url = canonicalize(result.redirect)
        return None  # too many redirects

    report = read_sitemaps(rules.sitemaps or [site + DEFAULT_SITEMAP_PROBE], fetch, allowed, limits)
    report.refused += hops_refused[0]
    return report, last[0]
