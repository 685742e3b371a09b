"""A test web that changes over time: which version of each page is live at time t.

A :class:`ChangeSchedule` is seeded and deterministic: from its seed and a
page's URL alone it decides whether the page never changes, changes every
``period`` seconds (one of ``periods``), or disappears ``gone_at`` seconds after
``start`` (then answered 404 or 410). Version ``v`` of a changing page went
live at ``start + v * period``; its words are drawn anew (its links and planted
terms stay), its ETag names the version and its Last-Modified is the time it
went live, so a conditional GET is answered 304 exactly while the client's
copy is the live one. Tests and benchmarks ask :func:`live_version` what a
fresh store holds at t.

Only regular pages change or disappear: roots, private pages and special
pages stay as they are, so every page remains reachable while its neighbours
change. A web without a schedule (the default) never changes and sends no
validators.
"""

from __future__ import annotations

import email.utils
import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from xml.sax.saxutils import escape

STATIC, CHANGING, GONE = "static", "changing", "gone"

CHANGING_TEMPLATES = ("regular",)
"""Templates of the pages a schedule may change or take away."""


def _unit(seed: int, url: str, salt: str) -> float:
    """A number in [0, 1) fixed by the seed, the URL and ``salt`` (no global random state)."""
    digest = hashlib.blake2b(f"{seed}:{salt}:{url}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class ChangeSchedule:
    """Which pages change, how often, and which disappear (see the module doc)."""

    start: float
    """Epoch seconds when version 0 of every page went live."""
    seed: int = 0
    changing: float = 0.3
    """Share of the regular pages that change."""
    periods: tuple[float, ...] = (2.0, 4.0)
    """Seconds between two versions of a changing page (one drawn per page)."""
    gone: float = 0.05
    """Share of the regular pages that disappear."""
    gone_after: float = 5.0
    """A page that disappears does so at a time drawn in [gone_after / 2, gone_after)."""
    origins: tuple[str, ...] = ()
    """The web's host origins, in order: when given, a page's fate is drawn from its host's
    index and its path instead of its URL, so copies of one web on other ports (a benchmark
    comparing two crawls) change alike."""
    sitemap: bool = False
    """Every host serves ``/sitemap.xml`` (:data:`SITEMAP_PATH`): its regular pages still
    there, each with the time its live version went live as ``<lastmod>`` (see
    :func:`live_sitemap`)."""

    def __post_init__(self) -> None:
        if not self.periods or min(self.periods) <= 0:
            raise ValueError("change periods must be positive")
        if self.changing < 0 or self.gone < 0 or self.changing + self.gone > 1:
            raise ValueError("the changing and gone shares must be within [0, 1] together")

    def kind(self, url: str) -> tuple[str, float]:
        """(STATIC, 0), (CHANGING, period) or (GONE, seconds after start it disappears)."""
        key = self._key(url)
        u = _unit(self.seed, key, "kind")
        if u < self.changing:
            pick = int(_unit(self.seed, key, "period") * len(self.periods))
            return CHANGING, self.periods[pick]
        if u < self.changing + self.gone:
            return GONE, self.gone_after * (0.5 + 0.5 * _unit(self.seed, key, "gone"))
        return STATIC, 0.0

    def _key(self, url: str) -> str:
        """What a page's fate is drawn from: its URL, or its host's index and its path."""
        for i, origin in enumerate(self.origins):
            if url.startswith(origin + "/"):
                return f"host{i}{url[len(origin) :]}"
        return url

    def version_at(self, url: str, t: float) -> int | None:
        """The version of ``url`` live at epoch ``t`` (0 before ``start``); None: gone."""
        kind, value = self.kind(url)
        elapsed = max(0.0, t - self.start)
        if kind == CHANGING:
            return int(elapsed // value)
        if kind == GONE and elapsed >= value:
            return None
        return 0

    def modified_at(self, url: str, version: int) -> float:
        """When ``version`` of ``url`` went live (epoch seconds)."""
        kind, value = self.kind(url)
        return self.start + (version * value if kind == CHANGING else 0.0)

    def gone_status(self, url: str) -> int:
        """What a page answers once it has disappeared: 410 for some, 404 for the others."""
        return 410 if _unit(self.seed, self._key(url), "status") < 0.5 else 404


def etag(url: str, version: int) -> str:
    """The ETag of ``version`` of ``url`` (quoted, strong): the version comes first."""
    tag = hashlib.blake2b(url.encode(), digest_size=4).hexdigest()
    return f'"{version}-{tag}"'


def version_of_etag(value: str | None) -> int | None:
    """The version an ETag of :func:`etag` names; None for anything else."""
    if not value:
        return None
    head = value.strip().strip('"').partition("-")[0]
    return int(head) if head.isdigit() else None


def http_date(t: float) -> str:
    return email.utils.formatdate(int(t), usegmt=True)


def not_modified(
    schedule: ChangeSchedule,
    url: str,
    version: int,
    if_none_match: str | None,
    if_modified_since: str | None,
) -> bool:
    """Whether a conditional GET with these headers is answered 304 (RFC 9110 §13.2.2:
    If-None-Match decides when present, If-Modified-Since only without it)."""
    if if_none_match is not None:
        tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
        return "*" in tags or etag(url, version) in tags
    if if_modified_since is not None:
        try:
            since = email.utils.parsedate_to_datetime(if_modified_since).timestamp()
        except (TypeError, ValueError):
            return False
        return int(schedule.modified_at(url, version)) <= since
    return False


SITEMAP_PATH = "/sitemap.xml"
_SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def live_sitemap(web: object, origin: str, t: float) -> bytes:
    """The sitemap of ``origin`` at epoch ``t``: each regular page not gone, with the time
    its live version went live as ``<lastmod>`` (to the millisecond: a sitemap to the
    second would say a page changed before a fetch that came just before the change)."""
    schedule = web.changes  # type: ignore[attr-defined]
    rows = []
    for url, page in web.pages.items():  # type: ignore[attr-defined]
        if page.template not in CHANGING_TEMPLATES or not url.startswith(origin + "/"):
            continue
        version = live_version(web, url, t)
        if version is None:
            continue
        when = datetime.fromtimestamp(schedule.modified_at(url, version), timezone.utc)
        mod = when.isoformat(timespec="milliseconds")
        rows.append(f"<url><loc>{escape(url)}</loc><lastmod>{mod}</lastmod></url>")
    body = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{_SITEMAP_NS}">'
    return (body + "".join(rows) + "</urlset>").encode()


def live_version(web: object, url: str, t: float) -> int | None:
    """The version of page ``url`` of ``web`` live at epoch ``t``: 0 for a page that never
    changes (or any page of a web without a schedule), None once it has disappeared."""
    schedule = getattr(web, "changes", None)
    page = web.pages.get(url)  # type: ignore[attr-defined]
    if schedule is None or page is None or page.template not in CHANGING_TEMPLATES:
        return 0
    return schedule.version_at(url, t)
