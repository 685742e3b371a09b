"""The fetch policy: no request leaves the crawl's scope or reaches an address it may not.

Real servers on loopback, a real Redis, and `srcrawl crawl` as a user runs it.
Canary listeners count every connection they are offered: they must see none.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope
from srcrawl.slave.fetch import ERROR_ADDRESS_REFUSED, ERROR_OUT_OF_SCOPE, Fetcher
from srcrawl.slave.fetch_policy import FetchPolicy, is_public
from srcrawl.slave.robots import RobotsCache

from .conftest import cli_env as env_for
from .conftest import run_cli as srcrawl
from .conftest import stored_pages as stored

Route = Callable[[], tuple[int, bytes, dict[str, str]]]


class Canary:
    """A listener that records every connection (and the bytes sent on it); answers nothing."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((address, port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(0.5)
            try:
                self.seen.append(conn.recv(4096))
            except OSError:
                self.seen.append(b"")
            conn.close()

    def close(self) -> None:
        self.sock.close()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


def serve(routes: dict[str, Route], address: str = "127.0.0.1", port: int = 0) -> Server:
    """An HTTP server on ``address`` answering ``routes`` (404 elsewhere), one request a
    connection, so every request opens (and is checked on) a new connection."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            route = routes.get(self.path)
            status, body, headers = route() if route else (404, b"none", {})
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Bound(Server):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    httpd = Bound((address, port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def page(body: bytes) -> Route:
    return lambda: (200, body, {"Content-Type": "text/html"})


def redirect(location: str) -> Route:
    return lambda: (302, b"", {"Location": location})


@pytest.fixture
def canary() -> Iterator[Canary]:
    c = Canary()
    yield c
    c.close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for httpd in made:
        httpd.shutdown()
        httpd.server_close()


def origin(httpd: Server) -> str:
    host, port = httpd.server_address[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def fetcher_with(policy: FetchPolicy) -> Fetcher:
    return Fetcher(connect_timeout=2, read_timeout=2, policy=policy)


# -- which addresses are public (pure logic) ----------------------------------
@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd00::2",
        "ff02::1",
        "fec0::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
    ],
)
def test_non_public_addresses_are_refused_by_default(address: str) -> None:
    import ipaddress

    assert not is_public(ipaddress.ip_address(address))
    assert FetchPolicy().refuse_address(address) is not None
    assert FetchPolicy(allow_private=True).refuse_address(address) is None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert FetchPolicy().refuse_address(address) is None


def test_allowed_networks_and_bad_cidrs() -> None:
    policy = FetchPolicy(networks=["10.0.0.0/8", "fd00::/8"])
    assert policy.refuse_address("10.9.9.9") is None and policy.refuse_address("fd00::5") is None
    assert policy.refuse_address("192.168.0.1") is not None
    with pytest.raises(ValueError, match="no network"):
        FetchPolicy(networks=["10.0.0.0/33"])
    from srcrawl.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--allow-network"):
        CrawlStrategy(allow_networks=("not-a-net",))


# -- the fetcher obeys the policy on loopback ------------------------------------
def test_only_the_seeds_own_origin_is_allowed_without_the_opt_in(servers, canary) -> None:
    servers.append(serve({"/": page(b"<p>seed</p>")}))
    seed = origin(servers[0])
    policy = FetchPolicy(seed_origins=[seed])
    f = fetcher_with(policy)
    try:
        assert f.fetch(seed + "/").status == 200
        # another port of the same address, and localhost: the user named neither
        for url in (f"http://127.0.0.1:{canary.port}/", f"http://localhost:{canary.port}/"):
            r = f.fetch(url)
            assert r.error == ERROR_ADDRESS_REFUSED and r.status == 0, url
            assert "--allow-private" in r.detail
        assert canary.seen == []
        f.policy = FetchPolicy(seed_origins=[seed], networks=["127.0.0.0/8", "::1/128"])
        f.fetch(f"http://127.0.0.1:{canary.port}/")
        assert len(canary.seen) == 1 and canary.seen[0].startswith(b"GET / HTTP/1.1")
    finally:
        f.close()


def test_out_of_scope_urls_are_not_requested(servers, canary) -> None:
    servers.append(serve({"/": page(b"<p>seed</p>")}))
    seed = origin(servers[0])
    scope = Scope(CrawlStrategy(seed_hosts=(seed.split("//")[1],)))
    f = fetcher_with(FetchPolicy(scope, allow_private=True))
    try:
        assert f.fetch(seed + "/").status == 200
        r = f.fetch(f"http://127.0.0.1:{canary.port}/")
        assert r.error == ERROR_OUT_OF_SCOPE and "not in the crawl's scope" in r.detail
        assert canary.seen == []
    finally:
        f.close()


def test_a_name_is_checked_on_the_address_it_resolves_to(servers) -> None:
    # a name in scope (as --allow-domain puts it) that resolves to a loopback
    # address: the answer of the resolver is what is checked, not the name
    servers.append(serve({"/": page(b"<p>private</p>")}, "127.0.0.2"))
    port = servers[0].server_address[1]
    pin = [f"intranet.test:{port}:127.0.0.2"]
    url = f"http://intranet.test:{port}/"
    f = fetcher_with(FetchPolicy(resolve=pin))
    try:
        assert f.fetch(url).error == ERROR_ADDRESS_REFUSED
        f.policy = FetchPolicy(resolve=pin, networks=["127.0.0.2/32"])
        assert f.fetch(url).status == 200
    finally:
        f.close()


def test_a_name_rebound_to_a_refused_address_is_refused(servers) -> None:
    # first the name resolves to an allowed address; then (DNS rebinding) to a
    # refused one: the new connection is checked where it really goes
    servers.append(serve({"/": page(b"<p>ok</p>")}, "127.0.0.1"))
    port = servers[0].server_address[1]
    try:
        trap = Canary("127.0.0.3", port)
    except OSError:
        pytest.skip("127.0.0.3 is not usable here")
    url = f"http://rebind.test:{port}/"
    allowed = ["127.0.0.1/32"]
    f = fetcher_with(FetchPolicy(resolve=[f"rebind.test:{port}:127.0.0.1"], networks=allowed))
    try:
        assert f.fetch(url).status == 200
        f.policy = FetchPolicy(resolve=[f"rebind.test:{port}:127.0.0.3"], networks=allowed)
        r = f.fetch(url)
        assert r.error == ERROR_ADDRESS_REFUSED and "127.0.0.3" in r.detail
        assert trap.seen == []
    finally:
        f.close()
        trap.close()


def test_a_kept_alive_connection_is_checked_again_for_every_request(servers) -> None:
    # a connection opened while private addresses were allowed is not reused
    # once they are not (a new crawl strategy, say)
    class KeepAlive(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    httpd = Server(("127.0.0.1", 0), KeepAlive)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    servers.append(httpd)
    url = origin(httpd) + "/"
    f = fetcher_with(FetchPolicy(allow_private=True))
    try:
        assert f.fetch(url).status == 200
        f.policy = FetchPolicy()
        assert f.fetch(url).error == ERROR_ADDRESS_REFUSED
    finally:
        f.close()


# -- robots.txt redirects --------------------------------------------------------
def test_robots_redirects_to_other_ports_never_reach_them(
    servers, canary, redis_client, keys
) -> None:
    fake_redis = Canary()
    try:
        servers.append(
            serve(
                {
                    "/robots.txt": redirect("/hop"),
                    "/hop": redirect(f"http://127.0.0.1:{canary.port}/robots.txt"),
                }
            )
        )
        servers.append(
            serve(
                {
                    "/robots.txt": redirect(f"http://localhost:{fake_redis.port}/"),
                }
            )
        )
        hostile, other = (origin(s) for s in servers)
        scope = Scope(
            CrawlStrategy(
                seed_hosts=tuple(o.split("//")[1] for o in (hostile, other)),
                allow_domains=("localhost",),
            )
        )
        f = fetcher_with(FetchPolicy(scope, seed_origins=[hostile, other]))
        cache = RobotsCache(redis_client, keys, f, 60, defer=30)
        try:
            rules, result = cache.fetch_and_store(hostile)
            assert result.error == ERROR_OUT_OF_SCOPE and rules.source == "allow"
            rules, result = cache.fetch_and_store(other)  # in scope, on a refused address
            assert result.error == ERROR_ADDRESS_REFUSED and rules.source == "allow"
            # kept as long as a deferral, not a day: a wider policy soon asks again
            assert 0 < redis_client.pttl(keys.robots(other)) <= 30_000
        finally:
            f.close()
        assert canary.seen == [] and fake_redis.seen == []
    finally:
        fake_redis.close()


# -- whole crawls -------------------------------------------------------------------


# one slave, no politeness wait, short timeouts and deferrals
_QUICK_CRAWL = [
    *("--depth", "2", "--slaves", "1", "--delay", "0", "--delay-factor", "0"),
    *("--fetch-timeout", "2", "--robots-defer", "0.2"),
]


@pytest.mark.slow
def test_a_crawl_of_a_hostile_host_requests_nothing_but_the_seeds_origin(
    servers, canary, redis_url, keys, tmp_path
) -> None:
    fake_redis = Canary()
    try:
        servers.append(serve({"/": page(b"<p>beside</p>")}))  # a private host, not a seed
        beside = f"http://localhost:{servers[0].server_address[1]}/"
        servers.append(
            serve(
                {
                    "/robots.txt": redirect(f"http://localhost:{fake_redis.port}/robots.txt"),
                    "/": page(
                        f"<a href='/a'>a</a><a href='/go'>go</a><a href='{beside}'>b</a>".encode()
                    ),
                    "/a": page(b"<p>a</p>"),
                    "/go": redirect(f"http://127.0.0.1:{canary.port}/"),
                }
            )
        )
        seed = origin(servers[1]) + "/"
        env = env_for(redis_url, keys.job, tmp_path)
        r = srcrawl(["crawl", seed, *_QUICK_CRAWL], env, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        assert {p["url"]: p["status"] for p in stored(env)} == {
            seed: 200,
            seed + "a": 200,
            seed + "go": 302,
        }
        assert canary.seen == [] and fake_redis.seen == []

        # the scope widened to localhost: its address still needs the opt-in
        env = env_for(redis_url, keys.job + "-wide", tmp_path / "wide")
        r = srcrawl(["crawl", seed, *_QUICK_CRAWL, "--allow-domain", "localhost"], env, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout)["address_refused"] == 1
        pages = {p["url"]: p["status"] for p in stored(env)}
        assert pages[beside] == 0 and pages[seed + "a"] == 200
        assert canary.seen == [] and fake_redis.seen == []

        # with the opt-in, a host beside the seed (whose robots.txt is plain) is crawled
        servers.append(serve({"/": page(f"<a href='{beside}'>b</a>".encode())}))
        plain = origin(servers[2]) + "/"
        env = env_for(redis_url, keys.job + "-open", tmp_path / "open")
        r = srcrawl(
            ["crawl", plain, *_QUICK_CRAWL, "--allow-domain", "localhost", "--allow-private"],
            env,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert {p["url"]: p["status"] for p in stored(env)} == {plain: 200, beside: 200}
        assert canary.seen == [] and fake_redis.seen == []
    finally:
        fake_redis.close()


@pytest.mark.slow
def test_seed_records_the_opt_in_and_the_seeds_origins(redis_url, keys, tmp_path) -> None:
    env = env_for(redis_url, keys.job, tmp_path)
    r = srcrawl(["seed", "http://[::1]:8080/", "http://example.org/"], env)
    assert r.returncode == 0, r.stderr
    r = srcrawl(["seed", "--allow-network", "10.0.0.0/8", "--allow-private", "http://b.test/"], env)
    assert r.returncode == 0, r.stderr
    import redis

    from srcrawl.core.keys import Keys
    from srcrawl.queues.crawl_strategy import load

    s = load(redis.Redis.from_url(redis_url), Keys(keys.job))
    assert s.seed_origins == ("http://[::1]:8080", "http://example.org", "http://b.test")
    assert s.allow_private and s.allow_networks == ("10.0.0.0/8",)
    policy = FetchPolicy.of(s)
    assert policy.trusted == {"http://[::1]:8080"}  # a name is no address the user named
    bad = srcrawl(["seed", "--allow-network", "10.0.0.0/99", "http://c.test/"], env)
    assert bad.returncode == 2 and "--allow-network" in bad.stderr
