"""A writer's WARC files: batches of records appended, made durable, rotated by size."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import BinaryIO

from srcrawl.warc.storage import WARC_SUFFIX, Pointer, WarcError, WarcStorage


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
