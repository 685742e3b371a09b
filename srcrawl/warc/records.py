"""The WARC/1.1 records of a fetch, built as plain bytes and gzipped by ISA-L (one gzip
member a record): ``request``, ``response``, the ``conversion`` record of the extracted
text, and the ``revisit`` records of a recrawl (see the package docstring)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from http.client import responses

from isal import isal_zlib

REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
_COMPRESSION_LEVEL = 1
"""ISA-L's gzip level of each record: on the test web's pages ISA-L at level 1 compresses
a record in about a third of zlib's time at its fastest levels, the files 1.4 % larger
(docs/benchmarks-journal.md, "WARC records by ISA-L")."""
_DROPPED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


def payload_digest(body: bytes) -> str:
    """The WARC-Payload-Digest of ``body``: ``sha1:`` and its base32."""
    return _sha1(body)


def warc_date(ts: float) -> str:
    """WARC-Date of a Unix time (UTC, microseconds: WARC/1.1 allows them)."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _gzip(data: bytes) -> bytes:
    """``data`` as one gzip member, by ISA-L (standard gzip: zlib and every WARC reader
    take it).

    One call a record: the call lets go of the GIL while it compresses, and each
    call is one more hand-over of the GIL with the slave's fetch loop.
    """
    return isal_zlib.compress(data, _COMPRESSION_LEVEL, 31)  # 31: a gzip member


_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_BASE32_PAIRS = [a + b for a in _BASE32 for b in _BASE32]
"""Two base32 digits, by the 10 bits they stand for: a SHA-1 (160 bits) is 16 of them."""
_SHIFTS = range(150, -10, -10)


def _sha1(data: bytes) -> str:
    """A WARC digest: ``sha1:`` and the base32 of ``data``'s SHA-1 (what
    ``base64.b32encode`` gives, in half the time: four digests a page)."""
    n = int.from_bytes(hashlib.sha1(data).digest(), "big")
    return "sha1:" + "".join([_BASE32_PAIRS[(n >> s) & 1023] for s in _SHIFTS])


def new_record_id() -> str:
    """A WARC-Record-ID: a random (version 4) UUID as a URN, as ``uuid.uuid4`` makes one
    without its object (three a page)."""
    b = bytearray(os.urandom(16))
    b[6] = b[6] & 0x0F | 0x40  # version 4
    b[8] = b[8] & 0x3F | 0x80  # the RFC 4122 variant
    h = b.hex()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"


def _fields(*pairs: tuple[str, str]) -> str:
    """WARC header lines, each ``name: value`` and CRLF."""
    return "".join(f"{name}: {value}\r\n" for name, value in pairs)


def _record(
    kind: str,
    url: str,
    date: str,
    ctype: str,
    block: bytes,
    fields: str = "",
    record_id: str = "",
) -> bytes:
    """One WARC/1.1 record of ``block`` with its block digest, and the header lines
    ``fields`` (:func:`_fields`) before it, as one gzip member.

    Written here rather than by FastWARC: a record object cost about 10 µs to build
    and write, as much as compressing a small page; warcio checks the records in
    the tests (headers, digests, ``warcio check``).
    """
    head = (
        f"WARC/1.1\r\nWARC-Type: {kind}\r\nWARC-Date: {date}\r\n"
        f"WARC-Record-ID: {record_id or new_record_id()}\r\nContent-Length: {len(block)}\r\n"
        f"WARC-Target-URI: {url}\r\nContent-Type: {ctype}\r\n{fields}"
        f"WARC-Block-Digest: {_sha1(block)}\r\n\r\n"
    )
    return _gzip(b"".join((head.encode("utf-8"), block, b"\r\n\r\n")))


def response_head(status: int, headers: dict[str, str], body_length: int | None) -> bytes:
    """The HTTP head of a decoded response as recorded (see the module docstring); no
    Content-Length with ``body_length`` None (a 304, which has no body)."""
    lines = [f"HTTP/1.1 {status} {responses.get(status, 'Unknown')}"]
    for name, value in headers.items():
        if name not in _DROPPED_HEADERS:
            lines.append(f"{name.title()}: {value}")
    if "content-encoding" in headers:
        lines.append(f"X-Srcrawl-Content-Encoding: {headers['content-encoding']}")
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


@dataclass
class PreparedFetch:
    """One page's records, built by a parse thread, written by the page writer."""

    url: str
    date: str
    digest: str
    head: bytes
    """The response's HTTP head (a revisit record carries it alone)."""
    request: bytes
    response: bytes
    conversion: bytes
    """The extracted text as a ``conversion`` record; b"" when the page has none."""
    response_id: str
    """The response's WARC-Record-ID, which the request names (WARC-Concurrent-To); a
    revisit written in the response's place takes it."""
    not_modified: bool = False
    """A 304 to a conditional GET: ``head`` is the 304's, there is no response record
    (``response`` is b"") and no payload (``digest`` is "")."""
    ip: str = ""

    def records(self) -> tuple[bytes, ...]:
        """The records as written: request, response, and the text's right after it."""
        if self.conversion:
            return (self.request, self.response, self.conversion)
        return (self.request, self.response)


def prepare_fetch(
    url: str,
    *,
    status: int,
    headers: dict[str, str],
    body: bytes,
    ip: str,
    fetched_at: float,
    request: bytes,
    truncated: bool = False,
    text: str = "",
) -> PreparedFetch:
    """The request, response and conversion (the extracted ``text``, if any) records of one
    fetch, each a gzip member.

    No ``metadata`` record: its outlinks and fetch time are in the store's rows, and
    it took a ninth of the WARC bytes and one more compression a page
    (docs/benchmarks-journal.md, "WARC storage, again").
    """
    date = warc_date(fetched_at)
    digest = payload_digest(body)
    head = response_head(status, headers, len(body))
    rid = new_record_id()
    fields = _fields(
        *((("WARC-IP-Address", ip),) if ip else ()),
        *((("WARC-Truncated", "length"),) if truncated else ()),
        ("WARC-Payload-Digest", digest),
    )
    response = _record(
        "response", url, date, "application/http; msgtype=response", head + body, fields, rid
    )
    req = _record(
        "request",
        url,
        date,
        "application/http; msgtype=request",
        request,
        f"WARC-Concurrent-To: {rid}\r\n",
    )
    conversion = b""
    if text:
        block = text.encode("utf-8", "replace")
        conversion = _record(
            "conversion",
            url,
            date,
            "text/plain; charset=utf-8",
            block,
            f"WARC-Refers-To: {rid}\r\n",
        )
    return PreparedFetch(url, date, digest, head, req, response, conversion, rid, ip=ip)


def prepare_not_modified(
    url: str, *, headers: dict[str, str], ip: str, fetched_at: float, request: bytes
) -> PreparedFetch:
    """The request record of a conditional GET answered 304 Not Modified, and the 304's head
    for the ``server-not-modified`` revisit the page writer puts in the response's place
    (:func:`not_modified_record`, once it knows the stored record it names)."""
    rid = new_record_id()
    date = warc_date(fetched_at)
    req = _record(
        "request",
        url,
        date,
        "application/http; msgtype=request",
        request,
        f"WARC-Concurrent-To: {rid}\r\n",
    )
    head = response_head(304, headers, None)
    return PreparedFetch(url, date, "", head, req, b"", b"", rid, not_modified=True, ip=ip)


@dataclass(frozen=True)
class Original:
    """The response record a revisit refers to: its id, target URI and date."""

    record_id: str
    url: str
    date: str


def _refers(fetch: PreparedFetch, original: Original | None) -> tuple[tuple[str, str], ...]:
    """The fields naming the record a revisit repeats (only the URI when it is unknown)."""
    if original is None:
        return (("WARC-Refers-To-Target-URI", fetch.url),)
    return (
        ("WARC-Refers-To", original.record_id),
        ("WARC-Refers-To-Target-URI", original.url),
        ("WARC-Refers-To-Date", original.date),
    )


def revisit_record(fetch: PreparedFetch, original: Original | None = None) -> bytes:
    """A revisit record (identical-payload-digest profile) in place of ``fetch``'s response,
    naming the ``original`` record (WARC-Refers-To, -Target-URI and -Date) when known.

    It takes the response's record id, which the request names as concurrent."""
    fields = _fields(
        ("WARC-Profile", REVISIT_PROFILE),
        *_refers(fetch, original),
        *((("WARC-IP-Address", fetch.ip),) if fetch.ip else ()),
        ("WARC-Truncated", "length"),  # the payload is left out, by the profile
        ("WARC-Payload-Digest", fetch.digest),
    )
    return _record(
        "revisit",
        fetch.url,
        fetch.date,
        "application/http; msgtype=response",
        fetch.head,
        fields,
        fetch.response_id,
    )


def not_modified_record(fetch: PreparedFetch, original: Original | None = None) -> bytes:
    """A revisit record (server-not-modified profile, WARC/1.1 section 6.7.3) of a 304:
    its block is the 304's HTTP head, whole (a 304 has no body, so nothing is truncated),
    without WARC-Payload-Digest (the payload is the original's, from which the validators
    came); it names the ``original`` record as :func:`revisit_record` does."""
    fields = _fields(
        ("WARC-Profile", NOT_MODIFIED_PROFILE),
        *_refers(fetch, original),
        *((("WARC-IP-Address", fetch.ip),) if fetch.ip else ()),
    )
    return _record(
        "revisit",
        fetch.url,
        fetch.date,
        "application/http; msgtype=response",
        fetch.head,
        fields,
        fetch.response_id,
    )
