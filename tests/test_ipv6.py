"""IPv6: the test web served on ::1, crawled whole; IPv6 hosts in URLs, scope and the policy."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from srcrawl.core.urls import canonicalize, host_of, origin
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope
from srcrawl.slave.fetch import ERROR_ADDRESS_REFUSED, Fetcher
from srcrawl.slave.fetch_policy import FetchPolicy
from srcrawl.testweb import TestWeb


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")

DEPTH = 3
POLITE = [
    "--delay",
    "0.02",
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    "1",
    "--robots-defer",
    "0.3",
    "--threads",
    "4",
]


def test_ipv6_hosts_are_canonical_and_in_scope() -> None:
    url = canonicalize("HTTP://[0:0:0:0:0:0:0:1]:8080/a/../b#x")
    assert url == "http://[::1]:8080/b"
    assert origin(url) == "http://[::1]:8080" and host_of(url) == "[::1]:8080"
    assert canonicalize("http://[::1]:80/") == "http://[::1]/"
    scope = Scope(CrawlStrategy(seed_hosts=("[::1]:8080",)))
    assert scope.reject(url, 0) is None
    assert scope.reject("http://[::1]:8081/", 0) == "out_of_scope"
    assert scope.reject("http://[::2]:8080/", 0) == "out_of_scope"
    policy = FetchPolicy(seed_origins=["http://[::1]:8080"])
    assert policy.seed_host(url) == "[::1]"
    assert policy.refuse_address("::1", "[::1]") is None
    assert policy.refuse_address("::1") is not None  # not the seed's origin: needs the opt-in


def test_a_name_that_resolves_to_ipv6_only_is_fetched_and_checked() -> None:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"six!")

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6
        daemon_threads = True

    httpd = Server(("::1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    pin = [f"six.test:{port}:[::1]"]  # the name's only address is IPv6
    f = Fetcher(connect_timeout=2, read_timeout=2, policy=FetchPolicy(resolve=pin))
    try:
        assert f.fetch(f"http://six.test:{port}/").error == ERROR_ADDRESS_REFUSED
        f.policy = FetchPolicy(resolve=pin, networks=["::1/128"])
        r = f.fetch(f"http://six.test:{port}/")
        assert (r.status, r.body) == (200, b"six!")
    finally:
        f.close()
        httpd.shutdown()
        httpd.server_close()


def test_testweb_serve_binds_ipv6(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "srcrawl.app.cli",
            "testweb",
            "serve",
            "--bind",
            "::1",
            "--hosts",
            "2",
            "--pages",
            "3",
            "--port-base",
            str(_free_ipv6_port()),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seeds = [proc.stdout.readline().strip() for _ in range(2)]
        assert all(s.startswith("http://[::1]:") for s in seeds), seeds
        f = Fetcher(connect_timeout=2, read_timeout=2)
        try:
            r = f.fetch(seeds[0])
            assert r.status == 200 and b"http://[::1]:" in r.body
        finally:
            f.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _free_ipv6_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_crawl_of_the_test_web_on_ipv6_stores_exactly_the_reachable_set(
    redis_url: str, keys, tmp_path: Path
) -> None:
    with TestWeb.generate(
        hosts=3, pages=15, seed=7, slow_seconds=3, crawl_delay=0.1, address="::1"
    ) as web:
        seeds = web.seed_urls
        assert all(s.startswith("http://[::1]:") for s in seeds)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
        env.update(
            SRCRAWL_REDIS_URL=redis_url,
            SRCRAWL_JOB=keys.job,
            SRCRAWL_HOME=str(tmp_path / "home"),
            SRCRAWL_DB_URL=f"sqlite:///{tmp_path}/crawl.db",
        )
        cli = [sys.executable, "-m", "srcrawl.app.cli"]
        # no opt-in: the seeds' own [::1] origins are what the user asked for
        r = subprocess.run(
            [*cli, "crawl", *seeds, "--depth", str(DEPTH), "--slaves", "2", *POLITE],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout).get("address_refused", 0) == 0
        out = subprocess.run([*cli, "export", "pages"], env=env, capture_output=True, text=True)
        pages = [json.loads(line) for line in out.stdout.splitlines()]
        scope = Scope(CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=DEPTH))
        want = web.web.expected_crawl(seeds, DEPTH, lambda url: scope.reject(url, 0) is None)
        assert {p["url"]: p["depth"] for p in pages} == want
        assert sum(p["status"] == 200 for p in pages) > len(want) // 2
        by_host = {host_of(p["url"]) for p in pages}
        assert by_host == {host_of(s) for s in seeds}  # one politeness queue per [::1]:port
