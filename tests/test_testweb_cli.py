"""``srcrawl testweb serve`` and ``graph``, run as a user runs them."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from srcrawl.testweb import canonical, generate, read_access_log


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", "testweb", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def free_port_base(n: int) -> int:
    """A base such that base … base+n-1 are free now (below the ephemeral range)."""
    rng = random.Random()
    while True:
        base = rng.randrange(20000, 30000)
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()


@pytest.mark.slow
def test_graph_prints_the_model_edges(tmp_path: Path) -> None:
    r = run(
        [
            "graph",
            "--hosts",
            "4",
            "--pages",
            "10",
            "--seed",
            "3",
            "--port-base",
            "20000",
            "--trap-steps",
            "2",
        ]
    )
    assert r.returncode == 0, r.stderr
    rows = [tuple(line.split("\t")) for line in r.stdout.splitlines()]
    web = generate(4, 10, 3, port_base=20000)
    assert set(rows) == {(s, t) for s, t, _ in web.edges(trap_steps=2)}
    assert len(rows) == len(set(rows))
    assert all(canonical(u) == u for row in rows for u in row)
    attrs = run(
        [
            "graph",
            "--hosts",
            "4",
            "--pages",
            "10",
            "--seed",
            "3",
            "--port-base",
            "20000",
            "--trap-steps",
            "0",
            "--attrs",
        ]
    )
    with_attrs = {tuple(line.split("\t")) for line in attrs.stdout.splitlines()}
    s = web.special
    assert (s["nofollow_rel"], s["nofollow_rel_target"], "a", "nofollow") in with_attrs
    assert (s["nofollow_meta"], s["nofollow_meta_target"], "a", "nofollow") in with_attrs
    assert (s["redirect_301"], s["redirect_301_target"], "redirect", "-") in with_attrs
    assert (s["frameset"], s["frame_left"], "frame", "-") in with_attrs


def test_serve_prints_the_seeds_serves_the_graph_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    base = free_port_base(2)
    log = tmp_path / "access.jsonl"
    options = ["--hosts", "2", "--pages", "8", "--seed", "4", "--port-base", str(base)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "testweb",
            "serve",
            *options,
            "--access-log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        seeds = [proc.stdout.readline().strip() for _ in range(2)]
        assert seeds == [f"http://127.0.0.1:{base}/", f"http://127.0.0.1:{base + 1}/"]
        edges = [line.split("\t") for line in run(["graph", *options]).stdout.splitlines()]
        for seed in seeds:
            body = requests.get(seed, timeout=10).text
            targets = [t for s, t in edges if s == seed]
            assert targets
            page = generate(2, 8, 4, port_base=base).pages[seed]
            for link in page.links:
                assert f'href="{link.href}"' in body.replace("&amp;", "&")
            assert {ln.target for ln in page.links} == set(targets)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert [e["path"] for e in read_access_log(log)] == ["/", "/"]


def test_serve_on_a_taken_port_is_one_line_and_exit_2() -> None:
    base = free_port_base(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        r = run(["serve", "--hosts", "2", "--pages", "3", "--port-base", str(base)])
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "cannot listen on 127.0.0.1" in r.stderr, r.stderr
    assert r.stdout == ""


@pytest.mark.slow
def test_bad_options_are_usage_errors() -> None:
    r = run(["graph", "--hosts", "0"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = run(
        ["serve", "--access-log", "/nonexistent-dir/x.jsonl", "--port-base", str(free_port_base(4))]
    )
    assert r.returncode == 2 and "cannot write the access log" in r.stderr, r.stderr
