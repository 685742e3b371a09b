"""The index published to a real SeaweedFS (S3) and followed by replicas: the same hits as the
master's directory, merged segments dropped, a late replica catching up, the commit point
written last, an outage waited out, and crawl + index + search across two homes."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from pathlib import Path

import pytest

from srcrawl.indexer.engine import IndexDoc, IndexReader, IndexWriter
from srcrawl.indexer.published import COMMIT_OBJECT, IndexObjects, IndexStoreError, local_commit
from srcrawl.indexer.publisher import IndexPublisher
from srcrawl.indexer.replica import IndexReplica

WORDS = ["replica", "segment", "commit", "object", "store", "search"]


def _objects() -> IndexObjects:
    """A bucket of its own per test, which the publisher creates."""
    return IndexObjects(f"s3://index-{uuid.uuid4().hex[:12]}/indexes", "job")


def _docs(first: int, n: int) -> list[IndexDoc]:
    return [
        IndexDoc(
            fp=fp,
            fetched_at=0.0,
            host=f"h{fp % 3}.test",
            title=f"page {fp}",
            body=" ".join(WORDS[(fp + k) % len(WORDS)] for k in range(1 + fp % 7)) + f" n{fp}",
        )
        for fp in range(first, first + n)
    ]


def _writer(objects: IndexObjects, directory: Path, grace: float = 0.0) -> IndexWriter:
    writer = IndexWriter(directory, publisher=IndexPublisher(objects, directory, grace=grace))
    writer.start()
    return writer


def _hits(directory: Path, word: str = "replica") -> list[tuple[int, float]]:
    """The pages holding ``word`` with their scores, best first, as Tantivy ranks them."""
    reader = IndexReader(directory)
    searcher = reader.searcher()
    query = reader.index.parse_query(word, ["body"])
    hits = searcher.search(query, 1000).hits
    fps = searcher.fast_field_values("fp", [a for _s, a in hits])
    return sorted(((int(fp), round(s, 5)) for (s, _a), fp in zip(hits, fps, strict=True)))


def _segments(directory: Path) -> set[str]:
    meta = json.loads((directory / "meta.json").read_text())
    return {s["segment_id"].replace("-", "") for s in meta["segments"]}


def test_a_published_commit_is_followed_with_the_same_hits(
    s3, tmp_path: Path, redis_client, keys
) -> None:
    objects = _objects()
    work, rep = tmp_path / "work", tmp_path / "replica"
    writer = _writer(objects, work)
    writer.replace(_docs(0, 40))
    writer.commit()
    commit = local_commit(work)
    assert commit is not None and objects.read_commit().same(commit)
    reloads: list[int] = []
    replica = IndexReplica(
        objects, rep, client=redis_client, keys=keys, on_commit=lambda: reloads.append(1)
    )
    assert replica.sync() is True and reloads == [1]
    assert _hits(rep) == _hits(work) and len(_hits(rep)) > 5
    assert _hits(rep, "n7") == [(7, _hits(work, "n7")[0][1])]
    assert replica.sync() is False  # nothing new: nothing fetched
    state = json.loads(redis_client.hget(keys.index_replicas, replica.id))
    assert state["commit"] == commit.opstamp and state["searchable_at"] >= state["published_at"]
    # a second process on the same directory reads it and leaves the syncing to the first
    other = IndexReplica(objects, rep)
    writer.replace(_docs(40, 5))
    writer.commit()
    assert other.sync() is False and replica.sync() is True
    assert _hits(rep) == _hits(work)
    replica.stop()
    other.stop()


def test_merged_segments_are_dropped_from_the_store_and_the_replica(s3, tmp_path: Path) -> None:
    objects = _objects()
    work, rep = tmp_path / "work", tmp_path / "replica"
    writer = _writer(objects, work, grace=0.0)
    replica = IndexReplica(objects, rep)
    writer.replace(_docs(0, 10))
    writer.commit()
    assert replica.sync()
    first = _segments(rep)
    for c in range(1, 9):  # Tantivy merges its segments once they are eight
        writer.replace(_docs(c * 10, 10))
        writer.delete([c])  # a deletes file for the first segment each commit
        writer.commit()
    assert not first & _segments(work), "the first segment was merged away"
    writer.replace(_docs(500, 1))
    writer.commit()  # the grace (0 s) has passed: the dropped objects go at this publish
    stored = set(objects.names())
    assert not {n for n in stored if n.split(".")[0] in first}
    assert stored == set(local_commit(work).files) | {COMMIT_OBJECT}
    assert replica.sync()
    assert _hits(rep) == _hits(work) and all(fp not in range(1, 9) for fp, _s in _hits(rep))
    # the commit before's files stay one commit longer (another process may be opening it)
    assert [p for p in rep.iterdir() if p.name.split(".")[0] in first]
    writer.replace(_docs(600, 1))
    writer.commit()
    before = replica.held
    assert replica.sync()
    assert not [p for p in rep.iterdir() if p.name.split(".")[0] in first]
    segment_files = {p.name for p in rep.iterdir() if not p.name.startswith(".")} - {"meta.json"}
    assert segment_files <= set(replica.held.files) | set(before.files)
    replica.stop()


def test_dropped_objects_stay_through_the_grace(s3, tmp_path: Path) -> None:
    objects = _objects()
    work = tmp_path / "work"
    writer = _writer(objects, work, grace=3600.0)
    for c in range(9):
        writer.replace(_docs(c * 10, 10))
        writer.delete([c * 10])
        writer.commit()
    published = objects.read_commit()
    stored = set(objects.names())
    old = stored - set(published.files) - {COMMIT_OBJECT}
    assert old and old == set(writer.publisher.dropped)  # still there, for replicas mid-fetch


def test_a_late_replica_catches_up_in_one_sync(s3, tmp_path: Path) -> None:
    objects = _objects()
    work, rep = tmp_path / "work", tmp_path / "replica"
    writer = _writer(objects, work, grace=0.0)
    for c in range(12):
        writer.replace(_docs(c * 7, 7))
        writer.commit()
    replica = IndexReplica(objects, rep)
    assert replica.sync() is True
    assert replica.held.same(local_commit(work))
    assert _hits(rep) == _hits(work) and len(_hits(rep, "n83")) == 1
    assert {p.name for p in rep.iterdir()} >= set(replica.held.files)
    replica.stop()


def test_a_half_published_commit_is_never_seen(s3, tmp_path: Path) -> None:
    """The files of a commit are put, its commit point not (the fence refused it): a replica
    syncing then holds the commit before, whole; once the point is put, the new one."""
    objects = _objects()
    work, rep = tmp_path / "work", tmp_path / "replica"
    writer = _writer(objects, work)
    writer.replace(_docs(0, 20))
    writer.commit()
    replica = IndexReplica(objects, rep)
    assert replica.sync()
    before = _hits(rep)
    local_only = IndexWriter(work)  # a commit of the directory, not published yet
    local_only.replace(_docs(20, 30))
    local_only.commit()
    new = local_commit(work)

    def refuse() -> None:
        raise RuntimeError("lease lost")

    with pytest.raises(RuntimeError, match="lease lost"):
        writer.publisher.publish(fence=refuse)
    stored = set(objects.names())
    assert set(new.files) <= stored  # every file of the new commit is up …
    assert not objects.read_commit().same(new)  # … its commit point is not
    assert replica.sync() is False  # the published commit is still the one before
    assert _hits(rep) == before != _hits(work)
    assert writer.publisher.publish() is not None
    assert replica.sync() is True and _hits(rep) == _hits(work)
    replica.stop()


@pytest.mark.slow
def test_an_outage_of_the_store_is_waited_out_and_said_once(tmp_path, monkeypatch, caplog):
    """The store stops: a commit is not done (its pages would not be marked) until it is
    published; the replica serves what it holds; each says once that the store went and
    once that it is back."""
    from srcrawl.lab.seaweedfs import SeaweedFS

    server = SeaweedFS(tmp_path / "weed").start()
    try:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        objects = _objects()
        work, rep = tmp_path / "work", tmp_path / "replica"
        writer = _writer(objects, work)
        writer.replace(_docs(0, 10))
        writer.commit()
        replica = IndexReplica(objects, rep, period=0.1)
        assert replica.sync()
        replica.start()
        caplog.set_level(logging.WARNING, logger="srcrawl.indexer")
        server.stop()
        writer.replace(_docs(10, 10))
        done = threading.Event()
        committer = threading.Thread(target=lambda: (writer.commit(), done.set()))
        committer.start()
        assert not done.wait(4.0)  # waiting for the store
        assert _hits(rep, "n3")  # the replica searches what it holds meanwhile
        server.start()
        assert done.wait(60.0)
        committer.join()
        deadline = time.monotonic() + 20
        while not replica.held.same(local_commit(work)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _hits(rep) == _hits(work) and _hits(rep, "n15")
        replica.stop()
        messages = [r.getMessage() for r in caplog.records]
        for who in ("index publish", "index replica"):
            said = [m for m in messages if m.startswith(who)]
            assert sum("does not answer" in m for m in said) == 1, said
            assert sum("answers again" in m for m in said) == 1, said
    finally:
        server.stop()


def test_a_master_on_another_machine_goes_on_from_the_published_commit(s3, tmp_path) -> None:
    """A master whose directory does not continue the published commit fetches it first
    (its own commits then add to it); one whose directory does keeps it, and publishes
    the commit it made but had not published."""
    objects = _objects()
    first = _writer(objects, tmp_path / "a")
    first.replace(_docs(0, 20))
    first.commit()
    elsewhere = tmp_path / "b"
    unrelated = IndexWriter(elsewhere)  # an index of its own there: replaced
    unrelated.replace(_docs(900, 3))
    unrelated.commit()
    assert _hits(elsewhere, "n901")
    second = _writer(objects, elsewhere)
    assert _hits(elsewhere) == _hits(tmp_path / "a") and not _hits(elsewhere, "n901")
    second.replace(_docs(20, 5))
    second.commit()
    assert objects.read_commit().same(local_commit(elsewhere))
    both = _hits(elsewhere)
    assert {fp for fp, _s in both} >= {fp for fp, _s in _hits(tmp_path / "a")} | {20}
    local_only = IndexWriter(elsewhere)  # committed, then killed before its publish
    local_only.replace(_docs(30, 5))
    local_only.commit()
    third = _writer(objects, elsewhere)  # the same machine again: its commit is published
    assert objects.read_commit().same(local_commit(elsewhere))
    assert third.publisher.published.same(local_commit(elsewhere))
    replica = IndexReplica(objects, tmp_path / "replica")
    assert replica.sync() and _hits(tmp_path / "replica") == _hits(elsewhere) != both
    replica.stop()


def _pages(names: list[str], word: str) -> list:
    from srcrawl.core.urls import fingerprint
    from srcrawl.sql.pages import Page

    return [
        Page(
            fingerprint(f"http://127.0.0.1:9/{n}"),
            f"http://127.0.0.1:9/{n}",
            "127.0.0.1:9",
            status=200,
            fetched_at=1.0,
            title=n,
            text=f"{word} about {n} {word}",
        )
        for n in names
    ]


def test_a_portal_follows_the_published_commits(s3, redis_url, keys, tmp_path) -> None:
    """`srcrawl serve` in a home of its own searches each commit the index master publishes
    within seconds, and /api/status shows its replica and lag."""
    import requests

    from srcrawl.portal.server import build_portal, serving_in_thread
    from srcrawl.settings.config import Config

    from .conftest import cli_env, run_cli

    env = {
        **cli_env(redis_url, keys.job, tmp_path / "a"),
        "SRCRAWL_INDEX_DIR": f"s3://portal-{uuid.uuid4().hex[:12]}/index",
        "SRCRAWL_INDEX_SYNC_PERIOD": "0.2",
    }
    master_cfg = Config.load(env=env)
    master_cfg.store().put_pages(_pages(["one", "two"], "quasar"))
    r = run_cli(["index", "--slaves", "1"], env)
    assert r.returncode == 0, r.stderr[-3000:]
    portal_cfg = Config.load(env={**env, "SRCRAWL_HOME": str(tmp_path / "b")})
    portal = build_portal(portal_cfg, threads=0)
    with serving_in_thread(portal) as url:
        found = requests.get(f"{url}api/search", params={"q": "quasar"}, timeout=10).json()
        assert {h["title"] for h in found["hits"]} == {"one", "two"}
        master_cfg.store().put_pages(_pages(["three"], "quasar"))
        r = run_cli(["index", "--slaves", "1"], env)
        assert r.returncode == 0, r.stderr[-3000:]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = requests.get(f"{url}api/search", params={"q": "quasar"}, timeout=10).json()
            if len(found["hits"]) == 3:
                break
            time.sleep(0.1)
        assert {h["title"] for h in found["hits"]} == {"one", "two", "three"}
        status = requests.get(f"{url}api/status", timeout=10).json()["index_copies"]
        [replica] = status["replicas"]
        assert replica["commit"] == status["published"]["commit"] and not replica["behind"]
        assert 0 <= replica["searchable_after_s"] < 10
        page = requests.get(f"{url}status", timeout=10).text
        assert 'id="replicas"' in page and "up to date" in page
    master_cfg.close()
    portal_cfg.close()


def _page(name: str, text: str):
    from srcrawl.core.urls import fingerprint
    from srcrawl.sql.pages import Page

    url = f"http://127.0.0.1:9/{name}"
    return Page(fingerprint(url), url, "127.0.0.1:9", fetched_at=time.time(), title=name, text=text)


def _wait_searchable(replica: IndexReplica, word: str, bound: float) -> None:
    """Sync ``replica`` until ``word`` is found there; fail after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with contextlib.suppress(IndexStoreError):
            replica.sync()
        if replica.held is not None and _hits(replica.directory, word):
            return
        time.sleep(0.2)
    pytest.fail(f"{word!r} never searchable on the replica")


@pytest.mark.slow
def test_a_master_marks_no_page_before_its_commit_is_published(
    redis_url, keys, tmp_path, monkeypatch
) -> None:
    """`srcrawl index --follow` with the store gone: a page stored meanwhile stays unmarked
    (its commit waits to be published) until the store is back; then a replica finds it."""
    import signal
    import subprocess
    import sys

    from srcrawl.core.urls import fingerprint
    from srcrawl.lab.seaweedfs import SeaweedFS
    from srcrawl.settings.config import DatabaseURL
    from srcrawl.sql.store import open_store

    from .conftest import cli_env

    server = SeaweedFS(tmp_path / "weed").start()
    proc = None
    try:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        url = f"s3://outage-{uuid.uuid4().hex[:12]}/index"
        env = {**cli_env(redis_url, keys.job, tmp_path), **server.env(), "SRCRAWL_INDEX_DIR": url}
        store = open_store(DatabaseURL.parse(env["SRCRAWL_DB_URL"]))
        store.init_schema()
        store.save_fetched([_page("old", "an old page about lighthouses")], [])
        cmd = [sys.executable, "-m", "srcrawl.app.cli", "index", "--follow", "--slaves", "1"]
        proc = subprocess.Popen(
            [*cmd, "--max-delay", "2s"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        replica = IndexReplica(IndexObjects(url, keys.job), tmp_path / "replica")
        _wait_searchable(replica, "lighthouses", 60)
        server.stop()
        new = _page("new", "fresh news about zeppelins")
        store.save_fetched([new], [])
        time.sleep(8)  # four times the delay: merged long since, were the store there
        assert proc.poll() is None
        assert fingerprint(new.url) in store.unindexed_pages(None, 100)
        server.start()
        _wait_searchable(replica, "zeppelins", 60)
        assert fingerprint(new.url) not in store.unindexed_pages(None, 100)
        replica.stop()
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1].decode()
        assert proc.returncode == 0, err[-3000:]
        assert err.count("the object store does not answer") == 1, err[-3000:]
        assert err.count("the object store answers again") == 1, err[-3000:]
        store.close()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        server.stop()


FAST = ["--delay", "0", "--delay-factor", "0", "--max-delay", "0", "--fetch-timeout", "2"]


@pytest.mark.slow
def test_crawl_index_and_search_from_another_home(s3, redis_url, keys, tmp_path) -> None:
    """WARC files and the index both in SeaweedFS: a crawl and an index run in one home,
    a search in another (its own replica) finds what the index master's directory does."""
    from srcrawl.testweb import TestWeb

    from .conftest import cli_env, run_cli

    bucket = f"s3://e2e-{uuid.uuid4().hex[:12]}"
    env = {
        **cli_env(redis_url, keys.job, tmp_path / "a"),
        **s3.env(),
        "SRCRAWL_WARC_DIR": f"{bucket}/warc",
        "SRCRAWL_INDEX_DIR": f"{bucket}/index",
        "SRCRAWL_WARC_PUBLISH_AGE": "1",
    }
    with TestWeb.generate(hosts=2, pages=20, seed=5) as web:
        r = run_cli(["crawl", *web.seed_urls[1:], "--depth", "5", "--slaves", "1", *FAST], env)
        assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli(["index", "--slaves", "1"], env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{bucket}/index" in r.stdout + r.stderr
    home_a = Path(env["SRCRAWL_HOME"])
    work = home_a / "index-local" / keys.job
    assert local_commit(work) is not None and not (home_a / "index" / keys.job).exists()
    word = max(
        (w for w in ("page", "link", "site", "the", "of") if _hits(work, w)),
        key=lambda w: len(_hits(work, w)),
    )
    other = {**env, "SRCRAWL_HOME": str(tmp_path / "b" / "home")}
    r = run_cli(["search", word, "--json", "--top", "50"], other)
    assert r.returncode == 0, r.stderr[-3000:]
    urls = [h["url"] for h in json.loads(r.stdout)]
    replica_dir = tmp_path / "b" / "home" / "index-replica" / keys.job
    assert urls and len(urls) == min(50, len(_hits(work, word)))
    assert _hits(replica_dir, word) == _hits(work, word)
    status = run_cli(["status"], other)
    assert status.returncode == 0, status.stderr
    assert "index published: commit" in status.stdout
    line = f"replica {__import__('socket').gethostname()}:{replica_dir.resolve()}  commit"
    assert line in status.stdout and "[stopped]" in status.stdout  # a search syncs once


def test_status_shows_the_published_commit_and_each_replicas_lag(redis_client, keys) -> None:
    from srcrawl.app.status import collect, render

    now = time.time()
    redis_client.hset(
        keys.index_published,
        mapping={"commit": 12, "published_at": now - 2.0, "files": 30, "bytes": 5_000_000},
    )
    fresh = {"id": "a:/r1", "commit": 12, "published_at": now - 2.0, "at": now}
    fresh["searchable_at"] = now - 1.5
    late = {"id": "b:/r2", "commit": 9, "published_at": now - 60.0, "at": now - 100.0}
    late["error"] = "IndexStoreError: no object x"
    for r in (fresh, late):
        redis_client.hset(keys.index_replicas, r["id"], json.dumps(r))
    snap = collect(redis_client, keys)
    [a, b] = snap["index_copies"]["replicas"]
    assert (a["behind"], a["silent"], a["searchable_after_s"]) == (False, False, 0.5)
    assert (b["behind"], b["silent"]) == (True, True) and 59 < b["age_s"] < 70
    text = render(snap)
    assert "index published: commit 12" in text and "30 files, 5.0 MB" in text
    assert "replica a:/r1  commit 12 (published 2.0 s ago, searchable 0.50 s after)" in text
    assert "replica b:/r2  commit 9" in text and "[behind; silent; error: IndexStoreError" in text
    late.update(stopped=True, error=None)
    redis_client.hset(keys.index_replicas, late["id"], json.dumps(late))
    assert "replica b:/r2  commit 9 (published" in render(collect(redis_client, keys))
    assert "[behind; stopped]" in render(collect(redis_client, keys))
    redis_client.delete(keys.index_published, keys.index_replicas)
    assert "index published" not in render(collect(redis_client, keys))


def test_a_replica_silent_for_a_day_is_forgotten(redis_client, keys) -> None:
    # each replica's record of its state removes those not recorded for a day, so
    # search servers long gone do not fill `srcrawl status`
    from srcrawl.core.defaults import INDEX_REPLICA_FORGET_AFTER
    from srcrawl.indexer.replica import forget_gone_replicas

    now = time.time()
    ages = {"live:/r": 5.0, "quiet:/r": INDEX_REPLICA_FORGET_AFTER - 60, "gone:/r": 2 * 86_400}
    for rid, age in ages.items():
        redis_client.hset(keys.index_replicas, rid, json.dumps({"id": rid, "at": now - age}))
    redis_client.hset(keys.index_replicas, "garbled:/r", b"not json")
    assert sorted(forget_gone_replicas(redis_client, keys, now)) == ["garbled:/r", "gone:/r"]
    assert sorted(redis_client.hkeys(keys.index_replicas)) == [b"live:/r", b"quiet:/r"]
    assert forget_gone_replicas(redis_client, keys, now) == []
    redis_client.delete(keys.index_replicas)


def test_a_commit_passed_by_mid_fetch_gives_way_to_the_next(s3, tmp_path: Path) -> None:
    """A replica that read a commit point whose files a later commit dropped (its grace
    over) ends that sync without a word of outage; the next sync installs the later one."""
    from srcrawl.indexer.published import ObjectGone, fetch_missing

    objects = _objects()
    work, rep = tmp_path / "work", tmp_path / "replica"
    writer = _writer(objects, work, grace=0.0)
    writer.replace(_docs(0, 10))
    writer.commit()
    old = objects.read_commit()
    for c in range(1, 10):
        writer.replace(_docs(c * 10, 10))
        writer.commit()
    with pytest.raises(ObjectGone):
        fetch_missing(objects, old, rep)
    replica = IndexReplica(objects, rep)
    assert replica.sync() is True and replica.error is None
    assert _hits(rep) == _hits(work)
    replica.stop()


def test_the_index_in_an_object_store_is_configured_by_its_url(tmp_path: Path) -> None:
    from srcrawl.core.errors import ConfigError
    from srcrawl.settings.config import Config

    home = tmp_path / "home"
    env = {"SRCRAWL_HOME": str(home), "SRCRAWL_JOB": "j", "SRCRAWL_INDEX_DIR": "s3://bkt/ix/"}
    cfg = Config.load(env=env)
    assert (cfg.index_url, cfg.index_dir, cfg.index_sync_period) == ("s3://bkt/ix", None, 1.0)
    assert cfg.index_path == home / "index-replica" / "j"
    assert cfg.index_work_path == home / "index-local" / "j"
    assert cfg.child_env()["SRCRAWL_INDEX_DIR"] == "s3://bkt/ix"
    assert IndexObjects(cfg.index_url, cfg.job).url == "s3://bkt/ix/j"
    plain = Config.load(env={"SRCRAWL_HOME": str(home), "SRCRAWL_JOB": "j"})
    assert plain.index_url is None
    assert plain.index_path == plain.index_work_path == home / "index" / "j"
    timed = Config.load(env={**env, "SRCRAWL_INDEX_SYNC_PERIOD": "0.25"})
    assert timed.index_sync_period == 0.25
    for bad in ({"SRCRAWL_INDEX_DIR": "s3://B_/x"}, {"SRCRAWL_INDEX_SYNC_PERIOD": "0"}):
        with pytest.raises(ConfigError):
            Config.load(env={**env, **bad})
