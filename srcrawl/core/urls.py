"""Canonical URLs and their 64-bit fingerprints [URL hashing].

Everything downstream (the seen test, frontier keys, store rows) keys on the
fingerprint of the canonical form, so two spellings of one URL are one URL:
scheme and host in lower case, IDNA hosts in their ASCII form, IPv6 literals
compressed, default ports dropped, the fragment dropped, dot segments
resolved, percent-escapes of unreserved characters decoded and the others in
upper case, everything else that needs escaping escaped as UTF-8, and the query's
parameters sorted by (key, value) with empty ones dropped, so that
``?b=2&a=1`` and ``?a=1&b=2`` are one page. (A server that gives parameter
order a meaning is rare, and would be crawled as the sorted variant.)
"""

from __future__ import annotations

import ipaddress
import re
import string
from urllib.parse import quote, urlsplit

import idna
import xxhash

from srcrawl.core.errors import SrcrawlError

MAX_URL_LENGTH = 2048
"""Longest canonical URL accepted; longer ones are almost always traps."""


class InvalidURL(SrcrawlError):
    """A URL that cannot be crawled (bad syntax, unsupported scheme, bad host or port)."""


_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_PATH_SAFE = "/!$&'()*+,;=:@%"
_QUERY_SAFE = "/?!$&'()*+,;=:@%"
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_BARE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_STRIP = re.compile(r"[\t\n\r]")
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
# Already canonical: lower-case host, no default port, no dot segment, no
# escape, nothing to quote. Most links a slave emits take this path.
_FAST = re.compile(
    r"^(https?)://((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)"
    r"(?::(\d{1,5}))?(/[A-Za-z0-9\-._~/!$&'()*+,;=:@]*)"
    r"(\?[A-Za-z0-9\-._~/?!$&'()*+,;=:@]+)?$"
)


def _normalize_escapes(part: str, safe: str) -> str:
    part = _BARE_PERCENT.sub("%25", part)

    def fix(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

    return quote(_ESCAPE.sub(fix, part), safe=safe)


def _remove_dot_segments(path: str) -> str:
    # RFC 3986 §5.2.4, on '/'-split segments
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
    return result if result.startswith("/") else "/" + result


def _host(raw: str) -> str:
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise InvalidURL(f"malformed IPv6 host {raw!r}")
        try:
            return f"[{ipaddress.IPv6Address(raw[1:-1]).compressed}]"
        except ValueError as e:
            raise InvalidURL(f"malformed IPv6 host {raw!r}") from e
    host = raw.rstrip(".").lower()
    if not host:
        raise InvalidURL("empty host")
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except idna.IDNAError as e:
            raise InvalidURL(f"host {raw!r} is not a valid international domain name") from e
    labels = host.split(".")
    if not all(_HOST_LABEL.match(label) for label in labels):
        raise InvalidURL(f"malformed host {raw!r}")
    return host


def _sort_query(query: str) -> str:
    if "&" not in query:
        return query
    params = [p for p in query.split("&") if p]
    return "&".join(sorted(params, key=lambda p: tuple(p.partition("=")[::2])))


def canonicalize(url: str) -> str:
    """The canonical form of an absolute http(s) URL; raise InvalidURL otherwise."""
    m = _FAST.match(url)
    if m is not None and len(url) <= MAX_URL_LENGTH and "/." not in url:
        scheme, _host, port, _path, query = m.groups()
        if (port is None or (0 < int(port) < 65536 and int(port) != _DEFAULT_PORTS[scheme])) and (
            query is None or "&" not in query or _sort_query(query[1:]) == query[1:]
        ):
            return url
    return _canonicalize_slow(url)


def _canonicalize_slow(url: str) -> str:
    url = _STRIP.sub("", url).strip(" \x00\x0b\x0c")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise InvalidURL(f"malformed URL {url[:200]!r}: {e}") from e
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL(f"unsupported scheme {scheme or '(none)'!r} in {url[:200]!r}")
    hostport = parts.netloc.rpartition("@")[2]
    if hostport.startswith("["):
        raw_host = hostport[: hostport.find("]") + 1] if "]" in hostport else hostport
    else:
        raw_host = hostport.split(":", 1)[0]
    host = _host(raw_host)
    if port is not None and not 0 < port < 65536:
        raise InvalidURL(f"port out of range in {url[:200]!r}")
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _remove_dot_segments(_normalize_escapes(parts.path or "/", _PATH_SAFE))
    query = _sort_query(_normalize_escapes(parts.query, _QUERY_SAFE))
    out = f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")
    if len(out) > MAX_URL_LENGTH:
        raise InvalidURL(f"URL longer than {MAX_URL_LENGTH} characters")
    return out


def fingerprint(canonical_url: str) -> int:
    """64-bit fingerprint of a canonical URL, as a signed integer (SQL BIGINT)."""
    v = xxhash.xxh64_intdigest(canonical_url.encode())
    return v - (1 << 64) if v >= 1 << 63 else v


def origin(canonical_url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL: the unit of politeness and robots."""
    end = canonical_url.find("/", canonical_url.find("//") + 2)
    return canonical_url if end < 0 else canonical_url[:end]


def host_of(canonical_url: str) -> str:
    """``host[:port]`` of a canonical URL (what the pages table stores)."""
    return origin(canonical_url).split("//", 1)[1]
