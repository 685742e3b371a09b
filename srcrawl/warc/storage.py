"""Where WARC files live (:class:`WarcStorage`: a local or shared directory, or an object
store, :mod:`srcrawl.warc.objects`) and where a record is in them (:class:`Pointer`)."""

from __future__ import annotations

import fcntl
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from srcrawl.core.errors import StoreError
from srcrawl.core.object_store import is_object_url

WARC_SUFFIX = ".warc.gz"


class WarcError(StoreError):
    """A WARC file could not be written or read."""


class WarcStorage(ABC):
    """Where WARC files live: all a writer and a reader need (a directory, or an object
    store whose writers spool each file locally and publish it whole)."""

    publishes = False
    """True: a file's records can be read only once the writer has closed it and
    :meth:`publish` put it in the store, so no row may point into it before."""
    max_file_bytes: int | None = None
    """Bytes after which a writer closes its file whatever the crawl allows (None: the
    crawl's ``--warc-max-bytes`` alone)."""
    max_file_age: float | None = None
    """Seconds after which a writer closes a file with records (None: never by age)."""

    def publish(self, name: str, fh: BinaryIO) -> None:
        """Make the closed file ``name`` (open as ``fh``) readable by every reader, and
        close ``fh``. A directory's file is there already: made durable, closed."""
        try:
            self.make_durable(fh)
        finally:
            fh.close()

    def recover(self, job: str) -> list[str]:
        """Tidy what a killed writer of ``job`` left unpublished; the names dropped."""
        return []

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
        if is_object_url(name):  # an imported archive in an object store
            from srcrawl.warc.objects import read_imported_object

            return read_imported_object(name, offset, length)
        with open(self.path(name), "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def names(self, job: str) -> list[str]:
        d = self.root / job
        if not d.is_dir():
            return []
        return sorted(f"{job}/{p.name}" for p in d.iterdir() if p.name.endswith(WARC_SUFFIX))


@dataclass(frozen=True)
class Pointer:
    """Where a record is: file name, offset and length of its gzip member."""

    file: str
    offset: int
    length: int
