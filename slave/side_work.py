"""The crawl's work beside its driver thread: large parses and sitemap reads.

The runtime's one crawl thread runs every fetch at once; what would hold it
up runs in small pools beside it: pages larger than
DEFAULT_PARSE_INLINE_BYTES are parsed there (libxml2 parses without the
GIL; the pure Python fallback hands it over every few milliseconds), and a
host's sitemaps are read there, politely, which takes seconds. Their outcomes
come back through a queue; a socket pair wakes the driver's poll.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from srcrawl.core.defaults import DEFAULT_PARSE_THREADS, DEFAULT_SITEMAP_THREADS
from srcrawl.queues.crawl_protocol import task_error

log = logging.getLogger("srcrawl.slave")

P = TypeVar("P", bound=tuple)


class SideWork:
    """The parse and sitemap pools, and the ``(task, outcome)`` pairs they finished."""

    def __init__(self) -> None:
        self._parse_pool: ThreadPoolExecutor | None = None
        self._sitemap_pool: ThreadPoolExecutor | None = None
        self.pending = 0
        """Tasks handed over whose outcome :meth:`collect` has not returned."""
        self._done: deque[tuple[bytes, bytes]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def fileno(self) -> int:
        """Readable when some outcome is ready."""
        return self._wake_r.fileno()

    def parse(self, pages: list[P], outcome: Callable[..., bytes]) -> None:
        """``outcome(*page)`` for each page (its task first) in a parse thread, in one
        hand-off: fewer thread switches."""
        if self._parse_pool is None:
            self._parse_pool = ThreadPoolExecutor(DEFAULT_PARSE_THREADS, "crawl-parse")
        self.pending += len(pages)
        self._parse_pool.submit(self._parse, pages, outcome)

    def _parse(self, pages: list[P], outcome: Callable[..., bytes]) -> None:
        for page in pages:
            self._done.append((page[0], outcome(*page)))
        self._wake()

    def sitemaps(self, raw: bytes, read: Callable[..., bytes], *args: object) -> None:
        """``read(*args)`` in a sitemap thread: the outcome of task ``raw``."""
        if self._sitemap_pool is None:
            self._sitemap_pool = ThreadPoolExecutor(DEFAULT_SITEMAP_THREADS, "crawl-sitemaps")
        self.pending += 1
        self._sitemap_pool.submit(self._sitemaps, raw, read, args)

    def _sitemaps(self, raw: bytes, read: Callable[..., bytes], args: tuple) -> None:
        try:
            outcome = read(*args)
        except Exception:  # a bug: report the task to the master rather than lose it
            log.exception("reading sitemaps failed")
            outcome = task_error(raw, traceback.format_exc(limit=3))
        self._done.append((raw, outcome))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # BlockingIOError: a wake-up is pending already
            self._wake_w.send(b"x")

    def collect(self, out: list[tuple[bytes, bytes]]) -> None:
        """Move the finished ``(task, outcome)`` pairs to ``out``."""
        with contextlib.suppress(OSError):  # BlockingIOError once drained
            while self._wake_r.recv(4096):
                pass
        while self._done:
            out.append(self._done.popleft())
            self.pending -= 1

    def close(self) -> None:
        """Wait for the work in hand (queued work is dropped); forget every outcome."""
        for pool in (self._parse_pool, self._sitemap_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._parse_pool = self._sitemap_pool = None
        self._done.clear()
        self.pending = 0
