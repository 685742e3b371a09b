"""A search server's replica of an index published to an object store (indexer/published.py).

``srcrawl serve`` and ``srcrawl search`` read a local Tantivy directory as always
(:class:`~srcrawl.indexer.engine.IndexReader`); with ``SRCRAWL_INDEX_DIR=s3://…`` that
directory is a replica (``$SRCRAWL_HOME/index-replica/<job>``) which this module keeps on
the published commit. Every sync period it reads the commit point; a new commit's files
that the replica lacks are fetched (each under a temporary name, renamed once whole),
then Tantivy's ``meta.json`` is renamed into place, the readers reload, and the files
neither it nor the commit before needs are removed (the other processes reading the
directory have until the next commit to reload). A reader thus opens the commit before or the one
after, whole: the commit point is published after its files, and it is installed here
after them too.

One process syncs a directory at a time (a lock file: the workers of one ``serve``, a
``search`` beside it); the others read what it installs. Each sync's outcome is kept in
Redis (``Keys.index_replicas``) for ``srcrawl status``: the commit held, when it was
published, how long it took from its publish to being searchable here.
"""

from __future__ import annotations

import fcntl
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from srcrawl.core.defaults import (
    DEFAULT_INDEX_SYNC_PERIOD,
    INDEX_REPLICA_FORGET_AFTER,
    INDEX_REPLICA_REPORT_EVERY,
)
from srcrawl.indexer.published import (
    REPLICA_LOCK,
    Commit,
    IndexObjects,
    IndexStoreError,
    ObjectGone,
    StoreWait,
    fetch_missing,
    held_commit,
    install,
    remove_dropped,
)

if TYPE_CHECKING:
    import redis

    from srcrawl.core.keys import Keys
    from srcrawl.settings.config import Config

log = logging.getLogger("srcrawl.indexer")


class IndexReplica:
    """The replica in ``directory`` of the index published to ``objects``.

    ``on_commit``: called once a new commit is installed (the readers' reload). ``client``
    and ``keys``: where the replica's state is recorded (none: not recorded).
    """

    def __init__(
        self,
        objects: IndexObjects,
        directory: Path,
        *,
        period: float = DEFAULT_INDEX_SYNC_PERIOD,
        on_commit: Callable[[], None] | None = None,
        client: redis.Redis | None = None,
        keys: Keys | None = None,
    ) -> None:
        self.objects, self.directory = objects, directory
        self.period = period
        self.on_commit = on_commit
        self.client, self.keys = client, keys
        self.id = f"{socket.gethostname()}:{directory.resolve()}"
        self.stopping = threading.Event()
        self.wait = StoreWait(log, f"index replica of {objects.url}", stopping=self.stopping)
        self.held: Commit | None = held_commit(directory)
        self.searchable_at: float | None = None  # epoch seconds the held commit was installed
        self.fetch_s: float | None = None  # seconds its files took to fetch
        self.checked_at: float | None = None  # epoch seconds of the last look at the store
        self.error: str | None = None
        self._lock_file: IO[bytes] | None = None
        self._reported = 0.0
        self._stopped = False
        self._thread: threading.Thread | None = None

    # -- one sync ----------------------------------------------------------------
    def sync(self) -> bool:
        """Look at the published commit once and install it if it is new; return whether a
        commit was installed. Another process syncing the directory: nothing done (False).

        Raises IndexStoreError when the store does not answer. A file that went missing
        (dropped by a later commit while this one was fetched) ends the sync: the next
        takes the later commit.
        """
        if not self._locked():
            return False
        published = self.objects.read_commit()
        self.checked_at = time.time()
        if published is None or published.same(self.held):
            self.error = None
            self._report()
            return False
        t0 = time.perf_counter()
        try:
            files, size = fetch_missing(self.objects, published, self.directory)
        except ObjectGone as e:  # a later commit is published: the next sync takes it
            log.debug("index replica: commit %d passed by: %s", published.opstamp, e)
            return False
        install(published, self.directory)
        before, self.held, self.error = self.held, published, None
        self.fetch_s = time.perf_counter() - t0
        self.searchable_at = time.time()
        if self.on_commit is not None:
            try:
                self.on_commit()
            except Exception as e:  # the readers reload on their own within a second
                log.warning("index replica: reload after commit %d: %s", published.opstamp, e)
        gone = remove_dropped(published, self.directory, keep=before)
        log.debug(
            "index replica: commit %d installed (%d files, %d bytes fetched, %d removed)",
            published.opstamp,
            files,
            size,
            len(gone),
        )
        self._report(force=True)
        return True

    def _locked(self) -> bool:
        """Whether this process syncs the directory (it holds the lock file, kept open)."""
        if self._lock_file is not None:
            return True
        self.directory.mkdir(parents=True, exist_ok=True)
        fh = open(self.directory / REPLICA_LOCK, "ab")  # noqa: SIM115 - held while this process syncs
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        self._lock_file = fh
        self.held = held_commit(self.directory)  # what another process installed meanwhile
        return True

    # -- following ---------------------------------------------------------------
    def start(self) -> IndexReplica:
        """Follow the published commits in a thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self.follow, name="index-replica", daemon=True)
        self._thread.start()
        return self

    def follow(self) -> None:
        """Sync every period until stopped; an outage of the store is waited out."""
        while not self.stopping.is_set():
            try:
                self.wait.run(self._sync_once)
            except IndexStoreError:
                break  # stopping
            except Exception as e:  # a replica that cannot sync says so and tries again
                if self.error is None:
                    log.warning("index replica of %s cannot sync: %s", self.objects.url, e)
                self.error = str(e)
            self.stopping.wait(self.period)

    def _sync_once(self) -> None:
        try:
            self.sync()
        except IndexStoreError as e:
            self.error = str(e)
            self._report()
            raise

    def stop(self) -> None:
        """Stop following; the state recorded says so (a stopped replica is not a silent
        one: ``srcrawl search`` syncs once and stops)."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._lock_file is not None:
            self._stopped = True
            self._report(force=True)
            self._lock_file.close()
            self._lock_file = None

    # -- what status shows -------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The replica's state as ``srcrawl status`` shows it."""
        held = self.held
        return {
            "id": self.id,
            "url": self.objects.url,
            "commit": held.opstamp if held is not None else None,
            "published_at": held.published_at if held is not None else None,
            "searchable_at": self.searchable_at,
            "fetch_s": round(self.fetch_s, 3) if self.fetch_s is not None else None,
            "checked_at": self.checked_at,
            "error": self.error,
            "stopped": self._stopped,
            "at": time.time(),
        }

    def _report(self, force: bool = False) -> None:
        """Record the state in Redis: a new commit at once, else every few seconds."""
        if self.client is None or self.keys is None:
            return
        now = time.monotonic()
        if not force and now - self._reported < INDEX_REPLICA_REPORT_EVERY:
            return
        self._reported = now
        try:
            self.client.hset(self.keys.index_replicas, self.id, json.dumps(self.state()))
            forget_gone_replicas(self.client, self.keys)
        except Exception as e:  # Redis away: the search server serves on
            log.debug("index replica: cannot record its state: %s", e)


def forget_gone_replicas(client: redis.Redis, keys: Keys, now: float | None = None) -> list[str]:
    """Remove the recorded states of the replicas that have not recorded one for
    INDEX_REPLICA_FORGET_AFTER seconds (an unreadable record too); their ids."""
    now = time.time() if now is None else now
    gone = []
    for rid, raw in client.hgetall(keys.index_replicas).items():
        try:
            at = float(json.loads(raw).get("at", 0))
        except (ValueError, TypeError, AttributeError):
            at = 0.0
        if now - at > INDEX_REPLICA_FORGET_AFTER:
            gone.append(rid.decode() if isinstance(rid, bytes) else rid)
    if gone:
        client.hdel(keys.index_replicas, *gone)
    return gone


def replica_of(
    cfg: Config, on_commit: Callable[[], None] | None = None, *, record: bool = True
) -> IndexReplica | None:
    """The replica ``cfg``'s searches read, when its index is in an object store (else
    None); ``record``: its state kept in ``cfg``'s Redis (if it answers)."""
    if cfg.index_url is None:
        return None
    client = None
    if record:
        try:
            client = cfg.redis()
        except Exception as e:  # no Redis: the replica syncs, unrecorded
            log.debug("index replica: no Redis to record its state in: %s", e)
    return IndexReplica(
        IndexObjects(cfg.index_url, cfg.job),
        cfg.index_path,
        period=cfg.index_sync_period,
        on_commit=on_commit,
        client=client,
        keys=cfg.keys,
    )
