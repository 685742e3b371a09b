"""The search index as published to an object store (``SRCRAWL_INDEX_DIR=s3://BUCKET/PREFIX``).

A job's index lives under ``PREFIX/<job>/``: each file of a Tantivy segment as one object
of the same name (a segment's files and its deletes file, ``<segment>.<opstamp>.del``,
are never rewritten: Tantivy names new ones), and one object rewritten at each commit,
``meta.json``, the commit point. That object is a small JSON document, :class:`Commit`:
Tantivy's own ``meta.json`` and the names and sizes of the files it needs. The index
master (indexer/publisher.py) puts the files first and that document last; a replica
(indexer/replica.py) reads the document, then fetches the files it names. So a replica
never sees a commit whose files are not all there, and it knows each file's size
without listing the store.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from srcrawl.core.defaults import INDEX_STORE_FIRST_WAIT, INDEX_STORE_MAX_WAIT
from srcrawl.core.errors import SrcrawlError
from srcrawl.core.object_store import ensure_bucket, one_line, parse_url, s3_store

T = TypeVar("T")

COMMIT_OBJECT = "meta.json"
"""The object naming the published commit (written last, the only one ever rewritten)."""
HELD = ".published.json"
"""In a local directory: the published commit it holds (a replica's) or last published or
started from (the index master's), a :class:`Commit` as the store has it."""
TANTIVY_META = "meta.json"
MANAGED = ".managed.json"
"""Tantivy's list of the files its writer may delete (garbage collection)."""
PART = ".part"
"""Suffix of a file being fetched (renamed to its name once whole)."""


class IndexStoreError(SrcrawlError):
    """The object store did not answer as it should (unreachable, refused)."""


class ObjectGone(SrcrawlError):
    """A file of the commit being fetched is no longer in the store: a later commit dropped
    it, and its grace passed (the next sync takes the later commit)."""


@dataclass(frozen=True)
class Commit:
    """One commit of the index: Tantivy's ``meta.json`` and the files it needs (name: bytes)."""

    opstamp: int
    meta: str
    files: dict[str, int]
    published_at: float = 0.0

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "v": 1,
                "opstamp": self.opstamp,
                "published_at": self.published_at,
                "files": self.files,
                "meta": self.meta,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Commit:
        doc = json.loads(raw)
        return cls(
            opstamp=int(doc["opstamp"]),
            meta=doc["meta"],
            files={str(k): int(v) for k, v in doc["files"].items()},
            published_at=float(doc.get("published_at", 0.0)),
        )

    @property
    def bytes(self) -> int:
        return sum(self.files.values())

    def same(self, other: Commit | None) -> bool:
        """Whether ``other`` is this commit (whenever and by whom it was published)."""
        return other is not None and other.meta == self.meta


def commit_files(directory: Path, meta: str) -> dict[str, int]:
    """The files the commit whose Tantivy ``meta.json`` is ``meta`` needs in ``directory``:
    each segment's files and the deletes file of the commit's opstamp (an older one may
    still lie beside it until Tantivy's garbage collection)."""
    wanted: dict[str, str | None] = {}
    for segment in json.loads(meta)["segments"]:
        deletes = segment.get("deletes")
        wanted[segment["segment_id"].replace("-", "")] = (
            f"{deletes['opstamp']}.del" if deletes else None
        )
    files: dict[str, int] = {}
    for entry in os.scandir(directory):
        segment, dot, rest = entry.name.partition(".")
        if not dot or segment not in wanted or rest.endswith(PART):
            continue
        if rest.endswith(".del") and rest != wanted[segment]:
            continue
        files[entry.name] = entry.stat().st_size
    return files


def local_commit(directory: Path) -> Commit | None:
    """The commit the Tantivy directory holds (None: no index there)."""
    try:
        meta = (directory / TANTIVY_META).read_text()
    except FileNotFoundError:
        return None
    return Commit(int(json.loads(meta)["opstamp"]), meta, commit_files(directory, meta))


def held_commit(directory: Path) -> Commit | None:
    """The published commit ``directory`` holds or started from (None: none recorded)."""
    try:
        return Commit.from_json((directory / HELD).read_bytes())
    except (OSError, ValueError, KeyError):
        return None


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a temporary file renamed over it."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}{PART}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class IndexObjects:
    """The objects of one job's index: ``s3://BUCKET/PREFIX/<job>/…``."""

    def __init__(self, url: str, job: str) -> None:
        self.bucket, prefix = parse_url(url)
        self.prefix = f"{prefix}/{job}" if prefix else job
        self.url = f"s3://{self.bucket}/{self.prefix}"
        self._store: Any = None
        self._bucket_ready = False

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = s3_store(self.bucket, self.prefix)
        return self._store

    def read_commit(self) -> Commit | None:
        """The published commit (None: nothing published yet)."""
        import obstore

        try:
            raw = bytes(obstore.get(self.store, COMMIT_OBJECT).bytes())
        except FileNotFoundError:
            return None
        except Exception as e:
            if "NoSuchBucket" in str(e):  # nothing published yet
                return None
            raise IndexStoreError(f"cannot read {self.url}/{COMMIT_OBJECT}: {one_line(e)}") from e
        return Commit.from_json(raw)

    def put_file(self, name: str, path: Path) -> None:
        """Put the local file ``path`` as the object ``name`` (never rewritten: its name is
        Tantivy's, unique to its content)."""
        import obstore

        self._ensure_bucket()
        try:
            obstore.put(self.store, name, path)
        except Exception as e:
            raise IndexStoreError(f"cannot put {self.url}/{name}: {one_line(e)}") from e

    def put_commit(self, commit: Commit) -> None:
        """Put the commit point (after every file it names)."""
        import obstore

        self._ensure_bucket()
        try:
            obstore.put(self.store, COMMIT_OBJECT, commit.to_json())
        except Exception as e:
            raise IndexStoreError(f"cannot put {self.url}/{COMMIT_OBJECT}: {one_line(e)}") from e

    def fetch(self, name: str, size: int, directory: Path) -> None:
        """Fetch the object ``name`` into ``directory`` under its name, whole (a partial
        file is never under the name), checking its size."""
        import obstore

        tmp = directory / f"{name}{PART}"
        try:
            result = obstore.get(self.store, name)
            with open(tmp, "wb") as fh:
                for chunk in result:
                    fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
        except FileNotFoundError as e:
            tmp.unlink(missing_ok=True)
            raise ObjectGone(f"no object {self.url}/{name} (dropped since)") from e
        except Exception as e:
            tmp.unlink(missing_ok=True)
            raise IndexStoreError(f"cannot fetch {self.url}/{name}: {one_line(e)}") from e
        got = tmp.stat().st_size
        if got != size:
            tmp.unlink(missing_ok=True)
            raise IndexStoreError(f"{self.url}/{name} has {got} bytes, not {size}")
        os.replace(tmp, directory / name)

    def names(self) -> list[str]:
        """Every object of the job's index."""
        import obstore

        try:
            return [
                meta["path"].rsplit("/", 1)[-1]
                for batch in obstore.list(self.store)
                for meta in batch
            ]
        except Exception as e:
            if "NoSuchBucket" in str(e):
                return []
            raise IndexStoreError(f"cannot list {self.url}: {one_line(e)}") from e

    def delete(self, names: list[str]) -> None:
        import obstore

        try:
            obstore.delete(self.store, names)
        except Exception as e:
            raise IndexStoreError(f"cannot delete from {self.url}: {one_line(e)}") from e

    def _ensure_bucket(self) -> None:
        if not self._bucket_ready:
            try:
                ensure_bucket(self.bucket)
            except Exception as e:
                raise IndexStoreError(f"cannot create bucket {self.bucket}: {one_line(e)}") from e
            self._bucket_ready = True


class StoreWait:
    """Waits out an outage of the object store: an action that fails is tried again, with
    back-off, and the log says once that the store went away and once that it is back.

    ``stopping``: once set, a failure is raised instead of waited out.
    """

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        stopping: threading.Event | None = None,
        first_wait: float = INDEX_STORE_FIRST_WAIT,
        max_wait: float = INDEX_STORE_MAX_WAIT,
    ) -> None:
        self.log, self.what = log, what
        self.stopping = stopping or threading.Event()
        self.first_wait, self.max_wait = first_wait, max_wait
        self.down_since: float | None = None
        self.outages = 0

    def run(self, action: Callable[[], T], between: Callable[[], None] | None = None) -> T:
        """``action()``, tried until it succeeds; ``between`` runs while it waits (it may
        raise to give up: the lease lost)."""
        pause = self.first_wait
        while True:
            try:
                result = action()
            except IndexStoreError as e:
                self.went_away(e)
                if self.stopping.is_set():
                    raise
                if between is not None:
                    between()
                self.stopping.wait(pause)
                pause = min(pause * 2, self.max_wait)
                continue
            self.came_back()
            return result

    def went_away(self, e: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.outages += 1
            self.log.warning(
                "%s: the object store does not answer (%s); waiting for it", self.what, e
            )

    def came_back(self) -> None:
        if self.down_since is not None:
            gone = time.monotonic() - self.down_since
            self.down_since = None
            self.log.warning("%s: the object store answers again after %.1f s", self.what, gone)


REPLICA_LOCK = ".replica.lock"
"""In a replica's directory: held by the process that syncs it."""
KEPT = frozenset(
    {TANTIVY_META, HELD, MANAGED, REPLICA_LOCK, ".tantivy-meta.lock", ".tantivy-writer.lock"}
)
"""The files of a local directory that are no segment's (never removed as dropped)."""


def fetch_missing(objects: IndexObjects, commit: Commit, directory: Path) -> tuple[int, int]:
    """Fetch the files of ``commit`` that ``directory`` lacks (or holds at another size);
    return how many files and bytes were fetched."""
    directory.mkdir(parents=True, exist_ok=True)
    files = fetched = 0
    for name, size in sorted(commit.files.items()):
        try:
            if (directory / name).stat().st_size == size:
                continue
        except FileNotFoundError:
            pass
        objects.fetch(name, size, directory)
        files += 1
        fetched += size
    return files, fetched


def install(commit: Commit, directory: Path) -> None:
    """Make ``commit`` the directory's commit: its files are there (:func:`fetch_missing`);
    Tantivy's ``meta.json`` is renamed into place, so a reader opens the commit before or
    the one after, whole."""
    write_atomically(directory / TANTIVY_META, commit.meta.encode())
    write_atomically(directory / HELD, commit.to_json())


def remove_dropped(commit: Commit, directory: Path, keep: Commit | None = None) -> list[str]:
    """Remove the segment files of ``directory`` that ``commit`` (and ``keep``) does not
    need. A reader that maps one keeps it (a removed file lives on while mapped); ``keep``,
    the commit before, leaves a reader of another process that is reloading that one
    until the next commit to open it."""
    needed = commit.files.keys() | (keep.files.keys() if keep is not None else set())
    gone = []
    for entry in os.scandir(directory):
        if entry.name in KEPT or entry.name in needed or not entry.is_file():
            continue
        if entry.name.endswith(PART) and time.time() - entry.stat().st_mtime < 3600:
            continue  # being fetched (or written) by another process
        Path(entry.path).unlink(missing_ok=True)
        gone.append(entry.name)
    return gone
