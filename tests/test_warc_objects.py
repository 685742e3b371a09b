"""WARC files as objects of a real SeaweedFS (S3): published whole when closed, read back by
ranges, no row before its object, spool files of a killed writer discarded, an outage
waited out."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import time
import uuid
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator as WarcioIterator

from srcrawl.sql.sqlite_store import SQLiteStore
from srcrawl.warc.objects import ObjectWarcStorage, parse_url
from srcrawl.warc.output import WarcOutput
from srcrawl.warc.read import WarcTexts, read_payload
from srcrawl.warc.records import payload_digest, prepare_fetch
from srcrawl.warc.storage import Pointer


def _url() -> str:
    """A bucket of its own per test, which the storage creates."""
    return f"s3://warc-{uuid.uuid4().hex[:12]}/crawls/eu"


def _fetch(i: int, words: int = 100):
    body = f"<html><title>{i}</title>{'word ' * (words * (i + 1))}</html>".encode()
    return prepare_fetch(
        f"http://127.0.0.1:1/p{i}",
        status=200,
        headers={"content-type": "text/html"},
        body=body,
        ip="127.0.0.1",
        fetched_at=1.7e9 + i,
        request=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        text=f"text {i}",
    ), body


def _whole(storage: ObjectWarcStorage, name: str) -> bytes:
    return storage.read(name, 0, storage._size(name))


def _warcio(data: bytes) -> list[tuple[str, str, bytes]]:
    return [
        (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read())
        for r in WarcioIterator(io.BytesIO(data), check_digests="raise")
    ]


def test_parse_url() -> None:
    assert parse_url("s3://bkt/a/b/") == ("bkt", "a/b")
    assert parse_url("s3://bkt") == ("bkt", "")


def test_a_closed_file_is_one_object_read_back_by_ranges_and_warcio(s3, tmp_path: Path) -> None:
    url = _url()
    storage = ObjectWarcStorage(url, tmp_path / "spool")
    out = WarcOutput(storage, "job", max_bytes=10**9, max_age=3600)
    made = [_fetch(i) for i in range(6)]
    placed = out.append([f.records() for f, _b in made], durable=False)
    out.sync()
    name = placed[0][1].file
    assert name.startswith("job/job-") and all(w[1].file == name for w in placed)
    # appended, not published: not in the store, and publish_due says so
    assert out.publish_due() is False
    assert storage.names("job") == [] and storage.path(name).exists()
    assert out.publish_due(final=True) is True
    assert storage.names("job") == [name] and not storage.path(name).exists()
    # a reader elsewhere (its own cache): each body by one ranged read, its text next to it
    reader = ObjectWarcStorage(url, tmp_path / "other-spool")
    texts = WarcTexts(reader)
    for i, ((_fetch_i, body), where) in enumerate(zip(made, placed, strict=True)):
        assert read_payload(reader, where[1]) == body
        assert texts.read(where[2].file, where[2].offset, where[2].length) == f"text {i}"
    gets = reader.gets
    assert read_payload(reader, placed[3][1]) == made[3][1] and reader.gets == gets  # cached
    records = _warcio(_whole(reader, name))
    assert [t for t, _u, _p in records].count("response") == 6
    assert {u: p for t, u, p in records if t == "response"}["http://127.0.0.1:1/p2"] == made[2][1]
    out.close()


def test_files_are_published_by_size_and_by_age_never_rewritten(s3, tmp_path: Path) -> None:
    storage = ObjectWarcStorage(_url(), tmp_path / "spool")
    out = WarcOutput(storage, "job", max_bytes=500, max_age=3600)
    made = [_fetch(i) for i in range(5)]
    placed = out.append([f.records() for f, _b in made])
    files = sorted({w[1].file for w in placed})
    assert len(files) >= 3  # rotated by size: every file but the open one is published
    assert storage.names("job") == files[:-1]
    out.max_age = 0.0  # the open one is old enough now
    assert out.publish_due() is True and storage.names("job") == files
    assert out.published == len(files)
    # a name is never written twice: a second PUT of a different object is refused
    fh = storage.create(files[0])
    fh.write(b"other bytes")
    with pytest.raises(Exception, match="exists"):
        storage.publish(files[0], fh)
    assert read_payload(storage, placed[0][1]) == made[0][1]


def test_spool_files_of_a_dead_writer_are_discarded_a_live_ones_kept(s3, tmp_path) -> None:
    spool = tmp_path / "spool"
    (spool / "job").mkdir(parents=True)
    dead = spool / "job" / "job-1-host-1-00001.warc.gz"
    dead.write_bytes(b"records no row points at")
    live = spool / "job" / "job-1-host-2-00001.warc.gz"
    with open(live, "wb") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        out = WarcOutput(ObjectWarcStorage(_url(), spool), "job", max_bytes=10**6)
        assert not dead.exists() and live.exists()
    out.close()


def _page_and_fetch(fp: int):
    from srcrawl.sql.pages import Page

    fetch, body = _fetch(fp)
    page = Page(fp=fp, url=fetch_url(fp), host="127.0.0.1", status=200, text=f"text {fp}")
    page.payload_digest = fetch.digest
    return page, fetch, body


def fetch_url(fp: int) -> str:
    return f"http://127.0.0.1:1/p{fp}"


def test_rows_wait_for_their_object(s3, tmp_path: Path) -> None:
    from srcrawl.slave.page_writer import PageWriter

    store = SQLiteStore(str(tmp_path / "s.db"))
    store.init_schema()
    storage = ObjectWarcStorage(_url(), tmp_path / "spool")
    writer = PageWriter(store, WarcOutput(storage, "job", max_bytes=10**9, max_age=3600))
    page, fetch, body = _page_and_fetch(1)
    writer.add([page], [(1, 2, "a")], [(page, fetch)])
    assert writer.flush() == 0 and writer.holding  # in the spool file only: no row
    assert store.get_pages([1]) == [] and writer.release() is True
    page2, fetch2, body2 = _page_and_fetch(2)
    writer.add([page2], [], [(page2, fetch2)])
    assert writer.flush() == 0 and store.get_pages([1, 2]) == []
    assert writer.release(final=True) is False  # published: both rows written
    rows = {p.fp: p for p in store.get_pages([1, 2])}
    assert set(rows) == {1, 2} and rows[1].warc_file == rows[2].warc_file
    assert rows[1].warc_file in storage.names("job")
    store.warc_texts = WarcTexts(storage)
    for fp, want in ((1, body), (2, body2)):
        row = rows[fp]
        got = read_payload(storage, Pointer(row.warc_file, row.warc_offset, row.warc_length))
        assert got == want and payload_digest(got) == row.payload_digest
        assert store.page_text(row) == f"text {fp}"
    writer.close()
    store.close()


@pytest.mark.slow
def test_an_outage_of_the_store_is_waited_out_and_said_once(tmp_path, monkeypatch, caplog):
    from srcrawl.lab.seaweedfs import SeaweedFS
    from srcrawl.slave.page_writer import PageWriter

    server = SeaweedFS(tmp_path / "weed").start()
    try:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        store = SQLiteStore(str(tmp_path / "s.db"))
        store.init_schema()
        storage = ObjectWarcStorage(_url(), tmp_path / "spool")
        writer = PageWriter(store, WarcOutput(storage, "job", max_bytes=10**9, max_age=3600))
        page, fetch, body = _page_and_fetch(1)
        writer.add([page], [], [(page, fetch)])
        writer.flush()
        server.stop()
        caplog.set_level(logging.WARNING, logger="srcrawl.warc")
        for _ in range(3):  # the store is gone: the row waits, said once
            assert writer.release(final=True) is True
        assert store.get_pages([1]) == []
        assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
        assert "unreachable" in caplog.records[0].message
        server.start()
        assert writer.release(final=True) is False
        [row] = store.get_pages([1])
        assert "back after" in caplog.records[-1].message
        pointer = Pointer(row.warc_file, row.warc_offset, row.warc_length)
        assert read_payload(storage, pointer) == body
        writer.close()
        store.close()
    finally:
        server.stop()


FAST = ["--delay", "0", "--delay-factor", "0", "--max-delay", "0", "--fetch-timeout", "2"]


def _s3_env(redis_url: str, job: str, tmp_path: Path, server) -> tuple[dict[str, str], str]:
    from .conftest import cli_env

    url = _url()
    env = {**cli_env(redis_url, job, tmp_path), **server.env(), "SRCRAWL_WARC_DIR": url}
    env["SRCRAWL_WARC_PUBLISH_AGE"] = "1"  # a test crawl's depths wait 1 s, not 5
    return env, url


def _spooled(env: dict[str, str]) -> list[Path]:
    return sorted(Path(env["SRCRAWL_HOME"]).glob("warc-spool/*/*.warc.gz"))


@pytest.mark.slow
def test_a_crawl_keeps_every_body_and_text_in_objects(s3, redis_url, keys, tmp_path) -> None:
    from srcrawl.settings.config import Config
    from srcrawl.testweb import TestWeb

    from .conftest import run_cli

    with TestWeb.generate(hosts=2, pages=30, seed=3) as web:
        env, url = _s3_env(redis_url, keys.job, tmp_path, s3)
        r = run_cli(["crawl", *web.seed_urls[1:], "--depth", "6", "--slaves", "1", *FAST], env)
        assert r.returncode == 0, r.stderr[-3000:]
    cfg = Config.load(env=env)
    assert cfg.warc_url == url
    store = cfg.store()
    pages = [p for p in store.iter_pages(with_body=True) if p.status == 200]
    assert len(pages) >= 20 and all(p.body is None and p.warc_file for p in pages)
    storage = ObjectWarcStorage(url, tmp_path / "reader-spool")
    names = storage.names(keys.job)
    assert names and {p.warc_file for p in pages} <= set(names)
    for p in pages:  # every body and text read back from the store
        body = read_payload(storage, Pointer(p.warc_file, p.warc_offset, p.warc_length))
        assert payload_digest(body) == p.payload_digest
        assert p.text == "" and p.text_length and p.title.split()[0] in store.page_text(p)
    responses = [r for name in names for r in _warcio(_whole(storage, name)) if r[0] == "response"]
    assert {u for _t, u, _p in responses} >= {p.url for p in pages}
    assert _spooled(env) == []  # every spool file published and removed
    listed = run_cli(["export", "warc"], env)
    assert listed.stdout.split() == [f"{url}/{n}" for n in names], listed.stderr
    cfg.close()


@pytest.mark.slow
def test_a_slave_killed_before_publishing_loses_nothing(s3, redis_url, keys, tmp_path):
    import signal
    import subprocess
    import sys

    from srcrawl.master.crawl_run import start_crawl
    from srcrawl.queues.crawl_strategy import CrawlStrategy
    from srcrawl.settings.config import Config
    from srcrawl.testweb import TestWeb

    with TestWeb.generate(hosts=3, pages=15, seed=9, latency_ms=100) as tw:
        env, url = _s3_env(redis_url, keys.job, tmp_path, s3)
        cfg = Config.load(env=env)
        start_crawl(
            cfg,
            tw.seed_urls[1:],
            CrawlStrategy(
                max_depth=3, delay=0, delay_factor=0, max_delay=0, fetch_timeout=2, robots_defer=0.3
            ),
        )
        cmd = [sys.executable, "-m", "srcrawl.app.cli"]
        master = subprocess.Popen([*cmd, "master", "start"], env=env)
        victim = subprocess.Popen(
            [*cmd, "slave", "start", "--phases", "crawl", "--threads", "4", "--heartbeat-ttl", "1"],
            env=env,
        )
        try:
            _wait_for_pages(cfg, 8)
            # the store stalls: the victim's next object cannot be published, its rows
            # wait; it is killed with records spooled and not published
            s3.pause()
            try:
                deadline = time.monotonic() + 30
                while not _spooled(env):
                    assert time.monotonic() < deadline, "nothing spooled while the store stalled"
                    time.sleep(0.05)
                time.sleep(0.5)  # a publish in progress, or due, for what is spooled
                assert _spooled(env)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                spooled_rows = {p.fp for p in cfg.store().iter_pages()}
            finally:
                s3.resume()
            # no row before its object: each one reads
            assert _every_body_reads(cfg, url, tmp_path / "check-spool") == spooled_rows
            rescuer = subprocess.Popen([*cmd, "slave", "start", "--phases", "crawl"], env=env)
            assert master.wait(timeout=180) == 0
            rescuer.send_signal(signal.SIGTERM)
            rescuer.wait(timeout=30)
        finally:
            for p in (master, victim):
                if p.poll() is None:
                    p.kill()
        assert _spooled(env) == []  # the victim's spool discarded, the rescuer's published
        # every page fetched again by the rescuer
        assert len(_every_body_reads(cfg, url, tmp_path / "reader-spool")) >= 30
        cfg.close()


def _wait_for_pages(cfg, n: int, timeout: float = 60) -> None:
    client, deadline = cfg.redis(), time.monotonic() + timeout
    while int(client.hget(cfg.keys.stats("crawl"), "pages") or 0) < n:
        assert time.monotonic() < deadline, f"fewer than {n} pages fetched in {timeout} s"
        time.sleep(0.02)


def _every_body_reads(cfg, url: str, spool: Path) -> set[int]:
    """The store's rows, each 200's body read back from its object by its pointer."""
    storage = ObjectWarcStorage(url, spool)
    rows = list(cfg.store().iter_pages())
    for p in rows:
        if p.status == 200:
            body = read_payload(storage, Pointer(p.warc_file, p.warc_offset, p.warc_length))
            assert payload_digest(body) == p.payload_digest
    return {p.fp for p in rows}


def _wait_for_an_object(url: str, job: str, spool: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ObjectWarcStorage(url, spool).names(job):
        assert time.monotonic() < deadline, f"no object published within {timeout} s"
        time.sleep(0.1)


def _holding_volumes(weed: Path, n: int) -> list[int]:
    """The volume servers holding copies of objects (an empty .dat is 8 bytes): which two of
    three hold the first object is SeaweedFS's placement."""
    return [
        i
        for i in range(n)
        if any(f.stat().st_size > 8 for f in (weed / f"volume{i}").glob("*.dat"))
    ]


@pytest.mark.slow
def test_a_volume_server_killed_mid_crawl_loses_nothing_with_replication(
    redis_url, keys, tmp_path, monkeypatch
):
    """Three volume servers, every object kept twice (``001``): one SIGKILLed mid-crawl,
    the crawl ends exact, and every record is read back from the copies left."""
    import subprocess
    import sys

    from srcrawl.core.urls import host_of
    from srcrawl.lab.seaweedfs import SeaweedCluster
    from srcrawl.queues.crawl_strategy import CrawlStrategy
    from srcrawl.queues.scope import Scope
    from srcrawl.settings.config import Config
    from srcrawl.testweb import TestWeb

    from .conftest import stored_pages

    cluster = SeaweedCluster(tmp_path / "weed", volumes=3, replication="001").start()
    for name, value in cluster.env().items():
        monkeypatch.setenv(name, value)
    try:
        with TestWeb.generate(hosts=3, pages=25, seed=4, latency_ms=30) as web:
            seeds = web.seed_urls[1:]
            scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=4))
            want = web.web.expected_crawl(seeds, 4, lambda url: scope.reject(url, 0) is None)
            env, url = _s3_env(redis_url, keys.job, tmp_path, cluster)
            cmd = [sys.executable, "-m", "srcrawl.app.cli", "crawl", *seeds, "--depth", "4"]
            crawl = subprocess.Popen(
                [*cmd, "--slaves", "2", *FAST],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            cfg = Config.load(env=env)
            client = cfg.redis()
            _wait_for_an_object(url, keys.job, tmp_path / "probe")
            stored_before = int(client.hget(cfg.keys.stats("crawl"), "pages") or 0)
            holding = _holding_volumes(tmp_path / "weed", 3)
            assert holding
            cluster.kill_volume(holding[0])
            _out, err = crawl.communicate(timeout=240)
            assert crawl.returncode == 0, err[-3000:]
            assert stored_before < len(want)  # the kill came mid-crawl
        pages = stored_pages(env)
        assert {p["url"]: p["depth"] for p in pages} == want
        # every body read back, from the copies the dead server did not hold, and by warcio
        _every_body_reads(cfg, url, tmp_path / "reader-spool")
        storage = ObjectWarcStorage(url, tmp_path / "reader-spool")
        names = storage.names(keys.job)
        responses = {
            u for n in names for t, u, _p in _warcio(_whole(storage, n)) if t == "response"
        }
        assert responses >= {p["url"] for p in pages if p["status"] == 200}
        cfg.close()
    finally:
        cluster.stop()


_AFTER_THE_STORE = r"""
import sys
from srcrawl.app.runner import run_local_crawl
from srcrawl.master.crawl_run import start_crawl
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.settings.config import Config

cfg = Config.load()
cfg.warc_storage().names(cfg.job)  # this process talks to the store before it starts children
start_crawl(cfg, sys.argv[1:], CrawlStrategy(max_depth=2, delay=0, delay_factor=0, max_delay=0))
final = run_local_crawl(cfg, slaves=1, threads=4)
print(final.get("pages", 0))
"""


@pytest.mark.slow
def test_a_process_that_used_the_store_starts_children_that_reach_it(s3, redis_url, keys, tmp_path):
    """Its children are new interpreters, not forks: the store client's runtime does not
    survive a fork, and a forked slave's first publish would hang for ever."""
    import subprocess
    import sys

    from srcrawl.testweb import TestWeb

    with TestWeb.generate(hosts=2, pages=10, seed=5) as web:
        env, _url = _s3_env(redis_url, keys.job, tmp_path, s3)
        r = subprocess.run(
            [sys.executable, "-c", _AFTER_THE_STORE, *web.seed_urls[1:]],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) >= 5


def _archive(path: Path, pages: dict[str, str]) -> None:
    """A standard WARC (gzipped) of HTML responses, written by warcio."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for url, html in pages.items():
            head = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            record = writer.create_warc_record(
                url, "response", payload=io.BytesIO(html.encode()), http_headers=head
            )
            writer.write_record(record)


def test_an_archive_imported_from_the_store_is_read_from_it(s3, redis_url, keys, tmp_path):
    """`srcrawl import warc s3://BUCKET/KEY`: the pages' rows name the object, and their
    bodies and texts are read back from it by ranged GETs, no local copy kept."""
    import boto3

    from srcrawl.settings.config import Config

    from .conftest import cli_env, run_cli

    pages = {
        f"http://archive.test/{i}.html": f"<title>page {i}</title><p>harbour {i} "
        f'<a href="/{(i + 1) % 3}.html">next</a>'
        for i in range(3)
    }
    local = tmp_path / "old.warc.gz"
    _archive(local, pages)
    client = boto3.client("s3")
    client.create_bucket(Bucket="archives")
    client.upload_file(str(local), "archives", "2019/old.warc.gz")
    local.unlink()
    url = "s3://archives/2019/old.warc.gz"
    env = cli_env(redis_url, keys.job, tmp_path)
    r = run_cli(["import", "warc", url], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{url}: 3 pages, 3 links")
    cfg = Config.load(env=env)
    store = cfg.store()
    rows = sorted(store.iter_pages(), key=lambda p: p.url)
    assert [p.url for p in rows] == sorted(pages) and {p.warc_file for p in rows} == {url}
    for p in rows:
        body = read_payload(cfg.warc_storage(), Pointer(p.warc_file, p.warc_offset, p.warc_length))
        assert body.decode() == pages[p.url]
        assert f"harbour {p.url[-6]}" in store.page_text(p)
    missing = run_cli(["import", "warc", "s3://archives/2019/none.warc.gz"], env)
    assert missing.returncode != 0 and "no object s3://archives/2019/none.warc.gz" in missing.stderr
    cfg.close()
