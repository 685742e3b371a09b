"""The index master's side of an index in an object store: each commit published.

The index master writes its Tantivy directory locally (``$SRCRAWL_HOME/index-local/<job>``)
and, after each commit, publishes it under the job's prefix (indexer/published.py): the
files the store lacks first, then the commit point, ``meta.json``. The commit is thus
published before :meth:`IndexWriter.commit` returns, so a page is marked indexed (and its
results acknowledged) only once replicas can have it: an outage of the store is waited
out (one log line when it goes, one when it is back) with the pages unmarked, and a
master killed meanwhile leaves them to be written again by the next.

Files dropped by a commit (segments merged away, older deletes files) are deleted from the
store INDEX_DROPPED_GRACE seconds after the commit that dropped them was published, so a
replica still fetching the commit before has time to end. At start, the objects that no
published commit names (a killed master's half-published commit) are dropped the same way.

A master starting on a machine whose directory does not continue the published commit
(another machine's master published since, or it never held the index) first fetches the
published commit into it, as a replica does, so it goes on from what replicas hold.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from srcrawl.core.defaults import INDEX_DROPPED_GRACE
from srcrawl.indexer.published import (
    HELD,
    MANAGED,
    TANTIVY_META,
    Commit,
    IndexObjects,
    StoreWait,
    fetch_missing,
    held_commit,
    install,
    local_commit,
    remove_dropped,
    write_atomically,
)

log = logging.getLogger("srcrawl.indexer")


class IndexPublisher:
    """Publishes the commits of the Tantivy directory ``directory`` to ``objects``."""

    def __init__(
        self,
        objects: IndexObjects,
        directory: Path,
        *,
        grace: float = INDEX_DROPPED_GRACE,
        on_published: Callable[[Commit], None] | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.objects, self.directory = objects, directory
        self.grace = grace
        self.on_published = on_published
        self.stopping = stopping or threading.Event()
        """Set (the master stops, or lost its lease), a publish that waits for the store
        gives up: the commit stays unpublished, its pages unmarked, indexed again later."""
        self.wait = StoreWait(log, f"index publish to {objects.url}", stopping=self.stopping)
        self.published: Commit | None = None
        self.dropped: dict[str, float] = {}  # object name -> when it may be deleted (monotonic)

    def restore(self) -> None:
        """Before the writer opens the directory: make it continue the published commit.

        Nothing published: the directory is published as it is at the first commit (an
        index built before it had an object store goes on). The directory started from
        the published commit (its record says so): kept, with its commits since (a master
        killed between a commit and its publish), which are published then. Else the
        published commit is fetched into it, replacing what it held.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        published = self.wait.run(self.objects.read_commit)
        self.published = published
        if published is None:
            return
        if not published.same(held_commit(self.directory)):
            files, size = self.wait.run(
                lambda: fetch_missing(self.objects, published, self.directory)
            )
            # Tantivy's writer deletes only files on its list: these become its own
            write_atomically(
                self.directory / MANAGED,
                json.dumps([TANTIVY_META, *sorted(published.files)]).encode(),
            )
            install(published, self.directory)
            remove_dropped(published, self.directory)
            log.info(
                "index: started from the published commit %d of %s (%d files, %d bytes fetched)",
                published.opstamp,
                self.objects.url,
                files,
                size,
            )
        # objects no commit names (a killed master's half-published commit) go after the grace
        stray = set(self.wait.run(self.objects.names)) - set(published.files) - {"meta.json"}
        later = time.monotonic() + self.grace
        self.dropped.update(dict.fromkeys(stray, later))

    def publish(self, fence: Callable[[], None] | None = None) -> Commit | None:
        """Publish the directory's commit unless it is the published one; return it.

        ``fence`` (the lease check) runs right before the commit point is written: if it
        raises, the commit is not published. An outage of the store is waited out.
        """
        local = local_commit(self.directory)
        if local is None or local.same(self.published):
            return None
        before = self.published.files if self.published is not None else {}
        for name in sorted(set(local.files) - set(before)):
            path = self.directory / name
            self.wait.run(lambda name=name, path=path: self.objects.put_file(name, path))
        if fence is not None:
            fence()
        commit = Commit(local.opstamp, local.meta, local.files, time.time())
        self.wait.run(lambda: self.objects.put_commit(commit))
        write_atomically(self.directory / HELD, commit.to_json())
        self.published = commit
        later = time.monotonic() + self.grace
        for name in set(before) - set(local.files):
            self.dropped.setdefault(name, later)
        for name in local.files:  # named again (a half-published commit's, re-put)
            self.dropped.pop(name, None)
        self.collect()
        if self.on_published is not None:
            self.on_published(commit)
        return commit

    def collect(self) -> list[str]:
        """Delete the dropped objects whose grace has passed (a failure: tried next time)."""
        now = time.monotonic()
        due = sorted(name for name, at in self.dropped.items() if at <= now)
        if not due:
            return []
        try:
            self.objects.delete(due)
        except Exception as e:  # the store's outage is said by the next publish's wait
            log.debug("index: cannot delete dropped objects yet: %s", e)
            return []
        for name in due:
            self.dropped.pop(name, None)
        return due
