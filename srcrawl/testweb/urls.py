"""The canonical URL form of the synthetic web, and how hrefs resolve to it.

Canonical form: lowercase scheme and host, no default port, no fragment, dot
segments removed (RFC 3986 §5.2.4), an empty path written ``/``, an empty
query dropped, and query parameters sorted as ``(key, value)`` strings
(``?b=2&a=1`` becomes ``?a=1&b=2``; their encoding is left as written).
Only ``http`` and ``https`` URLs with a host and a valid port are URLs to
crawl; everything else (``javascript:``, ``mailto:``, ``data:``, a malformed
IPv6 host, an out-of-range port, no host) canonicalizes to ``None``.

This is written apart from :mod:`srcrawl.core.urls` on purpose: the test web is
the oracle the crawler is checked against, and an oracle that shared the
crawler's code would share its bugs.
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

CRAWLABLE_SCHEMES = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def remove_dot_segments(path: str) -> str:
    """Resolve ``.`` and ``..`` segments of an absolute path (RFC 3986 §5.2.4)."""
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == ".":
            if last:
                out.append("")
        elif seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    result = "/".join(out)
    if not result.startswith("/"):
        result = "/" + result
    return result


def sort_query(query: str) -> str:
    """Query parameters in the canonical order (sorted ``key=value`` pairs, blanks dropped)."""
    params = [p for p in query.split("&") if p]
    return "&".join(sorted(params, key=lambda p: tuple(p.partition("=")[::2])))


def canonical(url: str, base: str | None = None) -> str | None:
    """The canonical form of ``url`` (resolved against ``base``), or None if it is no URL to crawl.

    Never raises on bad input: whatever cannot be a crawlable http(s) URL is None.
    """
    url = url.strip()
    try:
        ref = urlsplit(url)
        if ref.scheme and url[len(ref.scheme) + 1 :].startswith("//") and not ref.hostname:
            return None  # "http://" names no host; urljoin would fall back to the base
        if base is not None:
            url = urljoin(base, url)
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if scheme not in CRAWLABLE_SCHEMES or not host:
        return None
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    path = remove_dot_segments(parts.path or "/")
    query = sort_query(parts.query)
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def target_of(url: str) -> str:
    """The request target (path and query) of a canonical URL."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")
