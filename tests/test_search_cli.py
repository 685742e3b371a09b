"""`srcrawl index --slaves N` and `srcrawl search` as a user runs them (real processes)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from import_probe import run_probed

from srcrawl.core.urls import fingerprint
from srcrawl.settings.config import DatabaseURL
from srcrawl.sql.pages import Page
from srcrawl.sql.store import open_store

pytestmark = pytest.mark.slow  # every test here runs for more than a second


def cli(python: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "srcrawl.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def env(redis_url, keys, tmp_path, monkeypatch) -> dict:
    db = tmp_path / "srcrawl.db"
    store = open_store(DatabaseURL(kind="sqlite", path=str(db)))
    store.init_schema()
    pages = [(f"p{i}", f"第{i}页 分布式系统 message queue 北京 {i % 3}") for i in range(30)]
    pages.append(("planted", "量子纠缠 tesseract 量子纠缠"))
    store.put_pages(
        Page(
            fp=fingerprint(f"http://127.0.0.1:9/{name}"),
            url=f"http://127.0.0.1:9/{name}",
            host="127.0.0.1:9",
            fetched_at=1.0,
            title=name,
            text=text,
        )
        for name, text in pages
    )
    store.close()
    return {
        **os.environ,
        "SRCRAWL_REDIS_URL": redis_url,
        "SRCRAWL_DB_URL": f"sqlite:///{db}",
        "SRCRAWL_JOB": keys.job,
        "SRCRAWL_HOME": str(tmp_path / "home"),
    }


@pytest.mark.slow
def test_index_with_local_slaves_then_search(python, env) -> None:
    run = cli(python, env, "index", "--slaves", "2", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["indexed"] == 31 and report["failed"] == 0 and report["merges"] > 0

    found = cli(python, env, "search", "量子纠缠 TESSERACT", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits[0]["url"] == "http://127.0.0.1:9/planted"
    assert set(hits[0]) == {"url", "title", "score", "snippet", "similar", "similar_urls"}
    assert "«tesseract»" in hits[0]["snippet"] and " ms" in found.stderr

    plain = cli(python, env, "search", "分布式系统 北京", "--top", "3")
    assert plain.returncode == 0
    assert plain.stdout.count("http://127.0.0.1:9/p") == 3
    assert "3 of 30 pages (every word)" in plain.stdout and " ms" in plain.stdout
    typo = cli(python, env, "search", "tesserakt")  # a word no page holds: the nearest
    assert "note: no page holds «tesserakt»" in typo.stdout
    assert "note: did you mean: tesseract" in typo.stdout

    again = cli(python, env, "index", "--slaves", "1", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["scheduled"] == 0


def test_unusable_queries_end_with_one_line_and_exit_2(python, env) -> None:
    for query, message in [
        ("", "empty query"),
        ("  ", "empty query"),
        ("the of 的 了", "no searchable words"),
        ("北京", "no index at"),  # nothing indexed yet
    ]:
        run = cli(python, env, "search", query)
        assert run.returncode == 2, (query, run.stdout, run.stderr)
        assert run.stderr.count("\n") == 1 and message in run.stderr
        assert "Traceback" not in run.stderr
    missing = cli(python, env, "search", "北京", "--user-dict", "/nonexistent/words.txt")
    assert missing.returncode == 2 and "cannot read user dictionary" in missing.stderr


def test_a_search_imports_only_what_it_needs_and_starts_no_redis(python, env, tmp_path) -> None:
    assert cli(python, env, "index", "--slaves", "1").returncode == 0
    # as a user without a Redis URL runs it: a search must not start the embedded Redis
    user = {k: v for k, v in env.items() if k != "SRCRAWL_REDIS_URL"}
    user["SRCRAWL_HOME"] = str(tmp_path / "fresh-home")
    user["SRCRAWL_INDEX_DIR"] = str(tmp_path / "home" / "index" / env["SRCRAWL_JOB"])
    english, imported = run_probed(["search", "TESSERACT"], user)
    assert english.returncode == 0, english.stderr
    assert english.stdout.startswith(" 1. planted\n    http://127.0.0.1:9/planted\n")
    assert imported == {"numpy", "srcrawl.indexer.commands"}
    chinese, imported = run_probed(["search", "量子纠缠", "--json"], user)
    assert chinese.returncode == 0, chinese.stderr
    assert json.loads(chinese.stdout)[0]["url"] == "http://127.0.0.1:9/planted"
    assert imported == {"rjieba", "numpy", "srcrawl.indexer.commands"}
    assert not (tmp_path / "fresh-home" / "redis.url").exists()


def test_a_terminal_sees_the_terms_in_bold_and_a_pipe_between_marks(python, env) -> None:
    assert cli(python, env, "index", "--slaves", "1").returncode == 0
    env = {k: v for k, v in env.items() if k != "NO_COLOR"}
    bold = _on_terminal([python, "-m", "srcrawl.app.cli", "search", "TESSERACT", "--top", "1"], env)
    assert "\x1b[1mtesseract\x1b[22m" in bold and "«" not in bold
    plain = _on_terminal(
        [python, "-m", "srcrawl.app.cli", "search", "TESSERACT", "--top", "1"],
        {**env, "NO_COLOR": "1"},
    )
    assert "«tesseract»" in plain and "\x1b[" not in plain
    piped = cli(python, env, "search", "TESSERACT", "--top", "1")
    assert "«tesseract»" in piped.stdout and "\x1b[" not in piped.stdout


def _on_terminal(args: list[str], env: dict) -> str:
    """What ``args`` prints when its output is a terminal (a pseudo-terminal here; the
    output must fit in its buffer: the process is read once it has ended)."""
    import pty

    main, sub = pty.openpty()
    try:
        done = subprocess.run(args, env=env, stdout=sub, stderr=subprocess.PIPE, timeout=300)
    finally:
        os.close(sub)
    assert done.returncode == 0, done.stderr
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other end is closed and nothing is left
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return b"".join(chunks).decode()
