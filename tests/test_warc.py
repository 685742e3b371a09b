"""WARC output: files an independent reader (warcio) accepts, store pointers that read back,
revisits, a SIGKILLed slave, and import of an archive wget wrote."""

from __future__ import annotations

import base64
import hashlib
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator as WarcioIterator
from warcio.cli import main as warcio_main

from srcrawl.master.crawl_run import start_crawl
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.settings.config import Config
from srcrawl.slave.warc_import import import_warc
from srcrawl.sql.sqlite_store import SQLiteStore
from srcrawl.testweb import TestWeb
from srcrawl.warc.check import check_file
from srcrawl.warc.output import WarcOutput
from srcrawl.warc.read import WarcTexts, read_payload
from srcrawl.warc.records import (
    NOT_MODIFIED_PROFILE,
    REVISIT_PROFILE,
    payload_digest,
    prepare_fetch,
    prepare_not_modified,
    revisit_record,
    warc_date,
)
from srcrawl.warc.storage import LocalWarcStorage, Pointer, WarcError

from .conftest import cli_env, run_cli

FAST = ["--delay", "0", "--delay-factor", "0", "--max-delay", "0", "--fetch-timeout", "2"]


def _records(path: Path) -> list[tuple[str, str, bytes]]:
    """(type, target URI, payload) of each record, read by warcio with digests checked."""
    out = []
    with open(path, "rb") as fh:
        for rec in WarcioIterator(fh, check_digests="raise"):
            out.append(
                (
                    rec.rec_type,
                    rec.rec_headers.get_header("WARC-Target-URI"),
                    rec.content_stream().read(),
                )
            )
    return out


def _heads(path: Path, kind: str) -> list:
    """The WARC headers of each record of type ``kind``, read by warcio."""
    with open(path, "rb") as fh:
        return [rec.rec_headers for rec in WarcioIterator(fh) if rec.rec_type == kind]


def _warcio_check(paths: list[Path]) -> None:
    with pytest.raises(SystemExit) as done:
        warcio_main(["check", *map(str, paths)])
    assert done.value.code in (0, None)


def test_records_rotate_read_back_and_pass_warcio(tmp_path: Path) -> None:
    storage = LocalWarcStorage(tmp_path)
    out = WarcOutput(storage, "job", max_bytes=3000)
    bodies = [f"<html><title>{i}</title>{'word ' * (100 * i)}</html>".encode() for i in range(8)]
    fetches = [
        prepare_fetch(
            f"http://127.0.0.1:1/p{i}",
            status=200,
            headers={"content-type": "text/html", "content-encoding": "gzip"},
            body=body,
            ip="127.0.0.1",
            fetched_at=1.7e9 + i,
            request=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            text=f"text {i}",
        )
        for i, body in enumerate(bodies)
    ]
    groups = [f.records() for f in fetches]
    groups.append((fetches[0].request, revisit_record(fetches[0])))
    pointers = [where[1] for where in out.append(groups)]
    out.close()
    files = sorted(tmp_path.glob("job/*.warc.gz"))
    assert len(files) >= 2 and len({p.file for p in pointers}) == len(files)  # rotated
    for pointer, body in zip(pointers, bodies, strict=False):
        assert read_payload(storage, pointer) == body
    _warcio_check(files)
    records = [r for f in files for r in _records(f)]
    assert [t for t, _u, _p in records].count("response") == 8
    assert [t for t, _u, _p in records].count("revisit") == 1
    responses = {u: p for t, u, p in records if t == "response"}
    assert responses["http://127.0.0.1:1/p3"] == bodies[3]
    texts = {u: p for t, u, p in records if t == "conversion"}
    assert texts["http://127.0.0.1:1/p3"] == b"text 3" and len(texts) == 8
    with open(files[0], "rb") as fh:
        first = next(r for r in WarcioIterator(fh) if r.rec_type == "response")
        assert first.rec_headers.get_header("WARC-IP-Address") == "127.0.0.1"
        assert first.rec_headers.get_header("WARC-Payload-Digest") == payload_digest(bodies[0])
        assert first.http_headers.get_header("Content-Encoding") is None  # bodies are decoded


def test_records_of_every_size_carry_standard_digests_and_ids(tmp_path: Path) -> None:
    # each member's zlib window is sized to its record (512 bytes up to 32 KB): bodies
    # on either side of those sizes, an empty one, and a URL beyond ASCII
    storage = LocalWarcStorage(tmp_path)
    out = WarcOutput(storage, "job", max_bytes=10**9)
    bodies = [b"", b"x", bytes(range(256)) * 2, b"<p>" + b"\xe4\xb8\xad" * 400, b"y" * 70_000]
    fetches = [
        prepare_fetch(
            f"http://127.0.0.1:1/\u4e2d/{i}",
            status=200,
            headers={},
            body=body,
            ip="",
            fetched_at=1.7e9,
            request=b"GET / HTTP/1.1\r\n\r\n",
            text="\u4e2d" * i,
        )
        for i, body in enumerate(bodies)
    ]
    placed = out.append([f.records() for f in fetches])
    out.close()
    for where, body in zip(placed, bodies, strict=True):
        assert read_payload(storage, where[1]) == body
    (path,) = tmp_path.glob("job/*.warc.gz")
    _warcio_check([path])
    records = _records(path)  # digests checked
    assert [p for t, _u, p in records if t == "response"] == bodies
    ids = [
        h.get_header("WARC-Record-ID")
        for kind in ("request", "response", "conversion")
        for h in _heads(path, kind)
    ]
    assert len(set(ids)) == len(ids) == 3 * len(bodies) - 1  # the first page has no text
    assert all(uuid.UUID(i[len("<urn:uuid:") : -1]).version == 4 for i in ids)
    digest = base64.b32encode(hashlib.sha1(bodies[-1]).digest()).decode()
    assert payload_digest(bodies[-1]) == f"sha1:{digest}"


@pytest.fixture(scope="module")
def web():
    # host 0 (slow and broken pages) is not crawled: seed_urls[1:]
    with TestWeb.generate(hosts=2, pages=30, seed=3) as tw:
        yield tw


def _crawl(env: dict[str, str], seeds: list[str], *extra: str) -> None:
    r = run_cli(["crawl", *seeds, "--depth", "6", "--slaves", "1", *FAST, *extra], env)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow
def test_crawl_keeps_bodies_in_warc_and_a_second_fetch_is_a_revisit(
    web, redis_url, keys, tmp_path
) -> None:
    env = cli_env(redis_url, keys.job, tmp_path)
    _crawl(env, web.seed_urls[1:])
    cfg = Config.load(env=env)
    store = cfg.store()
    pages = [p for p in store.iter_pages(with_body=True) if p.status == 200]
    assert pages and all(p.body is None and p.warc_file for p in pages)
    storage = LocalWarcStorage(cfg.warc_root)
    first = storage.names(keys.job)
    assert first
    for p in pages:
        body = read_payload(storage, Pointer(p.warc_file, p.warc_offset, p.warc_length))
        assert payload_digest(body) == p.payload_digest
    assert p.title and p.title.encode() in body
    # the text is a conversion record right after the response, not in the row
    assert p.text == "" and p.text_length and p.title.split()[0] in store.page_text(p)
    originals = {
        head.get_header("WARC-Record-ID"): head
        for name in first
        for head in _heads(storage.path(name), "response")
    }
    # the same pages again (a re-seed under another job): unchanged bodies are revisits
    env2 = {**env, "SRCRAWL_JOB": keys.job + "-again"}
    _crawl(env2, web.seed_urls[1:])
    again = storage.names(keys.job + "-again")
    records = [r for name in again for r in _records(storage.path(name))]
    kinds = [t for t, _u, _p in records]
    assert kinds.count("revisit") >= len(pages) and kinds.count("response") < len(pages)
    revisits = [head for name in again for head in _heads(storage.path(name), "revisit")]
    for head in revisits:  # each names the record it repeats: id, URI and date
        original = originals[head.get_header("WARC-Refers-To")]
        assert (
            head.get_header("WARC-Refers-To-Target-URI")
            == original.get_header("WARC-Target-URI")
            == head.get_header("WARC-Target-URI")
        )
        assert head.get_header("WARC-Refers-To-Date") == original.get_header("WARC-Date")
    _warcio_check([storage.path(n) for n in first + again])
    store2 = Config.load(env=env2).store()
    for p in store2.get_pages([p.fp for p in pages]):
        assert p.warc_file in first  # the row still points at the body, and the text
        assert p.text_length and store2.page_text(p) == store.page_text(p)
    listed = run_cli(["export", "warc"], env).stdout.split()
    assert listed == [str(storage.path(n)) for n in first]
    cfg.close()


def _warc_bytes(cfg: Config) -> int:
    """How many bytes the job's WARC files hold so far."""
    return sum(f.stat().st_size for f in Path(cfg.warc_root).rglob("*") if f.is_file())


def _slave_mid_write(client, cfg: Config) -> list:
    """Wait until a slave is mid-write: it wrote pages into its WARC file (8 or more)
    and holds more to write; its processing lists. Killed idle or before it wrote, it
    would test nothing: fail instead."""
    processing = f"{cfg.keys.srq('crawl')}:processing:*"
    pages = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pages = int(client.hget(cfg.keys.stats("crawl"), "pages") or 0)
        held = [k for k in client.scan_iter(match=processing) if client.llen(k)]
        if pages >= 8 and held and _warc_bytes(cfg) > 0:
            return held
        time.sleep(0.02)
    raise AssertionError(f"the slave was never mid-write ({pages} pages)")


@pytest.mark.slow
def test_slave_killed_mid_write_leaves_every_stored_page_readable(redis_url, keys, tmp_path):
    with TestWeb.generate(hosts=3, pages=15, seed=9, latency_ms=100) as tw:
        env = cli_env(redis_url, keys.job, tmp_path)
        cfg = Config.load(env=env)
        start_crawl(
            cfg,
            tw.seed_urls[1:],
            CrawlStrategy(
                max_depth=3,
                delay=0,
                delay_factor=0,
                max_delay=0,
                fetch_timeout=2,
                robots_defer=0.3,
                warc_max_bytes=20_000,
            ),
        )
        cmd = [sys.executable, "-m", "srcrawl.app.cli"]
        master = subprocess.Popen([*cmd, "master", "start"], env=env)
        victim = subprocess.Popen(
            [*cmd, "slave", "start", "--phases", "crawl", "--threads", "4", "--heartbeat-ttl", "1"],
            env=env,
        )
        try:
            client = cfg.redis()
            held = _slave_mid_write(client, cfg)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            # it died with tasks in hand (reaped only once its heartbeat lapses, a
            # second from now): pages it had not written when the kill came
            assert sum(client.llen(k) for k in held) > 0, "the slave held nothing when killed"
            acked = {p.fp for p in cfg.store().iter_pages()}
            rescuer = subprocess.Popen([*cmd, "slave", "start", "--phases", "crawl"], env=env)
            assert master.wait(timeout=180) == 0
            rescuer.send_signal(signal.SIGTERM)
            rescuer.wait(timeout=30)
        finally:
            for p in (master, victim):
                if p.poll() is None:
                    p.kill()
        storage = LocalWarcStorage(cfg.warc_root)
        pages = {p.fp: p for p in cfg.store().iter_pages()}
        assert acked and acked <= set(pages)
        readable = 0
        for p in pages.values():
            if p.warc_file:
                body = read_payload(storage, Pointer(p.warc_file, p.warc_offset, p.warc_length))
                assert payload_digest(body) == p.payload_digest
                readable += 1
        assert readable >= len([p for p in pages.values() if p.status == 200])
        # a torn record the kill may have left is cut off; then every file passes warcio
        cut = run_cli(["export", "warc", "--truncate-torn"], env)
        assert cut.returncode == 0, cut.stderr
        files = [Path(line) for line in cut.stdout.split()]
        assert files and all(check_file(f).whole == f.stat().st_size for f in files)
        _warcio_check(files)
        cfg.close()


@pytest.mark.slow
def test_import_of_a_wget_warc_gives_the_crawls_pages_and_links(web, redis_url, keys, tmp_path):
    env = cli_env(redis_url, keys.job, tmp_path)
    seed = web.seed_urls[1]
    _crawl(env, [seed])
    crawled = Config.load(env=env).store()
    warc = tmp_path / "wget"
    # wget counts every port of 127.0.0.1 as one host: the other test web hosts are refused
    others = "|".join(u.rstrip("/").replace(".", r"\.") for u in web.seed_urls if u != seed)
    subprocess.run(
        [
            "/usr/bin/wget",
            "-r",
            "-l",
            "6",
            "-q",
            "--no-proxy",
            "--timeout=2",
            "--tries=1",
            f"--reject-regex=^({others})",
            f"--warc-file={warc}",
            "--no-warc-keep-log",
            "--delete-after",
            "-P",
            str(tmp_path / "mirror"),
            seed,
        ],
        check=False,
        timeout=120,
        cwd=tmp_path,
    )
    archive = Path(f"{warc}.warc.gz")
    assert archive.exists()
    imported = SQLiteStore(str(tmp_path / "imported.db"))
    imported.init_schema()
    counts = import_warc(imported, archive)
    assert counts.pages > 0
    ok = {p.url for p in crawled.iter_pages() if p.status == 200}
    got = {p.url for p in imported.iter_pages() if p.status == 200}
    assert got == ok
    assert set(imported.iter_link_urls()) == set(crawled.iter_link_urls())
    page = next(p for p in imported.get_pages([p.fp for p in crawled.iter_pages()]) if p.text)
    [theirs] = crawled.get_pages([page.fp])
    assert page.title == theirs.title
    # the crawl keeps its text in the WARC (a conversion record), the import in the row
    assert theirs.text == "" and theirs.text_length
    [(_fp, _at, _url, _title, text)] = crawled.index_documents([page.fp])
    assert page.text == text


def test_a_torn_record_is_found_and_cut_off_to_the_last_whole_one(redis_url, keys, tmp_path):
    env = cli_env(redis_url, keys.job, tmp_path)
    storage = LocalWarcStorage(Config.load(env=env).warc_root)
    out = WarcOutput(storage, keys.job, max_bytes=10**6)
    fetches = [
        prepare_fetch(
            f"http://127.0.0.1:1/p{i}",
            status=200,
            headers={},
            body=b"x" * 500 * i,
            ip="",
            fetched_at=1.7e9,
            request=b"GET / HTTP/1.1\r\n\r\n",
            text=f"t{i}",
        )
        for i in range(1, 4)
    ]
    [*_whole, last] = out.append([f.records() for f in fetches])
    assert check_file(storage.path(last[0].file)).in_use  # its writer holds it
    out.close()
    [name] = storage.names(keys.job)
    path = storage.path(name)
    sound = path.stat().st_size
    assert check_file(path).whole == sound
    torn_at = last[1].offset + last[1].length // 2  # killed halfway through a response
    with open(path, "r+b") as fh:
        fh.truncate(torn_at)
    found = run_cli(["export", "warc"], env)
    assert found.returncode == 1 and "torn record after byte" in found.stderr
    assert path.stat().st_size == torn_at  # nothing cut without the flag
    cut = run_cli(["export", "warc", "--truncate-torn"], env)
    assert cut.returncode == 0 and "torn record cut off" in cut.stderr
    assert cut.stdout.split() == [str(path)]
    assert path.stat().st_size == last[0].offset + last[0].length  # the request before it
    _warcio_check([path])
    assert [t for t, _u, _p in _records(path)] == ["request", "response", "conversion"] * 2 + [
        "request"
    ]


class _FailingSync(LocalWarcStorage):
    """A directory whose next fsync fails (a disk error), as the OS reports one."""

    fail = True

    def make_durable(self, fh) -> None:
        if self.fail:
            self.fail = False
            raise OSError(5, "Input/output error")
        super().make_durable(fh)


def test_a_failed_fsync_keeps_the_batch_for_the_next_flush_in_a_new_file(tmp_path):
    from srcrawl.slave.page_writer import PageWriter
    from srcrawl.sql.pages import Page

    store = SQLiteStore(str(tmp_path / "s.db"))
    store.init_schema()
    storage = _FailingSync(tmp_path / "warc")
    writer = PageWriter(store, WarcOutput(storage, "job", max_bytes=10**6))
    body = b"<html><title>t</title>body</html>"
    page = Page(fp=1, url="http://127.0.0.1:1/", host="127.0.0.1", status=200, text="body")
    fetch = prepare_fetch(
        page.url,
        status=200,
        headers={},
        body=body,
        ip="",
        fetched_at=1.7e9,
        request=b"GET / HTTP/1.1\r\n\r\n",
        text="body",
    )
    page.payload_digest = fetch.digest
    writer.add([page], [(1, 2, "a")], [(page, fetch)])
    with pytest.raises(WarcError):
        writer.flush()  # no ack: the page waits for the next flush
    assert store.get_pages([1]) == []  # its row waited for the fsync, and was rolled back
    [lost] = storage.names("job")
    assert writer.flush() == 1
    [row] = store.get_pages([1])
    assert row.warc_file != lost and row.warc_file in storage.names("job")  # written again
    assert read_payload(storage, Pointer(row.warc_file, row.warc_offset, row.warc_length)) == body
    store.warc_texts = WarcTexts(storage.root)
    assert store.page_text(row) == "body" and writer.revisits == 0
    writer.warc.close()
    store.close()


def test_records_made_before_a_switch_to_sql_bodies_still_go_to_their_file(tmp_path):
    """A resumed crawl may turn WARC output off (--body-store sql) while a parse thread
    has a page's records made: they are written to the file they were made for, the
    next page keeps its body in the store, and WARC output coming back reuses the file."""
    from srcrawl.slave.page_writer import PageWriter
    from srcrawl.sql.pages import Page, compress_body

    store = SQLiteStore(str(tmp_path / "s.db"))
    store.init_schema()
    storage = LocalWarcStorage(tmp_path / "warc")
    writer = PageWriter(store)
    made = []
    writer.use_warc(True, lambda: made.append(1) or WarcOutput(storage, "job", 10**6))
    body = b"<html><title>t</title>body</html>"
    page = Page(fp=1, url="http://127.0.0.1:1/", host="127.0.0.1", status=200, text="body")
    fetch = prepare_fetch(
        page.url,
        status=200,
        headers={},
        body=body,
        ip="",
        fetched_at=1.7e9,
        request=b"GET / HTTP/1.1\r\n\r\n",
        text="body",
    )
    writer.add([page], [], [(page, fetch)])
    writer.use_warc(False, lambda: pytest.fail("no output is made to turn WARC off"))
    assert writer.warc is None
    plain = Page(
        fp=2,
        url="http://127.0.0.1:1/2",
        host="127.0.0.1",
        status=200,
        text="two",
        body=compress_body(b"two"),
    )
    writer.add([plain], [])
    assert writer.flush() == 2
    rows = {p.fp: p for p in store.get_pages([1, 2], with_body=True)}
    [name] = storage.names("job")
    assert rows[1].warc_file == name
    assert read_payload(storage, Pointer(name, rows[1].warc_offset, rows[1].warc_length)) == body
    assert rows[2].warc_file is None and rows[2].body == compress_body(b"two")
    writer.use_warc(True, lambda: pytest.fail("the open output is used again"))
    assert writer.warc is not None and made == [1]
    writer.close()
    _warcio_check([storage.path(name)])
    store.close()


def _all_records(path: Path) -> list[tuple[str, object, object]]:
    """(type, WARC headers, HTTP headers or None) of each record of ``path``, in order."""
    with open(path, "rb") as fh:
        return [(r.rec_type, r.rec_headers, r.http_headers) for r in WarcioIterator(fh)]


def _first_fetches(tmp_path: Path, bodies: dict[int, bytes], at: float) -> tuple:
    """A page writer on a real store and WARC directory that stored ``bodies`` (fp ->
    body, with the text ``words FP``) as fetched at ``at``."""
    from srcrawl.slave.page_writer import PageWriter
    from srcrawl.sql.pages import Page

    store = SQLiteStore(str(tmp_path / "s.db"))
    store.init_schema()
    storage = LocalWarcStorage(tmp_path / "warc")
    store.warc_texts = WarcTexts(storage.root)
    writer = PageWriter(store, WarcOutput(storage, "job", max_bytes=10**6))
    for fp, body in bodies.items():
        page = Page(
            fp=fp,
            url=f"http://127.0.0.1:1/{fp}",
            host="127.0.0.1:1",
            status=200,
            fetched_at=at,
            text=f"words {fp}",
        )
        fetch = prepare_fetch(
            page.url,
            status=200,
            headers={"etag": '"0"'},
            body=body,
            ip="127.0.0.1",
            fetched_at=at,
            request=b"GET / HTTP/1.1\r\n\r\n",
            text=page.text,
        )
        page.payload_digest = fetch.digest
        writer.add([page], [], [(page, fetch)])
    assert writer.flush() == len(bodies)
    return store, storage, writer


def _names_its_original(request: Any, revisit: Any, responses: dict, at: float) -> None:
    """``revisit`` follows its ``request`` and names an existing response of its URI."""
    original = responses[revisit.get_header("WARC-Refers-To")]
    url = revisit.get_header("WARC-Target-URI")
    assert (
        original.get_header("WARC-Target-URI")
        == url
        == request.get_header("WARC-Target-URI")
        == revisit.get_header("WARC-Refers-To-Target-URI")
    )
    assert revisit.get_header("WARC-Refers-To-Date") == original.get_header("WARC-Date")
    assert revisit.get_header("WARC-Date") == warc_date(at)
    assert request.get_header("WARC-Concurrent-To") == revisit.get_header("WARC-Record-ID")


def _refetched(url: str, body: bytes, text: str, at: float, request: bytes) -> Any:
    """A 200 of ``url`` fetched again at ``at``, without validators."""
    return prepare_fetch(
        url, status=200, headers={}, body=body, ip="", fetched_at=at, request=request, text=text
    )


def test_unchanged_recrawls_are_revisits_and_a_new_body_moves_the_row(tmp_path) -> None:
    then, now, req = 1.7e9, 1.7e9 + 60, b"GET / HTTP/1.1\r\n\r\n"
    bodies = {fp: f"<html><title>t</title>words {fp}</html>".encode() for fp in (1, 2, 3)}
    store, storage, writer = _first_fetches(tmp_path, bodies, then)
    urls = {fp: f"http://127.0.0.1:1/{fp}" for fp in bodies}
    first = {p.fp: p for p in store.get_pages(list(urls))}
    store.mark_indexed([(fp, p.fetched_at) for fp, p in first.items()], 5.0)
    # a 304; a 200 with the stored body; a 200 with the stored text in other markup
    not_modified = prepare_not_modified(
        urls[1], headers={"etag": '"0"'}, ip="127.0.0.1", fetched_at=now, request=req
    )
    same = _refetched(urls[2], bodies[2], "words 2", now, req)
    markup = bodies[3].replace(b"<html>", b'<html lang="en">')
    moved = _refetched(urls[3], markup, "words 3", now, req)
    touches = [(fp, now, 3, None, None, 60.0, now + 60) for fp in urls]
    writer.touch(touches, [(1, not_modified), (2, same), (3, moved)])
    assert writer.flush() == 0 and writer.revisits == 2
    [path] = storage.names("job")
    _warcio_check([storage.path(path)])
    records = _all_records(storage.path(path))
    kinds = ["request", "revisit", "request", "revisit", "request", "response", "conversion"]
    assert [t for t, _w, _h in records[9:]] == kinds
    responses = {w.get_header("WARC-Record-ID"): w for t, w, _h in records if t == "response"}
    _names_its_original(records[9][1], records[10][1], responses, now)
    _names_its_original(records[11][1], records[12][1], responses, now)
    nm, ident = records[10], records[12]
    assert nm[1].get_header("WARC-Profile") == NOT_MODIFIED_PROFILE
    assert nm[2].get_statuscode() == "304" and nm[2].get_header("ETag") == '"0"'
    assert nm[1].get_header("WARC-Payload-Digest") is None  # the profile has no payload
    assert nm[1].get_header("WARC-Truncated") is None  # the 304 is there whole
    assert ident[1].get_header("WARC-Profile") == REVISIT_PROFILE
    assert ident[1].get_header("WARC-Payload-Digest") == payload_digest(bodies[2])
    assert ident[2].get_statuscode() == "200"
    rows = {p.fp: p for p in store.get_pages(list(urls))}
    for fp in (1, 2):  # the stored records still hold body and text
        assert (rows[fp].warc_file, rows[fp].warc_offset) == (
            first[fp].warc_file,
            first[fp].warc_offset,
        )
    three = rows[3]
    assert three.warc_offset > first[3].warc_offset and three.payload_digest == moved.digest
    pointer = Pointer(three.warc_file, three.warc_offset, three.warc_length)
    assert read_payload(storage, pointer) == markup and store.page_text(three) == "words 3"
    assert all(rows[fp].checked_at == now and rows[fp].fetched_at == then for fp in urls)
    assert store.unindexed_pages(None, 10) == []  # the text did not change: no new index entry
    writer.warc.close()
    store.close()


def test_a_failed_fsync_commits_no_touch_and_writes_a_moved_body_again(tmp_path) -> None:
    """An unchanged recrawl's new body whose fsync failed: neither the touch nor the move
    is committed (the row would point at a record that may be lost); the next flush
    writes the records to a new file and commits both."""
    then, now, req = 1.7e9, 1.7e9 + 60, b"GET / HTTP/1.1\r\n\r\n"
    bodies = {1: b"<html><title>t</title>words 1</html>"}
    store, storage, writer = _first_fetches(tmp_path, bodies, then)
    [first] = store.get_pages([1])
    markup = bodies[1].replace(b"<html>", b'<html lang="en">')
    fetch = prepare_fetch(
        first.url,
        status=200,
        headers={},
        body=markup,
        ip="",
        fetched_at=now,
        request=req,
        text="words 1",
    )
    writer.touch([(1, now, 3, None, None, 60.0, now + 60)], [(1, fetch)])

    def broken_disk(fh) -> None:
        raise OSError(5, "Input/output error")

    storage.make_durable = broken_disk
    with pytest.raises(WarcError):
        writer.flush()
    [row] = store.get_pages([1])
    assert row.checked_at is None and (row.warc_file, row.warc_offset, row.payload_digest) == (
        first.warc_file,
        first.warc_offset,
        first.payload_digest,
    )
    del storage.make_durable
    assert writer.flush() == 0
    [row] = store.get_pages([1])
    assert row.checked_at == now and row.warc_file != first.warc_file  # the new file
    pointer = Pointer(row.warc_file, row.warc_offset, row.warc_length)
    assert read_payload(storage, pointer) == markup and store.page_text(row) == "words 1"
    writer.close()
    store.close()


def test_a_304_with_no_stored_record_names_only_its_uri(tmp_path) -> None:
    from srcrawl.slave.page_writer import PageWriter

    store = SQLiteStore(str(tmp_path / "s.db"))
    store.init_schema()
    storage = LocalWarcStorage(tmp_path / "warc")
    writer = PageWriter(store, WarcOutput(storage, "job", max_bytes=10**6))
    fetch = prepare_not_modified(
        "http://127.0.0.1:1/",
        headers={},
        ip="",
        fetched_at=1.7e9,
        request=b"GET / HTTP/1.1\r\n\r\n",
    )
    writer.touch([(1, 1.7e9, 3, None, None, 60.0, 1.7e9 + 60)], [(1, fetch)])
    writer.flush()
    [name] = storage.names("job")
    _warcio_check([storage.path(name)])
    [(_t, _w, _h), (kind, revisit, _http)] = _all_records(storage.path(name))
    assert kind == "revisit" and revisit.get_header("WARC-Refers-To") is None
    assert revisit.get_header("WARC-Refers-To-Target-URI") == "http://127.0.0.1:1/"
    writer.warc.close()
    store.close()
