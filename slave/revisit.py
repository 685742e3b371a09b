"""What a recrawl needs on the slave: conditional GET headers, validators, the digest.

Whether a page changed is decided by a digest of what the index sees: its
title and its extracted text after the parser (markup, scripts, styles,
comments and attributes never count), with every run of digits taken as one
mark. So a page whose only change is a timestamp, a counter or a date in its
footer is unchanged and is neither stored nor indexed again; the price is
that a page whose only change is a number (a score, a price) is taken as
unchanged too, until its words change. A 304 never reaches the digest: it
is unchanged by the server's word.
"""

from __future__ import annotations

import hashlib
import re

from srcrawl.queues.crawl_protocol import MAX_VALIDATOR_CHARS, FetchTask
from srcrawl.slave.fetch import NOT_MODIFIED, FetchResult

_DIGITS = re.compile(r"\d+")

GONE_STATUSES = frozenset({404, 410})


def page_digest(title: str, text: str) -> int:
    """A signed 64-bit fingerprint of a page's title and text, digits folded (see above)."""
    folded = _DIGITS.sub("#", f"{title}\x00{text}")
    raw = hashlib.blake2b(folded.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(raw, "big", signed=True)


def conditional_headers(task: FetchTask) -> list[str]:
    """If-None-Match / If-Modified-Since from the stored page's validators (a recrawl)."""
    out = []
    if task.etag:
        out.append(f"If-None-Match: {task.etag}")
    if task.modified:
        out.append(f"If-Modified-Since: {task.modified}")
    return out


def validators(result: FetchResult, task: FetchTask) -> tuple[str | None, str | None]:
    """The response's ETag and Last-Modified (a 304 may omit them: the stored ones hold)."""
    etag = _header(result, "etag")
    modified = _header(result, "last-modified")
    if result.status == NOT_MODIFIED:
        return etag or task.etag, modified or task.modified
    return etag, modified


def _header(result: FetchResult, name: str) -> str | None:
    value = result.headers.get(name)
    if not value or len(value) > MAX_VALIDATOR_CHARS:
        return None  # a validator too long to store costs a full fetch next time, no more
    return value


def is_gone(result: FetchResult) -> bool:
    """The page is not there any more: 404, 410, or a redirect now."""
    return result.error is None and (result.status in GONE_STATUSES or result.redirect is not None)
