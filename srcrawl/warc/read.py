"""Records read back from WARC files: a page's body (the payload of its response record),
the record a revisit names, a page's extracted text (its ``conversion`` record), and every
response record of an archive that ``srcrawl import warc`` reads.

A record is one gzip member at a known offset (a :class:`~srcrawl.warc.storage.Pointer`):
one seek and one read of its bytes, parsed by FastWARC.
"""

from __future__ import annotations

import contextlib
import io
import zlib
from collections.abc import Iterator
from pathlib import Path

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType

from srcrawl.core.object_store import is_object_url
from srcrawl.warc.records import Original
from srcrawl.warc.storage import Pointer, WarcError, WarcStorage


def _first_record(data: bytes, where: str, *, parse_http: bool) -> WarcRecord:
    """The record at the start of ``data`` (read at ``where``, for the error)."""
    for record in ArchiveIterator(io.BytesIO(data), parse_http=parse_http):
        return record
    raise WarcError(f"no WARC record at {where}")


def _read(storage: WarcStorage, pointer: Pointer) -> bytes:
    try:
        return storage.read(pointer.file, pointer.offset, pointer.length)
    except OSError as e:
        raise WarcError(f"cannot read WARC file {pointer.file}: {e}") from e


def read_payload(storage: WarcStorage, pointer: Pointer) -> bytes:
    """The payload (the HTTP body) of the response record at ``pointer``: one seek, one read."""
    data = _read(storage, pointer)
    where = f"{pointer.file}:{pointer.offset}"
    return _first_record(data, where, parse_http=True).reader.read()


def original_record(storage: WarcStorage, pointer: Pointer) -> Original:
    """The id, target URI and date of the response record at ``pointer`` (what a revisit of
    it names): its head only is parsed."""
    data = _read(storage, pointer)
    h = _first_record(data, f"{pointer.file}:{pointer.offset}", parse_http=False).headers
    return Original(
        h.get("WARC-Record-ID", ""), h.get("WARC-Target-URI", ""), h.get("WARC-Date", "")
    )


class WarcTexts:
    """Page texts kept in the crawl's WARC files, read back for the index and the snippets.

    With ``--body-store warc`` a crawl writes each page's extracted text as a
    ``conversion`` record right after the page's response record, and the ``pages``
    row keeps only its length (``text_length``): the row holds what the index and
    the portal look up by key, the text is one seek and one read away. The files are
    named as the ``pages`` rows name them: relative to ``root`` (the WARC directory),
    or absolute (an imported archive).
    """

    def __init__(self, root: Path | WarcStorage | None) -> None:
        self.storage = root if isinstance(root, WarcStorage) else None
        """An object store's (``root`` given as one): names not absolute are read there."""
        self.root = None if isinstance(root, WarcStorage) else root

    def path(self, name: str) -> Path:
        p = Path(name)
        if p.is_absolute():
            return p
        if self.root is None:
            raise WarcError(f"page text in WARC file {name}, but no WARC directory is known")
        return self.root / p

    def read(self, name: str, offset: int, length: int) -> str:
        """The text of the conversion record of ``length`` bytes at ``offset`` of ``name``."""
        try:
            if is_object_url(name):  # an imported archive in an object store
                from srcrawl.warc.objects import read_imported_object

                data = read_imported_object(name, offset, length)
            elif self.storage is not None and not Path(name).is_absolute():
                data = self.storage.read(name, offset, length)
            else:
                with open(self.path(name), "rb") as fh:
                    fh.seek(offset)
                    data = fh.read(length)
        except OSError as e:
            raise WarcError(f"cannot read page text from WARC file {name}: {e}") from e
        record = _first_record(data, f"{name}:{offset}", parse_http=False)
        return record.reader.read().decode("utf-8", "replace")


def responses(path: Path) -> Iterator[tuple[WarcRecord | None, int]]:
    """Each record of an archive (None for one that is no response, a response with its
    HTTP head parsed), and where it starts."""
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh, parse_http=False):
            if record.record_type == WarcRecordType.response:
                record.parse_http()
                yield record, record.stream_pos
            else:
                yield None, record.stream_pos


def _dechunk(data: bytes) -> bytes:
    out, pos = [], 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return b"".join(out)
        try:
            size = int(data[pos:end].split(b";")[0], 16)
        except ValueError:
            return b"".join(out)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2 : end + 2 + size])
        pos = end + 2 + size + 2


def recorded_body(record: WarcRecord, headers: dict[str, str]) -> bytes:
    """The body of a response record as another tool recorded it, decoded: a chunked or
    gzip-encoded one (``headers``: the HTTP head's, lower-cased names) is undone."""
    body = record.reader.read()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    encoding = headers.get("content-encoding", "").lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        with contextlib.suppress(zlib.error):  # not as declared: kept as recorded
            body = zlib.decompressobj(47).decompress(body)  # gzip or zlib, by its header
    return body
