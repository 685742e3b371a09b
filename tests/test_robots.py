"""robots.txt: real HTTP servers on 127.0.0.1 and a real Redis shared by two slaves' caches."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from srcrawl.core.urls import fingerprint, host_of
from srcrawl.queues.crawl_protocol import fetch_task
from srcrawl.queues.crawl_strategy import CrawlStrategy, publish
from srcrawl.queues.envelope import Message, decode
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.slave.crawl import CrawlHandler
from srcrawl.slave.fetch import Fetcher
from srcrawl.slave.robots import RobotsCache

UA = "srcrawl-test/1.0 (+loopback)"
ROBOTS = b"""# test rules
User-agent: *
Disallow: /private
Crawl-delay: 7

User-agent: srcrawl-test
Disallow: /no-srcrawl
Allow: /no-srcrawl/but-this
Crawl-delay: 2.5
"""

Route = Callable[[BaseHTTPRequestHandler], tuple[int, bytes, dict[str, str]]]


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


class Web:
    """HTTP servers on 127.0.0.1, one origin per robots.txt behaviour."""

    def __init__(self) -> None:
        self.hits: Counter[tuple[str, str]] = Counter()
        self.servers: list[Server] = []

    def origin(self, routes: dict[str, Route]) -> str:
        hits = self.hits
        holder: dict[str, str] = {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hits[(holder["origin"], self.path)] += 1
                route = routes.get(self.path)
                status, body, headers = route(self) if route else (404, b"none", {})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        httpd = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        self.servers.append(httpd)
        holder["origin"] = f"http://127.0.0.1:{httpd.server_address[1]}"
        return holder["origin"]

    def robots_hits(self, origin: str) -> int:
        return self.hits[(origin, "/robots.txt")]

    def close(self) -> None:
        # side by side: each shutdown waits for its server's next poll (up to 0.5 s)
        stoppers = [threading.Thread(target=httpd.shutdown) for httpd in self.servers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        for httpd in self.servers:
            httpd.server_close()


def fixed(status: int, body: bytes = b"", **headers: str) -> Route:
    return lambda _handler: (status, body, {k.replace("_", "-"): v for k, v in headers.items()})


def redirect(location: str) -> Route:
    return fixed(302, b"", Location=location)


@pytest.fixture(scope="module")
def web() -> Iterator[Web]:
    w = Web()
    yield w
    w.close()


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(connect_timeout=1, read_timeout=0.5, max_bytes=2_000_000, user_agent=UA)
    yield f
    f.close()


@pytest.fixture
def make_cache(redis_client, keys, fetcher):
    def make(**kwargs) -> RobotsCache:
        return RobotsCache(redis_client, keys, fetcher, kwargs.pop("ttl", 60), UA, **kwargs)

    return make


def test_one_fetch_serves_every_slave(web: Web, make_cache, redis_client, keys) -> None:
    origin = web.origin({"/robots.txt": fixed(200, ROBOTS, Content_Type="text/plain")})
    slave_a, slave_b = make_cache(), make_cache()
    assert slave_a.lookup(origin) is None and slave_b.lookup(origin) is None
    rules, result = slave_a.fetch_and_store(origin)
    assert result.status == 200 and rules.source == "rules" and rules.deferred_until is None
    assert web.robots_hits(origin) == 1
    # Slave B reads what slave A stored: no request of its own.
    seen = slave_b.lookup(origin)
    assert seen is not None and seen.source == "rules"
    assert web.robots_hits(origin) == 1
    for r in (rules, seen):
        # The srcrawl-test group applies to us, not the * group.
        assert not r.allowed(f"{origin}/no-srcrawl/page")
        assert r.allowed(f"{origin}/no-srcrawl/but-this/page")
        assert r.allowed(f"{origin}/private/page")
        assert r.allowed(f"{origin}/robots.txt")
        assert r.crawl_delay == 2.5
    assert redis_client.get(keys.robots(origin)).startswith(b"R# test rules")


def test_other_agents_get_the_star_group(web: Web, redis_client, keys, fetcher) -> None:
    origin = web.origin({"/robots.txt": fixed(200, ROBOTS)})
    cache = RobotsCache(redis_client, keys, fetcher, 60, "OtherBot/2.0")
    rules, _ = cache.fetch_and_store(origin)
    assert not rules.allowed(f"{origin}/private/x") and rules.allowed(f"{origin}/no-srcrawl")
    assert rules.crawl_delay == 7.0


def test_the_ttl_is_honoured(web: Web, make_cache, redis_client, keys) -> None:
    origin = web.origin({"/robots.txt": fixed(200, ROBOTS)})
    cache = make_cache(ttl=0.4)
    cache.fetch_and_store(origin)
    assert 0 < redis_client.pttl(keys.robots(origin)) <= 400
    assert cache.lookup(origin) is not None
    time.sleep(0.6)
    assert cache.lookup(origin) is None
    cache.fetch_and_store(origin)
    assert web.robots_hits(origin) == 2


@pytest.mark.slow
def test_rules_read_once_are_kept_for_local_ttl(web: Web, make_cache, redis_client, keys) -> None:
    origin = web.origin({"/robots.txt": fixed(200, ROBOTS)})
    make_cache().fetch_and_store(origin)
    keeper, reader = make_cache(local_ttl=0.5), make_cache(local_ttl=0)
    assert keeper.lookup(origin).source == "rules" and reader.lookup(origin).source == "rules"
    redis_client.delete(keys.robots(origin))
    # the keeper answers from its copy without Redis; the other one sees the change
    assert keeper.lookup(origin).source == "rules" and reader.lookup(origin) is None
    time.sleep(0.6)
    assert keeper.lookup(origin) is None
    # a copy never outlives the shared key
    make_cache(ttl=0.3).fetch_and_store(origin)
    assert keeper.lookup(origin).source == "rules"
    time.sleep(0.4)
    assert keeper.lookup(origin) is None


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_4xx_allows_everything(web: Web, make_cache, redis_client, keys, status: int) -> None:
    origin = web.origin({"/robots.txt": fixed(status, b"Disallow: /")})
    rules, result = make_cache(ttl=30).fetch_and_store(origin)
    assert result.status == status and rules.source == "allow"
    assert rules.allowed(f"{origin}/anything") and rules.crawl_delay is None
    shared = make_cache().lookup(origin)
    assert shared is not None and shared.source == "allow" and shared.allowed(f"{origin}/x")
    assert 25_000 < redis_client.pttl(keys.robots(origin)) <= 30_000


@pytest.mark.parametrize(
    "status",
    # one status in the fast tier: each case waits out its deferral
    [
        500,
        pytest.param(502, marks=pytest.mark.slow),
        pytest.param(503, marks=pytest.mark.slow),
        pytest.param(429, marks=pytest.mark.slow),
    ],
)
def test_5xx_and_429_defer_the_host(web: Web, make_cache, redis_client, keys, status: int) -> None:
    origin = web.origin({"/robots.txt": fixed(status, b"busy")})
    t0 = time.time()
    rules, result = make_cache(defer=0.5).fetch_and_store(origin)
    assert result.status == status and rules.source == "defer"
    assert t0 + 0.5 <= rules.deferred_until <= time.time() + 0.5
    assert not rules.allowed(f"{origin}/")
    shared = make_cache().lookup(origin)
    assert shared is not None and shared.deferred_until == pytest.approx(rules.deferred_until)
    assert not shared.allowed(f"{origin}/page")
    assert 0 < redis_client.pttl(keys.robots(origin)) <= 500
    time.sleep(0.7)
    assert make_cache().lookup(origin) is None  # deferral over: fetch again


def test_a_deferral_whose_time_has_come_is_a_miss_while_its_key_lives(
    make_cache, redis_client, keys
) -> None:
    """The key outlives the deferral by a moment; a task sent back at its end fetches."""
    origin = "http://127.0.0.1:9"
    cache = make_cache(defer=0.3)
    ended = time.time() - 0.01
    redis_client.set(keys.robots(origin), b"D" + repr(ended).encode(), px=5000)
    assert cache.lookup(origin) is None
    assert cache.lookup(origin) is None  # the process's own copy too
    pending = time.time() + 5
    redis_client.set(keys.robots(origin), b"D" + repr(pending).encode(), px=5000)
    assert make_cache(defer=0.3).lookup(origin).deferred_until == pytest.approx(pending)


def test_a_dead_host_is_deferred(make_cache) -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    rules, result = make_cache(defer=5).fetch_and_store(origin)
    assert result.error == "connect" and rules.source == "defer"
    assert rules.deferred_until == pytest.approx(time.time() + 5, abs=1)


def test_a_timeout_defers(web: Web, make_cache) -> None:
    def slow(_handler):
        time.sleep(1.0)
        return 200, ROBOTS, {}

    origin = web.origin({"/robots.txt": slow})
    rules, result = make_cache().fetch_and_store(origin)
    assert result.error == "timeout" and rules.source == "defer"


def test_redirects_are_followed(web: Web, make_cache) -> None:
    target = web.origin({"/real-robots.txt": fixed(200, b"User-agent: *\nDisallow: /moved\n")})
    origin = web.origin(
        {
            "/robots.txt": redirect("/r1"),
            "/r1": redirect("/r2"),
            "/r2": redirect(f"{target}/real-robots.txt"),
        }
    )
    rules, result = make_cache().fetch_and_store(origin)
    assert result.status == 200 and result.url == f"{target}/real-robots.txt"
    assert rules.source == "rules" and rules.origin == origin
    assert not rules.allowed(f"{origin}/moved/x") and rules.allowed(f"{origin}/other")
    assert make_cache().lookup(origin).source == "rules"


def test_too_many_redirects_mean_no_robots_txt(web: Web, make_cache) -> None:
    routes: dict = {"/robots.txt": redirect("/r1")}
    for i in range(1, 10):
        routes[f"/r{i}"] = redirect(f"/r{i + 1}")
    origin = web.origin(routes)
    rules, result = make_cache().fetch_and_store(origin)
    assert result.status == 302 and rules.source == "allow"
    assert web.hits[(origin, "/r5")] == 1 and web.hits[(origin, "/r6")] == 0  # 5 hops


def test_a_redirect_to_another_scheme_is_not_followed(web: Web, make_cache) -> None:
    origin = web.origin({"/robots.txt": redirect("ftp://127.0.0.1/robots.txt")})
    rules, result = make_cache().fetch_and_store(origin)
    assert result.error == "bad_redirect" and rules.source == "allow"


def test_a_huge_robots_txt_is_cut(web: Web, make_cache, redis_client, keys) -> None:
    body = b"User-agent: *\nDisallow: /early\n" + b"# filler\n" * 200_000 + b"Disallow: /late\n"
    origin = web.origin({"/robots.txt": fixed(200, body)})
    rules, _ = make_cache(max_bytes=100_000).fetch_and_store(origin)
    assert not rules.allowed(f"{origin}/early") and rules.allowed(f"{origin}/late")
    assert len(redis_client.get(keys.robots(origin))) == 100_001


def test_an_empty_or_garbage_robots_txt_allows(web: Web, make_cache) -> None:
    origin = web.origin({"/robots.txt": fixed(200, b"\x00\xff<html>not robots</html>")})
    rules, _ = make_cache().fetch_and_store(origin)
    assert rules.source == "rules" and rules.allowed(f"{origin}/x")


def test_parsed_rules_are_memoised_by_body(web: Web, make_cache) -> None:
    a = web.origin({"/robots.txt": fixed(200, ROBOTS)})
    b = web.origin({"/robots.txt": fixed(200, ROBOTS)})  # same body, other origin
    writer, reader = make_cache(), make_cache()
    writer.fetch_and_store(a)
    writer.fetch_and_store(b)
    for _ in range(50):
        assert not reader.lookup(a).allowed(f"{a}/no-srcrawl")
        assert not reader.lookup(b).allowed(f"{b}/no-srcrawl")
    assert reader.parses == 1 and writer.parses == 1


def test_a_foreign_value_is_a_miss(make_cache, redis_client, keys) -> None:
    redis_client.set(keys.robots("http://127.0.0.1:1"), b"Dnot-a-time")
    redis_client.set(keys.robots("http://127.0.0.1:2"), b"?what")
    cache = make_cache()
    assert cache.lookup("http://127.0.0.1:1") is None and cache.lookup("http://127.0.0.1:2") is None


@pytest.mark.slow
def test_the_crawl_handler_fetches_robots_txt_on_its_multi_handle(
    web: Web, redis_url: str, keys, tmp_path
) -> None:
    # the crawl's driver thread fetches robots.txt like any page, redirects
    # included; the task's outcome says what became of the host
    page = b"<html><title>p</title><a href='/x'>x</a></html>"
    rules = fixed(200, b"User-agent: *\nDisallow: /private\n")
    target = web.origin(
        {
            "/robots.txt": rules,
            "/real-robots.txt": rules,
            "/page": fixed(200, page, Content_Type="text/html"),
        }
    )
    moved = web.origin({"/robots.txt": redirect(target + "/real-robots.txt")})
    down = web.origin({"/robots.txt": fixed(503)})
    db = DatabaseURL(kind="sqlite", path=str(tmp_path / "s.db"))
    cfg = Config(redis_url=redis_url, db=db, job=keys.job, home=tmp_path)
    cfg.store().init_schema()
    seeds = (target, moved, down)  # in scope, and their own loopback origins are allowed
    publish(
        cfg.redis(),
        cfg.keys,
        CrawlStrategy(seed_hosts=tuple(host_of(o + "/") for o in seeds), seed_origins=seeds),
    )
    handler = CrawlHandler.from_config(cfg, threads=4)

    def task(url: str, fp: int) -> bytes:
        return fetch_task(url, fp, 1, "q").encode()

    def drain() -> dict[bytes, Message]:
        out: dict[bytes, Message] = {}
        deadline = time.monotonic() + 10
        while handler.in_flight() and time.monotonic() < deadline:
            out.update((raw, decode(result)) for raw, result in handler.poll(0.2, -1))
        assert handler.in_flight() == 0
        return out

    try:
        first = {
            "moved": task(moved + "/page", 1),
            "down": task(down + "/page", 2),
            "target": task(target + "/page", 3),
        }
        assert all(handler.start(t) is None for t in first.values())
        outcomes = drain()
        assert {name: outcomes[t].kind for name, t in first.items()} == {
            "moved": "robots",
            "down": "deferred",
            "target": "robots",
        }
        # the rules are cached now: a disallowed page ends at start, an allowed one is fetched
        assert decode(handler.start(task(target + "/private/a", 4))).kind == "disallowed"
        assert decode(handler.start(task(moved + "/private/b", 5))).kind == "disallowed"
        assert handler.start(first["target"]) is None
        [fetched] = drain().values()
        assert fetched.kind == "fetched" and fetched.get("status") == 200
        assert fetched.get("links") == [[target + "/x", fingerprint(target + "/x")]]
    finally:
        handler.close()
