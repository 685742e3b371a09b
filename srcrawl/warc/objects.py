"""WARC files kept as objects of an S3 store (``SRCRAWL_WARC_DIR=s3://BUCKET/PREFIX``).

A writer appends to a local spool file, as to a local WARC file, and publishes it
whole as ONE object (``PREFIX/<job>/<name>``, the name carrying the job, the slave's
host and process, its start time and a serial) when it closes it: objects are never
appended to nor rewritten (the PUT is conditional: ``If-None-Match: *``). Until its
object is published no row may point into a spool file (see
:class:`~srcrawl.warc.output.WarcOutput` and :mod:`srcrawl.slave.page_writer`), so a
spool file a killed slave left behind is discarded when a writer of its job starts:
nothing refers to it, and its pages' tasks were never acknowledged (they are fetched
again).

A record is read with one ranged GET, in blocks kept in a bounded LRU, so the page's
text read right after its body (the next record) costs nothing more.

The store's client and settings are srcrawl/core/object_store.py's.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

from srcrawl.core.defaults import (
    WARC_OBJECT_CACHE_BYTES,
    WARC_OBJECT_MAX_AGE,
    WARC_OBJECT_MAX_BYTES,
)
from srcrawl.core.object_store import (
    SCHEME,
    ensure_bucket,
    is_object_url,
    one_line,
    parse_url,
    s3_store,
)
from srcrawl.warc.storage import WARC_SUFFIX, WarcError, WarcStorage

__all__ = ["ObjectWarcStorage", "is_object_url", "parse_url"]

log = logging.getLogger("srcrawl.warc")

_NEW = ".new"
"""Suffix of a spool file being created (locked, then linked to its name)."""
BLOCK = 64 << 10
"""Bytes of a cached block: a page's records (request, response, text) are mostly in one."""


class ObjectWarcStorage(WarcStorage):
    """WARC files as objects of ``s3://BUCKET/PREFIX``, written through spool files in
    ``spool`` (``<job>/<name>``, one directory per job, as a local WARC directory)."""

    publishes = True
    max_file_bytes = WARC_OBJECT_MAX_BYTES

    def __init__(
        self,
        url: str,
        spool: Path,
        cache_bytes: int = WARC_OBJECT_CACHE_BYTES,
        max_age: float = WARC_OBJECT_MAX_AGE,
    ) -> None:
        self.url = url
        self.max_file_age = max_age
        self.bucket, self.prefix = parse_url(url)
        self.spool = Path(spool)
        self._store: Any = None
        self._bucket_ready = False
        self._lock = threading.Lock()
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._cached = 0
        self.cache_bytes = cache_bytes
        self.gets = 0
        """Ranged GETs sent (the cache's misses)."""

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = s3_store(self.bucket, self.prefix)
        return self._store

    # -- writing ---------------------------------------------------------------
    def path(self, name: str) -> Path:
        """The spool file of ``name`` (there only until it is published)."""
        p = Path(name)
        return p if p.is_absolute() else self.spool / p

    def create(self, name: str) -> BinaryIO:
        p = self.path(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        # locked before it has its name: a writer starting beside this one (recover)
        # leaves a locked spool file alone, and never sees this one unlocked
        new = p.with_name(f"{p.name}.{os.getpid()}{_NEW}")
        fh = open(new, "xb")  # noqa: SIM115 - the writer keeps it open until published
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.link(new, p)  # FileExistsError when the name is taken
        except BaseException:
            fh.close()
            raise
        finally:
            new.unlink(missing_ok=True)
        return fh

    def make_durable(self, fh: BinaryIO) -> None:
        # handed to the OS only: no fsync, as a spool file is never read after a crash
        # (it is discarded, see recover); what makes records durable is their object
        fh.flush()

    def publish(self, name: str, fh: BinaryIO) -> None:
        """Put the spool file ``name`` (open as ``fh``) as one object, then remove it.

        Raises :class:`WarcError` when the store did not take it (the spool file stays,
        open, for the next attempt). An object already there with the same size is an
        earlier attempt whose reply was lost."""
        import obstore
        from obstore.exceptions import AlreadyExistsError

        try:
            self.make_durable(fh)
            data = self.path(name).read_bytes()
        except OSError as e:
            raise WarcError(f"cannot read spool file {name}: {e}") from e
        try:
            self._ensure_bucket()
            try:
                obstore.put(self.store, name, data, mode="create")
            except AlreadyExistsError:
                size = obstore.head(self.store, name)["size"]
                if size != len(data):
                    raise WarcError(
                        f"object {name} exists with {size} bytes, not {len(data)}"
                    ) from None
        except WarcError:
            raise
        except Exception as e:  # obstore's errors and the network's alike
            raise WarcError(f"cannot publish {name} to {self.url}: {one_line(e)}") from e
        fh.close()
        self.path(name).unlink(missing_ok=True)

    def _ensure_bucket(self) -> None:
        """Create the bucket unless it exists (once per process)."""
        if not self._bucket_ready:
            ensure_bucket(self.bucket)
            self._bucket_ready = True

    def recover(self, job: str) -> list[str]:
        """Discard the spool files of ``job`` that no live writer holds (a killed slave's):
        no row points into them, their tasks are fetched again. Returns their names."""
        d = self.spool / job
        gone: list[str] = []
        if not d.is_dir():
            return gone
        for p in sorted(d.iterdir()):
            if not p.name.endswith((WARC_SUFFIX, _NEW)):
                continue
            try:
                with open(p, "rb") as fh:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    p.unlink()
            except BlockingIOError:
                continue  # a live writer's
            except OSError as e:
                log.warning("cannot discard spool file %s: %s", p, e)
                continue
            if p.name.endswith(WARC_SUFFIX):
                gone.append(f"{job}/{p.name}")
        if gone:
            log.warning(
                "discarded %d unpublished WARC spool file(s) of a stopped writer in %s "
                "(no row points into them; their pages are fetched again)",
                len(gone),
                d,
            )
        return gone

    # -- reading ---------------------------------------------------------------
    def read(self, name: str, offset: int, length: int) -> bytes:
        if is_object_url(name):  # an imported archive in an object store
            return read_imported_object(name, offset, length)
        if Path(name).is_absolute():  # an imported archive: a local file
            with open(name, "rb") as fh:
                fh.seek(offset)
                return fh.read(length)
        size = self._size(name)
        end = min(offset + length, size)
        if length <= 0 or offset >= size:
            return b""
        first, last = offset // BLOCK, (max(end, offset + 1) - 1) // BLOCK
        with self._lock:
            have = {i: self._hit((name, i)) for i in range(first, last + 1)}
        missing = [i for i, b in have.items() if b is None]
        if missing:  # one GET for the span of the missing blocks
            lo, hi = missing[0] * BLOCK, min((missing[-1] + 1) * BLOCK, size)
            data = self._get(name, lo, hi - lo)
            with self._lock:
                for i in missing:
                    block = data[i * BLOCK - lo : (i + 1) * BLOCK - lo]
                    have[i] = block
                    self._keep((name, i), block)
        joined = b"".join(have[i] or b"" for i in range(first, last + 1))
        start = offset - first * BLOCK
        return joined[start : start + (end - offset)]

    def _hit(self, key: tuple[str, int]) -> bytes | None:
        block = self._blocks.get(key)
        if block is not None:
            self._blocks.move_to_end(key)
        return block

    def _keep(self, key: tuple[str, int], block: bytes) -> None:
        if key in self._blocks:
            return
        self._blocks[key] = block
        self._cached += len(block)
        while self._cached > self.cache_bytes and self._blocks:
            _k, old = self._blocks.popitem(last=False)
            self._cached -= len(old)

    def _size(self, name: str) -> int:
        """The object's size (a HEAD, once: objects never change)."""
        with self._lock:
            size = self._sizes.get(name)
        if size is not None:
            return size
        import obstore

        try:
            size = int(obstore.head(self.store, name)["size"])
        except FileNotFoundError as e:
            raise WarcError(f"no WARC object {name} in {self.url}") from e
        except Exception as e:
            raise WarcError(f"cannot read WARC object {name}: {one_line(e)}") from e
        with self._lock:
            self._sizes[name] = size
            while len(self._sizes) > 100_000:
                self._sizes.popitem(last=False)
        return size

    def _get(self, name: str, offset: int, length: int) -> bytes:
        import obstore

        self.gets += 1
        try:
            return bytes(obstore.get_range(self.store, name, start=offset, length=length))
        except Exception as e:
            raise WarcError(f"cannot read WARC object {name}: {one_line(e)}") from e

    def names(self, job: str) -> list[str]:
        import obstore

        try:
            found = [
                meta["path"]
                for batch in obstore.list(self.store, job)  # by path segment
                for meta in batch
                if meta["path"].endswith(WARC_SUFFIX)
            ]
        except FileNotFoundError:
            return []
        except Exception as e:
            if "NoSuchBucket" in str(e):  # no writer has published yet
                return []
            raise WarcError(f"cannot list {self.url}: {one_line(e)}") from e
        return sorted(found)


def probe(url: str) -> None:
    """One listing request under ``url``'s prefix (a page of keys at most): WarcError
    naming the store if it does not answer (a bucket not made yet answers)."""
    import obstore

    bucket, prefix = parse_url(url)
    try:
        next(iter(obstore.list(s3_store(bucket, prefix, timeout=5), chunk_size=1)), None)
    except Exception as e:
        if "NoSuchBucket" in str(e):  # reachable: the first writer makes it
            return
        raise WarcError(f"the object store of {url} does not answer: {one_line(e)}") from e


_IMPORTED: dict[str, ObjectWarcStorage] = {}
_IMPORTED_LOCK = threading.Lock()


def read_imported_object(url: str, offset: int, length: int) -> bytes:
    """``length`` bytes from ``offset`` of the object ``s3://BUCKET/KEY`` (an archive
    `srcrawl import warc` read from a store, its pages' rows naming it whole): by ranged
    GETs, through one cache a bucket."""
    bucket, key = parse_url(url)
    with _IMPORTED_LOCK:
        storage = _IMPORTED.get(bucket)
        if storage is None:  # reads only: its spool is never written
            spool = Path(tempfile.gettempdir()) / "srcrawl-imported"
            storage = _IMPORTED[bucket] = ObjectWarcStorage(f"{SCHEME}{bucket}", spool)
    return storage.read(key, offset, length)


def fetch_object(url: str, into: Path) -> Path:
    """Copy the object ``s3://BUCKET/KEY`` into the directory ``into``; its local path."""
    import obstore

    bucket, key = parse_url(url)
    if not key:
        raise WarcError(f"{url}: no object key after the bucket")
    target = into / Path(key).name
    try:
        result = obstore.get(s3_store(bucket), key)
        with open(target, "wb") as fh:
            for chunk in result:
                fh.write(chunk)
    except FileNotFoundError as e:
        raise WarcError(f"no object {url}") from e
    except OSError as e:
        raise WarcError(f"cannot copy {url} to {target}: {e}") from e
    except Exception as e:  # obstore's errors and the network's alike
        raise WarcError(f"cannot read {url}: {one_line(e)}") from e
    return target
