"""Every fetch kept in WARC/1.1 files; the store keeps where each response record is.

A crawl slave writes, per page, a ``request``, a ``response`` (or, when the
store already holds the same body, a ``revisit``) and, right after the response,
a ``conversion`` record holding the extracted text, each its own gzip member, so
that a page's body is one seek and one read of ``warc_length`` bytes at
``warc_offset``, and its text one read of ``text_length`` bytes after that (what
the index and the snippets read, :mod:`srcrawl.sql.warc_text`).

A recrawl that finds a page unchanged is kept too, as its ``request`` and a
``revisit`` in place of the response, naming the stored page's response record
(WARC-Refers-To, -Target-URI and -Date): a 304 Not Modified gets the
``server-not-modified`` profile (WARC/1.1 section 6.7.3; its block is the 304's
head, and it has no payload digest), a 200 with the stored body the
``identical-payload-digest`` one (:func:`revisit_record`). A 200 whose text is the
stored one but whose body is not (markup only changed) is written whole, and
the page's row points at it (see :mod:`srcrawl.slave.page_writer`). This module
writes them as plain bytes gzipped by ISA-L (python-isal), FastWARC reads them,
and warcio checks them in the tests.

The parse threads build each page's records (:func:`prepare_fetch`); the
page writer appends a batch to the open file and makes it durable (flush and
fsync) *before* the store row that points into it is written, so a slave
killed mid-file loses no acknowledged page and leaves no pointer to a record
that cannot be read. Bodies are recorded as the crawl saw them: decoded, so
the stored head drops Content-Encoding and Transfer-Encoding and gives the
decoded Content-Length (the original encoding is kept in
``X-Srcrawl-Content-Encoding``).

Files live behind :class:`WarcStorage` (a local or shared directory today);
each writer names its own files (job, host and process of the slave, start
time, serial) and creates them exclusively, so no two writers share one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import socket
import threading
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from http.client import responses
from pathlib import Path
from typing import BinaryIO

from fastwarc.warc import ArchiveIterator
from isal import isal_zlib

from srcrawl.errors import StoreError
from srcrawl.sql.store import Page, decompress_body

WARC_SUFFIX = ".warc.gz"
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
_COMPRESSION_LEVEL = 1
"""ISA-L's gzip level of each record: on the test web's pages ISA-L at level 1 compresses
a record in about a third of zlib's time at its fastest levels, the files 1.4 % larger
(docs/BENCHMARKS.md, "WARC records by ISA-L")."""
_DROPPED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


class WarcError(StoreError):
    """A WARC file could not be written or read."""


class WarcStorage(ABC):
    """Where WARC files live: all a writer and a reader need (a directory today; an
    object store would implement these five)."""

    @abstractmethod
    def create(self, name: str) -> BinaryIO:
        """A new, empty file ``name`` opened for writing; FileExistsError if it exists."""

    @abstractmethod
    def make_durable(self, fh: BinaryIO) -> None:
        """Return once everything written to ``fh`` survives a crash of this machine."""

    @abstractmethod
    def read(self, name: str, offset: int, length: int) -> bytes:
        """``length`` bytes of file ``name`` from ``offset``."""

    @abstractmethod
    def names(self, job: str) -> list[str]:
        """The names of the job's files, sorted."""

    @abstractmethod
    def path(self, name: str) -> Path:
        """A local path of file ``name`` (what ``srcrawl export warc`` lists and copies)."""


class LocalWarcStorage(WarcStorage):
    """A directory (``$SRCRAWL_HOME/warc`` or one every slave mounts): ``job/<name>``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        p = Path(name)
        return p if p.is_absolute() else self.root / p  # absolute: an imported archive

    def create(self, name: str) -> BinaryIO:
        p = self.path(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        # exclusive: no two writers share a file (which the writer keeps open)
        fh = open(p, "xb")  # noqa: SIM115
        # held while the file is written, released by the kernel however the writer
        # ends: `srcrawl export warc --truncate-torn` leaves a locked file alone
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fh

    def make_durable(self, fh: BinaryIO) -> None:
        fh.flush()
        os.fsync(fh.fileno())

    def read(self, name: str, offset: int, length: int) -> bytes:
        with open(self.path(name), "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def names(self, job: str) -> list[str]:
        d = self.root / job
        if not d.is_dir():
            return []
        return sorted(f"{job}/{p.name}" for p in d.iterdir() if p.name.endswith(WARC_SUFFIX))


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
    (docs/BENCHMARKS.md, "WARC storage, again").
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


@dataclass(frozen=True)
class Pointer:
    """Where a record is: file name, offset and length of its gzip member."""

    file: str
    offset: int
    length: int


class WarcOutput:
    """A slave's WARC files: appends batches of records, rotates at ``max_bytes``."""

    def __init__(self, storage: WarcStorage, job: str, max_bytes: int) -> None:
        self.storage = storage
        self.job = job
        self.max_bytes = max_bytes
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        host = "".join(c if c.isalnum() or c in "-." else "_" for c in socket.gethostname())
        self._stem = f"{job}/{job}-{stamp}-{host}-{os.getpid()}"
        self._serial = 0
        self._fh: BinaryIO | None = None
        self._name = ""
        self._size = 0
        self._lock = threading.Lock()
        self.files = 0
        self.bytes = 0
        self.abandoned: set[str] = set()
        """Files left after a failed write or sync (their records may be lost)."""

    def _rotate(self) -> None:
        self._close_file()
        while True:
            self._serial += 1
            name = f"{self._stem}-{self._serial:05d}{WARC_SUFFIX}"
            try:
                self._fh = self.storage.create(name)
            except FileExistsError:
                continue
            self._name, self._size = name, 0
            self.files += 1
            return

    def _close_file(self) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                self.storage.make_durable(fh)
            finally:
                fh.close()

    def append(
        self, groups: Sequence[Sequence[bytes]], *, durable: bool = True
    ) -> list[list[Pointer]]:
        """Write each group's records together, in one file; where each record went.

        Durable when it returns (one fsync per call, and one per file closed by a
        rotation); with ``durable=False`` only handed to the OS (readable by every
        process), and :meth:`sync` makes it durable. Raises :class:`WarcError` and
        starts a new file when a write fails.
        """
        with self._lock:
            try:
                return self._append(groups, durable)
            except OSError as e:
                raise self._abandon(e) from e

    def sync(self) -> None:
        """Make everything appended so far durable (see ``append(durable=False)``)."""
        with self._lock:
            try:
                if self._fh is not None:
                    self.storage.make_durable(self._fh)
            except OSError as e:
                raise self._abandon(e) from e

    def _abandon(self, e: OSError) -> WarcError:
        """Leave the file a write or sync failed on: a new file keeps the next batch clear
        of a torn record, and no revisit refers into this one."""
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()
        self.abandoned.add(self._name)
        return WarcError(f"cannot write WARC file {self._name}: {e}")

    def _append(self, groups: Sequence[Sequence[bytes]], durable: bool) -> list[list[Pointer]]:
        out: list[list[Pointer]] = []
        for records in groups:
            if self._fh is None or self._size >= self.max_bytes:
                self._rotate()
            assert self._fh is not None
            where = []
            for blob in records:
                where.append(Pointer(self._name, self._size, len(blob)))
                self._fh.write(blob)
                self._size += len(blob)
                self.bytes += len(blob)
            out.append(where)
        if self._fh is not None:
            if durable:
                self.storage.make_durable(self._fh)
            else:
                self._fh.flush()
        return out

    def close(self) -> None:
        with self._lock:
            self._close_file()


def read_payload(storage: WarcStorage, pointer: Pointer) -> bytes:
    """The payload (the HTTP body) of the response record at ``pointer``: one seek, one read."""
    try:
        data = storage.read(pointer.file, pointer.offset, pointer.length)
    except OSError as e:
        raise WarcError(f"cannot read WARC file {pointer.file}: {e}") from e
    for record in ArchiveIterator(io.BytesIO(data), parse_http=True):
        return record.reader.read()
    raise WarcError(f"no WARC record at {pointer.file}:{pointer.offset}")


def original_record(storage: WarcStorage, pointer: Pointer) -> Original:
    """The id, target URI and date of the response record at ``pointer`` (what a revisit of
    it names): its head only is parsed."""
    try:
        data = storage.read(pointer.file, pointer.offset, pointer.length)
    except OSError as e:
        raise WarcError(f"cannot read WARC file {pointer.file}: {e}") from e
    for record in ArchiveIterator(io.BytesIO(data), parse_http=False):
        h = record.headers
        return Original(
            h.get("WARC-Record-ID", ""), h.get("WARC-Target-URI", ""), h.get("WARC-Date", "")
        )
    raise WarcError(f"no WARC record at {pointer.file}:{pointer.offset}")


def page_body(storage: WarcStorage, page: Page) -> bytes:
    """A stored page's body (read with ``with_body=True``), from its WARC record or (stores
    of schema 5 and before, or ``--body-store sql``) the store's compressed copy; b"" when
    it has none."""
    if page.warc_file and page.warc_offset is not None and page.warc_length is not None:
        return read_payload(storage, Pointer(page.warc_file, page.warc_offset, page.warc_length))
    return decompress_body(page.body)


_CHUNK = 1 << 20


def _whole_record(member: bytes) -> bool:
    """Whether a decompressed gzip member is one WARC record, its block all there."""
    try:
        for record in ArchiveIterator(io.BytesIO(member), parse_http=False):
            return len(record.reader.read()) == record.content_length
    except (ValueError, OSError):
        pass
    return False


def whole_records_end(fh: BinaryIO) -> int:
    """Where the file's last whole record ends: its size, unless a writer killed mid-record
    (or damage) left a torn gzip member or record after that offset.

    Walks the gzip members (one a record) with zlib, which says exactly where each
    ends; each member must hold a whole WARC record.
    """
    fh.seek(0)
    end = fed = 0  # end: where the current member starts; fed: its bytes read so far
    d, parts = zlib.decompressobj(31), []  # 31: one gzip member
    data = b""
    while True:
        if not data:
            data = fh.read(_CHUNK)
            if not data:
                return end  # the file ends inside a member (or exactly after one)
        try:
            parts.append(d.decompress(data))
        except zlib.error:
            return end
        if not d.eof:
            fed += len(data)
            data = b""
            continue
        if not _whole_record(b"".join(parts)):
            return end
        end += fed + len(data) - len(d.unused_data)
        fed, data, d, parts = 0, d.unused_data, zlib.decompressobj(31), []


@dataclass(frozen=True)
class FileCheck:
    """What :func:`check_file` found in one WARC file."""

    path: Path
    size: int
    whole: int
    """Bytes up to the end of the last whole record (``size`` when the file is sound)."""
    in_use: bool = False
    """A writer holds the file: not checked (its last record may be half written)."""
    truncated: bool = False

    @property
    def torn(self) -> bool:
        return self.whole < self.size


def check_file(path: Path, *, truncate: bool = False) -> FileCheck:
    """Find a torn record at the end of ``path`` and, with ``truncate``, cut the file back
    to its last whole record (no store row points past it: rows are written only once
    their records are durable). A file a writer still holds is left alone."""
    try:
        with open(path, "r+b" if truncate else "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return FileCheck(path, size, size, in_use=True)
            whole = whole_records_end(fh)
            if truncate and whole < size:
                fh.truncate(whole)
                os.fsync(fh.fileno())
                return FileCheck(path, size, whole, truncated=True)
            return FileCheck(path, size, whole)
    except OSError as e:
        raise WarcError(f"cannot check WARC file {path}: {e}") from e
