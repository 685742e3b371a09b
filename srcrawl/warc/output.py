"""A writer's WARC files: batches of records appended, made durable, rotated by size.

In an object store (:attr:`~srcrawl.warc.storage.WarcStorage.publishes`) a file is
closed by size or by age too, and published as one object; :meth:`WarcOutput.publish_due`
says whether every record appended so far is in the store, which is when the rows that
point at them may be written. A store that does not answer is waited out: the closed
files wait, open, for the next attempt (one log line when the store goes, one when it is
back), and their rows with them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import BinaryIO

from srcrawl.warc.storage import WARC_SUFFIX, Pointer, WarcError, WarcStorage

log = logging.getLogger("srcrawl.warc")

_RETRY_FIRST, _RETRY_MAX = 0.5, 10.0
"""Seconds before a failed publication is tried again, doubled each time up to the max."""


class WarcOutput:
    """A slave's WARC files: appends batches of records, rotates at ``max_bytes``."""

    def __init__(
        self,
        storage: WarcStorage,
        job: str,
        max_bytes: int,
        max_age: float | None = None,
    ) -> None:
        self.storage = storage
        self.job = job
        self.max_bytes = max_bytes
        self.max_age = storage.max_file_age if max_age is None else max_age
        """Seconds after which a file with records is closed and published (an object
        store only; None: never by age)."""
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
        self._opened = 0.0
        self._waiting: list[tuple[str, BinaryIO]] = []
        """Closed files not yet published (an object store that did not answer)."""
        self._down_since: float | None = None
        self._next_try = 0.0
        self._retry = _RETRY_FIRST
        self.published = 0
        if storage.publishes:
            storage.recover(job)

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
            self._opened = time.monotonic()
            self.files += 1
            return

    def _limit(self) -> int:
        cap = self.storage.max_file_bytes
        return self.max_bytes if cap is None else min(self.max_bytes, cap)

    def _close_file(self) -> None:
        if self.storage.publishes:
            self._close_for_publication()
            self._publish_waiting(force=False)
            return
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                self.storage.make_durable(fh)
            finally:
                fh.close()

    def _close_for_publication(self) -> None:
        """Close the open file, if it has records, into the files waiting for the store; an
        empty one is dropped."""
        fh, self._fh = self._fh, None
        if fh is None:
            return
        if self._size:
            self._waiting.append((self._name, fh))
            return
        fh.close()
        with contextlib.suppress(OSError):
            self.storage.path(self._name).unlink()

    def _publish_waiting(self, force: bool) -> bool:
        """Publish the closed files, oldest first; whether none is left. After a failure
        the next attempt waits (doubling up to 10 s) unless ``force``."""
        now = time.monotonic()
        if not self._waiting or (not force and now < self._next_try):
            return not self._waiting
        while self._waiting:
            name, fh = self._waiting[0]
            try:
                self.storage.publish(name, fh)
            except WarcError as e:
                if self._down_since is None:
                    self._down_since = now
                    log.warning(
                        "WARC store unreachable, %d file(s) wait, their pages unacknowledged: %s",
                        len(self._waiting),
                        e,
                    )
                self._next_try = now + self._retry
                self._retry = min(self._retry * 2, _RETRY_MAX)
                return False
            self._waiting.pop(0)
            self.published += 1
        if self._down_since is not None:
            log.warning(
                "WARC store back after %.0f s: waiting files published", now - self._down_since
            )
            self._down_since = None
        self._retry = _RETRY_FIRST
        return True

    def _old(self) -> bool:
        """Whether the open file is past its age (a writer to an object store)."""
        age = time.monotonic() - self._opened
        return self.max_age is not None and age >= self.max_age

    def publish_due(self, *, final: bool = False) -> bool:
        """Close the open file when it is full or old (``final``: whatever it holds) and
        publish the closed files; True once every record appended so far is in the store
        (always, for a directory: appended and synced is stored)."""
        with self._lock:
            if not self.storage.publishes:
                return True
            full = self._size >= self._limit() or self._old()
            if self._fh is not None and self._size and (final or full):
                self._close_for_publication()
            done = self._publish_waiting(force=final)
            return done and not (self._fh is not None and self._size)

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
            if self.storage.publishes:  # never published: its records are written again
                with contextlib.suppress(OSError):
                    self.storage.path(self._name).unlink()
        self.abandoned.add(self._name)
        return WarcError(f"cannot write WARC file {self._name}: {e}")

    def _append(self, groups: Sequence[Sequence[bytes]], durable: bool) -> list[list[Pointer]]:
        out: list[list[Pointer]] = []
        for records in groups:
            if self._fh is None or self._size >= self._limit():
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
        """Close the open file (published, in an object store: a file that cannot be is
        left to the next writer's start, which discards it)."""
        with self._lock:
            if not self.storage.publishes:
                self._close_file()
                return
            self._close_for_publication()
            if not self._publish_waiting(force=True):
                log.error("%d WARC file(s) not published at close", len(self._waiting))
            for _name, fh in self._waiting:
                with contextlib.suppress(OSError):
                    fh.close()
            self._waiting = []
