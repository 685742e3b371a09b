"""`srcrawl seed` and the address policy: a seed the crawl may not reach is named and not
queued; one whose fetch was refused before is fetched once the user allows it.

Real servers on loopback, a real Redis, a real master and slave as `srcrawl master
start --keep-running` and `srcrawl slave start` run them.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from pathlib import Path

import pytest
import redis

from srcrawl.core.keys import Keys
from srcrawl.queues.crawl_protocol import ERROR_ADDRESS_REFUSED
from srcrawl.settings.config import Config
from srcrawl.slave.fetch_policy import is_public

from .conftest import cli_env, run_cli
from .test_fetch_policy import Route, page, serve
from .test_health import start, stop

pytestmark = pytest.mark.slow  # every test here runs for more than a second

QUICK = [
    "--delay",
    "0",
    "--delay-factor",
    "0",
    "--fetch-timeout",
    "2",
    "--robots-defer",
    "0.2",
    "--depth",
    "3",
]


def counted(body: bytes, hits: list[str], name: str) -> Route:
    def route() -> tuple[int, bytes, dict[str, str]]:
        hits.append(name)
        return page(body)()

    return route


def test_a_seed_on_a_refused_address_is_named_and_not_queued(redis_url, keys, tmp_path) -> None:
    # the machine's own name: not localhost, no IP literal, and (in /etc/hosts) a loopback
    # or private address, as a service name on a compose network is
    name = socket.gethostname()
    addresses = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    assert addresses and not any(is_public(ipaddress.ip_address(a)) for a in addresses), (
        f"this test needs the host name {name!r} to resolve to a non-public address"
    )
    env = cli_env(redis_url, keys.job, tmp_path)
    seed = f"http://{name}:18801/"
    r = run_cli(["seed", seed, "http://127.0.0.1:18801/"], env)
    assert r.returncode == 1, r.stderr
    assert f"seed {seed} refused" in r.stderr and "--allow-private" in r.stderr
    assert "1 seed(s) queued" in r.stdout  # the IP literal names its own origin: allowed
    nrq = redis.Redis.from_url(redis_url).lrange(Keys(keys.job).nrq("crawl"), 0, -1)
    assert len(nrq) == 1 and seed.encode() not in nrq[0] and b"127.0.0.1:18801" in nrq[0]

    r = run_cli(["seed", "--allow-private", seed], env)
    assert r.returncode == 0, r.stderr
    assert "1 seed(s) queued" in r.stdout and "refused" not in r.stderr


def test_a_seed_refused_by_a_fetch_is_crawled_once_allowed(redis_url, keys, tmp_path) -> None:
    hits: list[str] = []
    beside = serve({"/named": counted(b"<title>named</title><p>named</p>", hits, "named")})
    named = f"http://localhost:{beside.server_address[1]}/named"  # localhost, not a seed
    web = serve({"/": page(f"<a href='{named}'>named</a>".encode())})
    seed = f"http://127.0.0.1:{web.server_address[1]}/"
    env = cli_env(redis_url, keys.job, tmp_path)
    log = tmp_path / "crawl.log"
    master = start(
        ["master", "start", seed, *QUICK, "--allow-domain", "localhost", "--keep-running"], env, log
    )
    slave = start(["slave", "start", "--threads", "2"], env, log)
    cfg = Config.load(env=env)
    try:
        page_of = lambda: {p.url: p for p in cfg.store().iter_pages()}.get(named)  # noqa: E731
        wait_until(lambda: page_of() is not None, 60, log)
        assert page_of().error == ERROR_ADDRESS_REFUSED and hits == []

        r = run_cli(["seed", "--allow-private", named], env)
        assert r.returncode == 0, r.stderr
        assert "1 seed(s) queued" in r.stdout and "(1 fetched again)" in r.stdout
        wait_until(lambda: page_of().status == 200, 60, log)
        got = page_of()
        assert got.error is None and got.title == "named" and hits == ["named"]
        r = run_cli(["export", "pages"], env)
        urls = [json.loads(line)["url"] for line in r.stdout.splitlines()]
        assert sorted(urls) == sorted([seed, named])  # stored once each
    finally:
        stop(slave)
        stop(master)
        for httpd in (web, beside):
            httpd.shutdown()
            httpd.server_close()


def wait_until(check, timeout: float, log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
