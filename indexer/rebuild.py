"""A rebuild of the index (``srcrawl index --rebuild``): every stored page indexed again into
a fresh index, which replaces the job's only once it holds them all.

It is a run of the index master (indexer/master.py) under the same lease, with the same
slaves, that differs in four things:

- it schedules every indexable page, marked or not (``Store.indexable_pages``);
- it writes a fresh Tantivy directory beside the index, ``<index>+rebuild``, with the
  current schema (an index built by an older srcrawl keeps its own when written to);
- it keeps the marks of the pages it wrote in memory (16 bytes a page) instead of setting
  them: the store must not say a page is indexed while the index searched lacks it;
- once every page is merged (and none failed) it puts the fresh index in place.

Searches read the index directory by its path (``Config.index_path``), each reader
reopening it when it finds the directory replaced (``IndexReader``). The fresh directory
takes the old one's place by one rename, ``renameat2(RENAME_EXCHANGE)`` where the file
system has it (else two renames, between which a new reader finds no index and one
already open keeps searching the old), and the old is deleted: a reader opens the old
index or the new one, whole, never one being built. Its mapped files outlive their
deletion, so a search under way ends on the old one.

With the index in an object store (``SRCRAWL_INDEX_DIR=s3://…``) searches read replicas
that follow the published commits, not the master's directory: the fresh index is
published as one more commit (its files first, the commit point last, as every commit),
which replicas install as they install any, and then takes the place of the master's
working directory (``index-local/<job>``). Its commits before are not published, so no
replica sees it half built. The old index's objects, named by no commit any more, are
deleted by the next index run, after the grace a replica still fetching has.

The marks end consistent with the index searched, whenever the rebuild stops: before the
swap, every indexable page is unmarked (a crash then indexes everything again into the
old index); after it, the pages written are marked, each only if not fetched again since
(``Store.mark_indexed``). A page stored or fetched again during the rebuild, behind its
scan or after its text was read, stays unmarked: the next ``srcrawl index`` indexes it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srcrawl.core.defaults import DEFAULT_INDEX_REMOVE_BATCH, DEFAULT_STORE_BATCH
from srcrawl.core.errors import LeaseHeld, LeaseLost
from srcrawl.indexer.engine import IndexWriter
from srcrawl.indexer.held_results import HeldResults
from srcrawl.indexer.master import IndexerError, IndexMaster
from srcrawl.indexer.publisher import IndexPublisher
from srcrawl.indexer.task_window import TaskWindow

if TYPE_CHECKING:
    import redis

    from srcrawl.core.keys import Keys
    from srcrawl.indexer.published import IndexObjects
    from srcrawl.indexer.report import IndexReport
    from srcrawl.sql.store import Store

__all__ = ["IndexRebuild", "replace_directory", "staging_path"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def staging_path(index: Path) -> Path:
    """Where a rebuild of the index ``index`` builds: beside it (a rename replaces it), under
    a name no job's index has (``+`` is not in a job's name)."""
    return index.with_name(f"{index.name}+rebuild")


def _exchange(a: Path, b: Path) -> bool:
    """Swap the two paths in one step (Linux's ``renameat2``); whether it was done (False:
    no such call here, or the file system does not swap)."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(b))


def replace_directory(new: Path, live: Path) -> None:
    """Put the directory ``new`` in ``live``'s place (of the same file system), in one step
    where the file system can, and delete the one it replaces."""
    if live.exists() and _exchange(new, live):
        shutil.rmtree(new)  # the old one, now
        return
    old = live.with_name(f"{live.name}+old")
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        os.rename(live, old)
    os.rename(new, live)
    shutil.rmtree(old, ignore_errors=True)


class KeptMarks:
    """The pages a rebuild wrote, (fingerprint, fetch time), marked once its index is in
    place."""

    def __init__(self) -> None:
        self.fps = array("q")
        self.fetched = array("d")

    def add(self, versions: list[tuple[int, float]], _at: float) -> None:
        for fp, at in versions:
            self.fps.append(fp)
            self.fetched.append(at)

    def __len__(self) -> int:
        return len(self.fps)

    def apply(self, store: Store, at: float) -> None:
        """Mark the pages indexed at ``at``, each if not fetched again since it was written."""
        step = DEFAULT_STORE_BATCH * 10
        for i in range(0, len(self.fps), step):
            part = list(zip(self.fps[i : i + step], self.fetched[i : i + step], strict=True))
            store.mark_indexed(part, at)


class IndexRebuild(IndexMaster):
    """A run of the index master that indexes every stored page into a fresh index at
    ``staging_path(index_path)`` and puts it in place of ``index_path`` (see the module
    doc); ``publish_to``: the object store the index is published to."""

    def __init__(
        self,
        client: redis.Redis,
        store: Store,
        keys: Keys,
        index_path: Path,
        *,
        publish_to: IndexObjects | None = None,
        **options: Any,
    ) -> None:
        if options.get("follow") is not None:
            raise ValueError("a rebuild indexes what is stored and ends: it does not follow")
        self.live, self.staging = index_path, staging_path(index_path)
        self.objects = publish_to
        fresh = IndexWriter(self.staging, fresh=True)
        super().__init__(client, store, keys, index_path, writer=fresh, **options)
        self.marks = KeptMarks()
        window = self.tasks.size
        self.tasks = TaskWindow(
            store,
            self.q.trq,
            window,
            self.batch_pages,
            self.dictionary,
            pages=store.indexable_pages,
        )
        self.held = HeldResults(self.report, self.tasks.outstanding, mark=self.marks.add)

    def run(self, **kwargs: Any) -> IndexReport:
        """Rebuild the index (as :meth:`IndexMaster.run`, which ``kwargs`` are for). Raises
        IndexerError, the index left as it was, when a page failed or the run stopped
        before the end, or when the index directory cannot be replaced by a rename. A run
        that fails under the lease removes what it built."""
        self._check_place()
        try:
            return super().run(**kwargs)
        except (LeaseHeld, LeaseLost):
            raise  # the directory beside the index may be another rebuild's
        except BaseException:
            shutil.rmtree(self.staging, ignore_errors=True)
            raise

    def _check_place(self) -> None:
        """Refuse an index directory that is a mount point: nothing beside it can be
        renamed over it."""
        if self.live.is_dir() and os.stat(self.live).st_dev != os.stat(self.live.parent).st_dev:
            raise IndexerError(
                f"the index directory {self.live} is a mount point: a rebuild builds beside it "
                "and renames it into place; mount the directory above it instead"
            )

    def _remove_gone(self) -> None:
        """Nothing while the fresh index is built: the pages gone are settled once it is in
        place (:meth:`_complete`), the old index searched meanwhile keeps theirs."""

    def _complete(self) -> None:
        """Put the fresh index in place of the old one and mark what it holds (under the
        lease, which is checked right before the swap)."""
        if self.stopping.is_set() or self.report.failed:
            raise IndexerError(
                f"the rebuild did not complete ({self.report.failed} pages failed"
                f"{', and it was stopped' if self.stopping.is_set() else ''}): "
                "the index is as it was"
            )
        gone = self._drop_gone()
        # from here the store marks no page the index searched may lack (module doc)
        self.store.unmark_indexable()
        if self.objects is not None:
            self._say(
                f"index rebuilt ({len(self.marks)} pages): publishing it to {self.objects.url}"
            )
            self._publish_rebuilt(self.objects)
        self.lease.keep()
        replace_directory(self.staging, self.live)
        self._say(f"index rebuilt ({len(self.marks)} pages): it replaced the one at {self.live}")
        now = time.time()
        self.marks.apply(self.store, now)
        self.report.removed += self.store.settle_unindexable(gone, now)

    def _drop_gone(self) -> list[int]:
        """The pages unmarked and not indexable (some went away after the rebuild wrote
        them): deleted from the fresh index before it is put in place, settled after."""
        gone: list[int] = []
        while batch := self.store.unindexable_unmarked(
            DEFAULT_INDEX_REMOVE_BATCH, gone[-1] if gone else None
        ):
            gone += batch
        if gone:
            self.writer.delete(gone)
            self.writer.commit(before=self.lease.keep)
        return gone

    def _publish_rebuilt(self, objects: IndexObjects) -> None:
        """Publish the fresh index's commit as the next one (the lease renewed meanwhile, and
        checked before the commit point); the files of the one before are deleted later."""
        publisher = IndexPublisher(
            objects, self.staging, on_published=self._published, stopping=self.stopping
        )
        publisher.published = publisher.wait.run(objects.read_commit)
        self.writer.publisher = publisher
        self.writer.publish(self.lease.keep)
