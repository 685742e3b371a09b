"""Torn records at the end of a WARC file (a writer killed mid-record): found, and cut
back to the last whole record (``srcrawl export warc --truncate-torn``)."""

from __future__ import annotations

import fcntl
import io
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from fastwarc.warc import ArchiveIterator

from srcrawl.warc.storage import WarcError

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
