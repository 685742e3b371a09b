"""The command line, run as a user runs it: real processes, real exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import redis
from click_parse import parse_command
from import_probe import run_probed

from srcrawl import __version__
from srcrawl.core.defaults import DEFAULT_FETCH_THREADS
from srcrawl.core.keys import Keys
from srcrawl.queues.protocol import PhaseQueues
from srcrawl.queues.workers import Worker


def run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, **kw
) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def test_version(tmp_path) -> None:
    r = run(["--version"], tmp_path)
    assert r.returncode == 0 and __version__ in r.stdout


def test_version_and_help_import_no_heavy_library(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    version, imported = run_probed(["--version"], env, cwd=str(tmp_path))
    assert version.returncode == 0 and __version__ in version.stdout
    assert imported == set()  # not even a command module
    help_, imported = run_probed(["--help"], env, cwd=str(tmp_path))
    assert help_.returncode == 0
    assert not imported & {"jieba", "rjieba", "numpy", "pymysql", "lxml", "bs4", "pycurl", "scipy"}


def test_every_lazily_registered_command_is_listed_and_found() -> None:
    from srcrawl.app.cli import LAZY_COMMANDS, LAZY_EXPORTS, cli

    ctx = click.Context(cli)
    eager = {"db", "demo", "down", "export", "health", "serve", "slave", "status"}
    assert set(LAZY_COMMANDS) | eager == set(cli.list_commands(ctx))
    for name in LAZY_COMMANDS:
        assert cli.get_command(ctx, name).name == name
    export = cli.get_command(ctx, "export")
    assert export.list_commands(ctx) == sorted(LAZY_EXPORTS)
    for name in LAZY_EXPORTS:
        assert export.get_command(ctx, name).name == name
    assert cli.get_command(ctx, "nonesuch") is None


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SRCRAWL_REDIS_URL": "redis://127.0.0.1:1"}, "cannot reach Redis"),
        ({"SRCRAWL_REDIS_URL": "redis//nope"}, "SRCRAWL_REDIS_URL is malformed"),
        ({"SRCRAWL_DB_URL": "sqlite:/x"}, "SRCRAWL_DB_URL is malformed"),
        pytest.param(
            {"SRCRAWL_DB_URL": "mysql://root@127.0.0.1:1/x"},
            "cannot connect to MySQL",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(tmp_path, redis_url, env, needle) -> None:
    env = {"SRCRAWL_REDIS_URL": redis_url, **env}
    r = run(["status"], tmp_path, env)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_sqlite_path_in_a_missing_directory_is_refused_not_created(tmp_path, redis_url) -> None:
    named = tmp_path / "nonexistent" / "dir" / "x.db"
    for how in ({"SRCRAWL_DB_URL": f"sqlite:///{named}"}, {}):
        args = ["status"] if how else ["--db-url", f"sqlite:///{named}", "status"]
        r = run(args, tmp_path, {"SRCRAWL_REDIS_URL": redis_url, **how})
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "does not exist" in r.stderr and str(named.parent) in r.stderr
        assert not (tmp_path / "nonexistent").exists()
    # a named file in a directory that exists is created
    r = run(
        ["status"], tmp_path, {"SRCRAWL_REDIS_URL": redis_url, "SRCRAWL_DB_URL": "sqlite:///x.db"}
    )
    assert r.returncode == 0 and (tmp_path / "x.db").is_file(), r.stderr


@pytest.mark.slow
def test_the_default_store_is_created_under_a_new_home(tmp_path, redis_url) -> None:
    home = tmp_path / "new" / "home"
    r = run(["status"], tmp_path, {"SRCRAWL_REDIS_URL": redis_url, "SRCRAWL_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert (home / "srcrawl.db").is_file()


@pytest.mark.slow
def test_db_init_and_status_json(tmp_path, redis_url) -> None:
    env = {"SRCRAWL_REDIS_URL": redis_url, "SRCRAWL_JOB": "clijob"}
    assert run(["db", "init"], tmp_path, env).returncode == 0
    assert run(["db", "init"], tmp_path, env).returncode == 0  # idempotent
    client = redis.Redis.from_url(redis_url)
    keys = Keys("clijob")
    q = PhaseQueues(client, keys, "index")
    q.srq.push([b"a", b"b", b"c"])
    q.srq.pop("slave-1", 1)
    Worker(client, keys, "slave-1", [q.srq]).beat({"pages": 9})
    client.hincrby(keys.stats("index"), "docs", 5)
    r = run(["status", "--json"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert snap["phases"]["index"] == {"srq": 2, "nrq": 0, "in_flight": 1, "counters": {"docs": 5}}
    assert snap["phases"]["crawl"]["srq"] == 0
    [w] = snap["workers"]
    assert w["id"] == "slave-1" and w["alive"] and w["stats"]["pages"] == 9
    assert snap["store"]["pages"] == 0
    # the file and its log while open; on close the log is moved into the file
    assert 0 < (tmp_path / ".srcrawl" / "srcrawl.db").stat().st_size <= snap["store"]["size_bytes"]
    text = run(["status"], tmp_path, env).stdout
    assert "slave-1" in text and "docs=5" in text
    assert re.search(r"^store: sqlite:///\S+  pages 0  links 0  size \d+ KB$", text, re.M), text


@pytest.mark.slow
def test_embedded_redis_is_started_reused_and_stopped(tmp_path) -> None:
    r = run(["status", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    url = (tmp_path / ".srcrawl" / "redis.url").read_text().strip()
    client = redis.Redis.from_url(url)
    client.rpush(Keys("default").srq("crawl"), b"survivor")
    # a second command reuses the same server
    snap = json.loads(run(["status", "--json"], tmp_path).stdout)
    assert snap["phases"]["crawl"]["srq"] == 1
    assert (tmp_path / ".srcrawl" / "redis.url").read_text().strip() == url
    down = run(["down"], tmp_path)
    assert down.returncode == 0 and "stopped" in down.stdout
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert "no embedded Redis" in run(["down"], tmp_path).stdout
    # state survives `down` + a new command
    snap = json.loads(run(["status", "--json"], tmp_path).stdout)
    assert snap["phases"]["crawl"]["srq"] == 1
    assert (tmp_path / ".srcrawl" / "srcrawl.db").exists()
    assert run(["down"], tmp_path).returncode == 0


@pytest.mark.slow
def test_down_refuses_an_external_redis(tmp_path, redis_url) -> None:
    r = run(["down"], tmp_path, {"SRCRAWL_REDIS_URL": redis_url})
    assert r.returncode == 2 and "only stops the embedded Redis" in r.stderr


@pytest.mark.slow
def test_bench_queue_prints_messages_per_second(tmp_path, redis_url) -> None:
    r = run(
        ["bench", "queue", "--messages", "5000", "--batch", "500"],
        tmp_path,
        {"SRCRAWL_REDIS_URL": redis_url},
    )
    assert r.returncode == 0, r.stderr
    assert "msg/s" in r.stdout and "Redis CPU time" in r.stdout
    assert redis.Redis.from_url(redis_url).keys("srcrawl:{bench-queue*") == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", ["javascript:alert(1)", "http://[::1/", "not a url", "ftp://x/"])
def test_an_invalid_seed_is_one_line_and_exit_2(tmp_path, redis_url, seed) -> None:
    r = run(["crawl", seed, "--slaves", "1"], tmp_path, {"SRCRAWL_REDIS_URL": redis_url})
    assert r.returncode == 2
    assert r.stderr.startswith("srcrawl: invalid seed") and r.stderr.count("\n") == 1
    r = run(["seed", seed], tmp_path, {"SRCRAWL_REDIS_URL": redis_url})
    assert r.returncode == 2 and "invalid seed" in r.stderr


@pytest.mark.parametrize("seed", ["127.0.0.1:8000/index.html", "localhost:8000", "example.org/a"])
def test_a_seed_without_a_scheme_is_shown_with_one(tmp_path, redis_url, seed) -> None:
    r = run(["crawl", seed, "--slaves", "1"], tmp_path, {"SRCRAWL_REDIS_URL": redis_url})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "has no scheme" in r.stderr and f"'http://{seed}" in r.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["crawl", "http://127.0.0.1:1/", "--threads", "0"], "--threads"),
        (["slave", "start", "--threads", "0"], "--threads"),
        (["crawl", "http://127.0.0.1:1/", "--fetches", "0"], "--fetches"),
        (["slave", "start", "--fetches", "0"], "--fetches"),
        (["bench", "crawl", "--threads", "0"], "--threads"),
        (["slave", "start", "--heartbeat-ttl", "0"], "--heartbeat-ttl"),
        (["crawl", "http://127.0.0.1:1/", "--max-pages-per-host", "-1"], "--max-pages-per-host"),
        (["master", "start", "--max-pages-per-host", "-5"], "--max-pages-per-host"),
        (["demo", "--slaves", "0"], "--slaves"),
        (["bench", "queue", "--batch", "0"], "--batch"),
        (["pagerank", "--damping", "1.5"], "--damping"),
    ],
)
def test_a_nonsense_count_is_refused_with_one_line(tmp_path, redis_url, args, option) -> None:
    r = run(args, tmp_path, {"SRCRAWL_REDIS_URL": redis_url}, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("srcrawl: ") and option in r.stderr


def parsed_params(args: list[str]) -> dict:
    """The parameters ``srcrawl ARGS`` would call its command with (nothing runs)."""
    return parse_command(args)[1].params


FETCHES_COMMANDS = [
    (["crawl", "http://127.0.0.1:1/"], DEFAULT_FETCH_THREADS),
    (["slave", "start"], DEFAULT_FETCH_THREADS),
    (["bench", "crawl"], 4),
]


@pytest.mark.parametrize(("command", "default"), FETCHES_COMMANDS)
def test_fetches_in_flight_is_also_given_by_its_old_name_threads(command, default) -> None:
    assert parsed_params(command)["fetches"] == default
    assert parsed_params([*command, "--fetches", "7"])["fetches"] == 7
    assert parsed_params([*command, "--threads", "9"])["fetches"] == 9
    assert "threads" not in parsed_params([*command, "--threads", "9"])
    # both given: the new name wins, in either order
    assert parsed_params([*command, "--threads", "9", "--fetches", "7"])["fetches"] == 7
    assert parsed_params([*command, "--fetches", "7", "--threads", "9"])["fetches"] == 7


@pytest.mark.parametrize(("command", "default"), FETCHES_COMMANDS)
def test_the_help_names_fetches_in_flight_not_threads(tmp_path, command, default) -> None:
    r = run([*command[:2], "--help"], tmp_path)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())  # the help wraps its lines
    assert "--fetches" in text and "in flight" in text and f"[default: {default};" in text
    assert "--threads" not in text


def test_resume_without_a_crawl_is_refused(tmp_path, redis_url) -> None:
    r = run(
        ["crawl", "--resume"], tmp_path, {"SRCRAWL_REDIS_URL": redis_url, "SRCRAWL_JOB": "nojob"}
    )
    assert r.returncode == 2 and "no crawl to resume" in r.stderr
