"""Crawler traps: URL spaces without end, computed on lookup instead of stored.

- Calendar: ``/calendar/YYYY/MM`` links to the next month (``02`` or
  ``../2025/01``), forever.
- Repeated segments: ``/trap/a/`` links to ``a/``, so ``/trap/a/a/``,
  ``/trap/a/a/a/``, … forever.

Every host answers these paths; the links into them are on host 0.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from srcrawl.testweb import model
from srcrawl.testweb.urls import origin_of

CALENDAR_START = "/calendar/2024/01"
REPEAT_START = "/trap/a/"

_CALENDAR_RE = re.compile(r"^/calendar/(\d{4,})/(\d{2})$")
_REPEAT_RE = re.compile(r"^/trap/(?:a/)+$")


def _calendar(path: str) -> tuple[int, int] | None:
    m = _CALENDAR_RE.match(path)
    if not m:
        return None
    year, month = int(m.group(1)), int(m.group(2))
    return (year, month) if 1 <= month <= 12 else None


def is_trap(url: str) -> bool:
    """Whether canonical ``url`` lies in a trap (whatever its host)."""
    parts = urlsplit(url)
    if parts.query:
        return False
    return _calendar(parts.path) is not None or bool(_REPEAT_RE.match(parts.path))


def trap_page(url: str) -> model.Page | None:
    """The page at canonical ``url`` if it lies in a trap, else None."""
    parts = urlsplit(url)
    if parts.query:
        return None
    origin = origin_of(url)
    month = _calendar(parts.path)
    if month is not None:
        year, mon = month
        if mon == 12:
            href, target = f"../{year + 1:04d}/01", f"/calendar/{year + 1:04d}/01"
        else:
            href, target = f"{mon + 1:02d}", f"/calendar/{year:04d}/{mon + 1:02d}"
        link = model.Link(target=origin + target, href=href)
        return model.Page(url=url, template="calendar", links=(link,))
    if _REPEAT_RE.match(parts.path):
        link = model.Link(target=f"{url}a/", href="a/")
        return model.Page(url=url, template="repeat", links=(link,))
    return None
