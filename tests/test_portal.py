"""`srcrawl serve`: the portal served by a real uvicorn server on a free loopback port,
used over HTTP and in a real headless browser (Debian's chromium, driven by Playwright).

One index for the module: the test web's pages, rendered and parsed as a crawl would
store them, plus a page with a hostile title, indexed by `srcrawl index`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from srcrawl.core.urls import fingerprint
from srcrawl.portal.schemas import API_VERSION
from srcrawl.portal.search_pool import MAX_QUERY_CHARS
from srcrawl.portal.server import (
    DEFAULT_SEARCH_THREADS,
    build_portal,
    default_threads,
    serving_in_thread,
)
from srcrawl.settings.config import Config
from srcrawl.slave.parse import parse_html
from srcrawl.sql.pages import Page
from srcrawl.testweb.content import render
from srcrawl.testweb.generator import generate

from .conftest import cli_env, run_cli

HOSTILE_TITLE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
HOSTILE_URL = "http://127.0.0.1:9/hostile"
HOSTILE_TERM = "zyxwvhostile"
SCHEME_URLS = ["javascript:window.__pwned=4", "data:text/html,<script>window.__pwned=5</script>"]
STEM_TERM = "zyxwvstem"
CHARS = "涮尥俅薹"  # four characters jieba leaves alone: each its own word


def _extra_pages() -> list[tuple[str, str, str]]:
    """(url, title, text) of the pages the tests of one behaviour each look for."""
    pages = [
        (
            "http://127.0.0.1:9/village",
            "Village notes",
            f"{STEM_TERM} Village elders met; villages",
        ),
        ("http://127.0.0.1:9/chars", "all four", f"{CHARS} 全在"),
    ]
    for c in CHARS[:2]:
        pages.append((f"http://127.0.0.1:9/char-{c}", f"one of them {c}", f"只有{c}一个"))
    return pages


def _store_test_web(cfg: Config) -> Counter:
    """The test web's indexable pages as a crawl stores them; the words' page counts."""
    web = generate(hosts=2, pages=30, seed=5)
    pages, words = [], Counter()
    for page in web.pages.values():
        if not page.indexable:
            continue
        parsed = parse_html(render(web, page).body.decode("utf-8", "replace"), page.url)
        words.update(set(re.findall(r"\b[a-z]{5,}\b", parsed.text.lower())))
        pages.append(
            Page(
                fp=fingerprint(page.url),
                url=page.url,
                host="127.0.0.1",
                status=200,
                fetched_at=1.0,
                title=parsed.title,
                text=parsed.text,
            )
        )
    pages.append(
        Page(
            fp=fingerprint(HOSTILE_URL),
            url=HOSTILE_URL,
            host="127.0.0.1:9",
            status=200,
            fetched_at=1.0,
            title=HOSTILE_TITLE,
            text=f"{HOSTILE_TERM} <b>bold</b> «not a mark» {HOSTILE_TERM}",
        )
    )
    for url, title, text in _extra_pages():
        pages.append(Page(fingerprint(url), url, "127.0.0.1:9", status=200, title=title, text=text))
    cfg.store().put_pages(pages)
    return words


@pytest.fixture(scope="module")
def indexed(redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    env = cli_env(redis_url, f"t-{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("portal"))
    cfg = Config.load(env=env)
    words = _store_test_web(cfg)
    run = run_cli(["index", "--slaves", "1", "--json"], env)
    assert run.returncode == 0, run.stderr[-2000:]
    common = [w for w, n in words.most_common() if 15 <= n <= 60]
    yield cfg, env, common[0]
    cfg.close()


@pytest.fixture(scope="module")
def portal_url(indexed):
    cfg, _env, _word = indexed
    with serving_in_thread(build_portal(cfg, threads=2, admin_token="")) as url:
        yield url


def _get(url: str, path: str, **params) -> requests.Response:
    return requests.get(url.rstrip("/") + path, params=params, timeout=30)


def test_a_snippet_is_escaped_but_for_the_marks_of_query_terms() -> None:
    from markupsafe import Markup

    from srcrawl.indexer.search.snippets import Snippet
    from srcrawl.portal.markup import marked

    text = "a <b> engine & <i> «other» ＥＮＧＩＮＥ"
    spans = [(6, 12), (15, 18), (27, 33)]
    out = marked(Snippet(text, tuple(spans)))
    assert [text[a:b] for a, b in spans] == ["engine", "<i>", "ＥＮＧＩＮＥ"]
    assert isinstance(out, Markup)  # Jinja2 shows it as it is
    assert str(out) == (
        "a &lt;b&gt; <mark>engine</mark> &amp; <mark>&lt;i&gt;</mark> «other» "
        "<mark>ＥＮＧＩＮＥ</mark>"
    )
    assert str(marked(Snippet("«x»"))) == "«x»"  # the page's own marks are only text


# -- the JSON API -----------------------------------------------------------------
@pytest.mark.slow
def test_api_search_pages_ranked_hits_with_totals(indexed, portal_url) -> None:
    _cfg, _env, word = indexed
    first = _get(portal_url, "/api/search", q=word, size=5).json()
    assert first["mode"] == "and" and first["matches"] >= 15 and first["pages"] >= 3
    assert len(first["hits"]) == 5 and first["elapsed_ms"] > 0
    assert set(first["hits"][0]) == {
        *("url", "title", "score", "snippet", "similar", "similar_urls"),
        *("host", "host_more", "stored"),
    }
    scores = [h["score"] for h in first["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert all(f"«{word}»" in h["snippet"].lower() for h in first["hits"])
    second = _get(portal_url, "/api/search", q=word, size=5, page=2).json()
    # the next five ranked pages: a near-identical one (a mirror's) folded into its twin
    assert second["page"] == 2 and len(second["hits"]) <= 5
    assert sum(1 + h["similar"] for h in second["hits"]) >= 5
    assert not {h["url"] for h in first["hits"]} & {h["url"] for h in second["hits"]}
    assert second["hits"][0]["score"] <= scores[-1]


def test_api_answers_like_srcrawl_search_json(indexed, portal_url) -> None:
    _cfg, env, word = indexed
    cli = run_cli(["search", word, "--top", "10", "--json"], env)
    assert cli.returncode == 0, cli.stderr
    api = _get(portal_url, "/api/search", q=word).json()
    # the portal's own: the host, what grouping passed over, the stored copy
    portal_only = [{k: h.pop(k) for k in ("host", "host_more", "stored")} for h in api["hits"]]
    assert all(p["stored"].startswith("/stored?url=http") for p in portal_only)
    # one host: grouped as ranked; a near-identical hit (the same title and text on a
    # mirror host) is folded into the first, whose similar pages it joins
    ranked = json.loads(cli.stdout)
    listed = {h["url"]: h for h in api["hits"]}
    for hit in ranked:
        if hit["url"] in listed:
            shown = listed[hit["url"]]
            assert {k: v for k, v in shown.items() if k not in ("similar", "similar_urls")} == {
                k: v for k, v in hit.items() if k not in ("similar", "similar_urls")
            }
            assert shown["similar"] >= hit["similar"]
        else:
            into = [h for h in api["hits"] if hit["url"] in h["similar_urls"]]
            assert len(into) == 1 and into[0]["title"] == hit["title"]
    assert [h["url"] for h in api["hits"]] == [h["url"] for h in ranked if h["url"] in listed]


def test_unusable_queries_get_400_and_never_500(portal_url) -> None:
    for q, message in [
        ("", "empty query"),
        ("   ", "empty query"),
        ("the of 的", "no searchable"),
    ]:
        r = _get(portal_url, "/api/search", q=q)
        assert r.status_code == 400 and message in r.json()["error"], (q, r.text)
    assert _get(portal_url, "/api/search", q="engine", page=1000).status_code == 400
    assert _get(portal_url, "/api/search", q="engine", size=0).status_code == 422
    assert _get(portal_url, "/api/search").status_code == 422
    odd = [
        "%",
        "'; DROP TABLE pages; --",
        "\x00",
        "🦀🦀",
        "a" * 40 + " b",
        "北京 " * 60,
        "«»",
        "<script>",
        "\\u0000",
        "NOT AND OR",
        "-",
        "中文" * 100,
    ]
    for q in odd:
        for path in ("/api/search", "/"):
            r = _get(portal_url, path, q=q, page="2")
            assert r.status_code in (200, 400), (path, q, r.status_code, r.text[:300])


def test_the_hot_path_answers_as_fastapi_s_routes(indexed, portal_url) -> None:
    """A plain GET is answered ahead of FastAPI; a repeated parameter goes on to FastAPI's
    route (which takes the last): both give the same answers."""
    _cfg, _env, word = indexed
    base = portal_url.rstrip("/")

    def both(path: str, query: str) -> tuple[requests.Response, requests.Response]:
        hot = requests.get(f"{base}{path}?{query}", timeout=30)
        routed = requests.get(f"{base}{path}?q=unused&{query}", timeout=30)
        return hot, routed

    plain = [f"q={word}&size=3&page=2", "q=", "q=the+of", f"q={word}&page=1000", "q=%E4%B8%AD"]
    for query in plain:
        hot, routed = both("/api/search", query)
        assert (hot.status_code, hot.headers["content-type"]) == (
            routed.status_code,
            routed.headers["content-type"],
        ), query
        a, b = hot.json(), routed.json()
        a.pop("elapsed_ms", None), b.pop("elapsed_ms", None)
        assert a == b, query
    timing = re.compile(r"in [0-9.]+ ms")
    for query in (f"q={word}&page=2", "q=", "q=" + "x" * (MAX_QUERY_CHARS + 1), "q=the+of"):
        hot, routed = both("/", query)
        assert hot.status_code == routed.status_code, query
        for h in ("content-type", "content-security-policy", "x-content-type-options"):
            assert hot.headers[h] == routed.headers[h], (query, h)
        assert timing.sub("", hot.text) == timing.sub("", routed.text), query


def test_a_portal_without_search_threads_answers_alike(indexed, portal_url) -> None:
    """`srcrawl serve --threads 0`: the searches run in the event loop, the same answers."""
    cfg, _env, word = indexed
    with serving_in_thread(build_portal(cfg, threads=0)) as url:
        for path, params in (("/api/search", {"q": word, "page": "2"}), ("/api/search", {"q": ""})):
            got, want = _get(url, path, **params), _get(portal_url, path, **params)
            assert got.status_code == want.status_code, params
            a, b = got.json(), want.json()
            a.pop("elapsed_ms", None), b.pop("elapsed_ms", None)
            assert a == b
        assert _get(url, "/", q=word).status_code == 200


def test_searches_run_in_the_event_loop_with_sqlite_and_in_threads_with_mysql(tmp_path) -> None:
    """`srcrawl serve`'s default --threads: none with a SQLite store (local reads: the
    hand-off to a thread costs more than it spares), four with MySQL (round trips)."""
    env = {"SRCRAWL_REDIS_URL": "redis://127.0.0.1:1/0"}
    sqlite = Config.load(env={**env, "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db"})
    mysql = Config.load(env={**env, "SRCRAWL_DB_URL": "mysql://root@127.0.0.1:3306/test"})
    assert default_threads(sqlite) == 0
    assert default_threads(mysql) == DEFAULT_SEARCH_THREADS > 0
    portal = build_portal(sqlite)
    try:
        assert portal.pool.threads == 0
    finally:
        portal.pool.close()


def test_openapi_describes_what_the_api_returns(indexed, portal_url) -> None:
    _cfg, _env, word = indexed
    spec = _get(portal_url, "/openapi.json").json()
    assert spec["info"]["version"] == API_VERSION
    op = spec["paths"]["/api/search"]["get"]
    filters = {"lang", "site", "since", "until"}
    assert {p["name"] for p in op["parameters"]} == {"q", "page", "size", *filters}
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    body = _get(portal_url, "/api/search", q=word).json()
    assert set(body) == set(schema["properties"]) and set(schema["required"]) <= set(body)
    assert "approximate" not in body  # gone in API 0.2.0: the ranking is always exact
    hit_schema = spec["components"]["schemas"]["HitOut"]
    assert set(body["hits"][0]) == set(hit_schema["properties"])
    assert {"/api/search", "/api/status", "/healthz"} <= set(spec["paths"])
    assert "/api/seeds" not in spec["paths"]  # no admin token: no control endpoint


def test_api_status_is_srcrawl_status_json(indexed, portal_url) -> None:
    _cfg, env, _word = indexed
    cli = run_cli(["status", "--json"], env)
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    got = _get(portal_url, "/api/status").json()
    assert got["job"] == expected["job"] and got["phases"].keys() == expected["phases"].keys()
    assert got["workers"] == [] and expected["workers"] == []
    assert {k: got["store"][k] for k in expected["store"]} == expected["store"]
    assert got["store"]["indexed"] == expected["store"]["pages"]
    assert _get(portal_url, "/healthz").json() == {"ok": True}


def test_metrics_parse_and_move(indexed, portal_url, redis_url) -> None:
    cfg, _env, word = indexed
    client = redis.Redis.from_url(redis_url)
    client.hincrby(cfg.keys.stats("crawl"), "status_2xx", 7)
    client.hincrby(cfg.keys.stats("crawl"), "error_timeout", 2)
    before = _metrics(portal_url)
    _get(portal_url, "/api/search", q=word)
    after = _metrics(portal_url)
    assert after["srcrawl_search_seconds_count"] == before["srcrawl_search_seconds_count"] + 1
    assert after['srcrawl_crawl_pages_fetched_total{status_class="2xx"}'] == 7
    assert after['srcrawl_crawl_fetch_errors_total{kind="timeout"}'] == 2
    assert after['srcrawl_queue_length{phase="index",queue="srq"}'] == 0
    assert after["srcrawl_index_progress"] == 1.0 and after["srcrawl_cluster_up"] == 1
    assert after["srcrawl_index_pages"] == after["srcrawl_store_pages"] > 100


def _metrics(url: str) -> dict[str, float]:
    r = _get(url, "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k != "le")
            if "le" not in s.labels:
                samples[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return samples


def test_control_needs_the_admin_token(indexed, portal_url) -> None:
    cfg, _env, _word = indexed
    assert requests.post(
        portal_url + "api/seeds", json={"urls": ["http://127.0.0.1:9/"]}, timeout=10
    ).status_code in (404, 405)
    with serving_in_thread(build_portal(cfg, threads=1, admin_token="s3cret")) as url:
        seeds = {"urls": ["http://127.0.0.1:9/a"]}
        for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cre"}):
            r = requests.post(url + "api/seeds", json=seeds, headers=header, timeout=10)
            assert r.status_code == 403, (header, r.text)
        admin = {"Authorization": "Bearer s3cret"}
        r = requests.post(url + "api/seeds", json=seeds, headers=admin, timeout=10)
        assert r.status_code == 200 and r.json()["added"] == 1, r.text  # its own IP literal
        _seeds_are_judged_by_address(cfg, url, admin)
        bad = requests.post(
            url + "api/seeds",
            json={"urls": ["ftp://x"]},
            headers={"Authorization": "Bearer s3cret"},
            timeout=10,
        )
        assert bad.status_code == 400


def _seeds_are_judged_by_address(cfg: Config, url: str, admin: dict[str, str]) -> None:
    """As `srcrawl seed` judges them (tests/test_seed_policy.py): the machine's own name
    resolves to a non-public address, and is refused unless private addresses are allowed."""
    name = f"http://{socket.gethostname()}:9/"
    nrq = cfg.redis().llen(cfg.keys.nrq("crawl"))
    r = requests.post(url + "api/seeds", json={"urls": [name]}, headers=admin, timeout=10)
    assert r.status_code == 422, r.text  # every seed refused: nothing done
    assert r.json()["added"] == 0 and r.json()["strategy_version"] is None
    assert "--allow-private" in r.json()["refused"][name]
    assert cfg.redis().llen(cfg.keys.nrq("crawl")) == nrq
    both = {"urls": [name, "http://127.0.0.1:9/b"]}
    r = requests.post(url + "api/seeds", json=both, headers=admin, timeout=10)
    assert r.status_code == 200 and r.json()["added"] == 1 and list(r.json()["refused"]) == [name]
    allowed = {"urls": [name], "allow_private": True}
    r = requests.post(url + "api/seeds", json=allowed, headers=admin, timeout=10)
    assert r.status_code == 200 and r.json()["added"] == 1 and r.json()["refused"] == {}


# -- in a real browser --------------------------------------------------------------


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    yield context.new_page()
    context.close()


def _shot(page, name: str) -> None:
    """Screenshots for the README, when SRCRAWL_SCREENSHOTS names a directory."""
    directory = os.environ.get("SRCRAWL_SCREENSHOTS")
    if directory:
        page.screenshot(path=str(Path(directory) / name), full_page=True)


@pytest.mark.slow
def test_a_query_typed_in_the_page_shows_ranked_marked_results(indexed, portal_url, page) -> None:
    _cfg, _env, word = indexed
    page.goto(portal_url)
    page.fill("input[name=q]", word)
    page.press("input[name=q]", "Enter")
    page.wait_for_selector("li.hit")
    # ten a page, less a hit folded into one above it (the test web mirrors pages on
    # its two hosts: the same title and text, portal/grouping.py)
    api = _get(portal_url, "/api/search", q=word).json()
    assert page.locator("li.hit").count() == len(api["hits"]) >= 9
    assert "every word" in page.inner_text("#summary") and " ms" in page.inner_text("#summary")
    marks = page.locator("li.hit mark").all_inner_texts()
    assert marks and all(m.lower() == word for m in marks)
    first_page = page.locator("li.hit .url").all_inner_texts()
    _shot(page, "portal-search.png")
    page.click("a[rel=next]")
    page.wait_for_url(re.compile(r"page=2"))
    assert page.locator(".pages .current").inner_text() == "2"
    second_page = page.locator("li.hit .url").all_inner_texts()
    assert second_page and not set(first_page) & set(second_page)
    assert page.get_attribute("ol.results", "start") == "11"


@pytest.mark.slow
def test_a_hostile_title_is_text_and_runs_nothing(portal_url, page) -> None:
    page.goto(portal_url + f"?q={HOSTILE_TERM}")
    title = page.locator("li.hit a.title")
    assert title.inner_text() == HOSTILE_TITLE  # shown as the characters it is
    assert page.evaluate("window.__pwned") is None
    assert page.locator("li.hit img, li.hit script").count() == 0
    assert page.locator("li.hit mark").all_inner_texts() == [HOSTILE_TERM, HOSTILE_TERM]
    assert "<b>bold</b>" in page.locator("li.hit .snippet").inner_text()


@pytest.mark.slow
def test_empty_and_overlong_queries_get_a_friendly_page(portal_url, page) -> None:
    page.goto(portal_url + "?q=+++")
    assert page.locator("input[name=q]").is_visible() and page.locator("li.hit").count() == 0
    # over the limit: its start is searched, and the page says so (the box shows that start)
    long = f"{HOSTILE_TERM} " + "w" * (MAX_QUERY_CHARS + 50)
    response = page.goto(portal_url + "?q=" + long)
    assert response.status == 200
    assert f"only the first {MAX_QUERY_CHARS} characters" in page.inner_text("main")
    assert page.locator("li.hit").count() == 1
    assert page.input_value("input[name=q]") == long[:MAX_QUERY_CHARS]
    api = _get(portal_url, "/api/search", q=long).json()
    assert len(api["hits"]) == 1 and any(str(MAX_QUERY_CHARS) in n for n in api["notes"])
    page.goto(portal_url + "?q=the+of")
    assert "no searchable words" in page.inner_text("#problem")
    assert page.locator("input[name=q]").get_attribute("maxlength") == str(MAX_QUERY_CHARS)


@pytest.mark.slow
def test_the_status_page_shows_the_counters_move(indexed, portal_url, page, redis_url) -> None:
    cfg, _env, _word = indexed
    client = redis.Redis.from_url(redis_url)
    page.goto(portal_url + "status")
    assert page.inner_text("#job") == cfg.job
    assert "indexed" in page.inner_text("#store")
    assert page.get_attribute("meta[http-equiv=refresh]", "content") == "5"
    client.hincrby(cfg.keys.stats("crawl"), "pages", 40)
    page.wait_for_load_state()
    with page.expect_navigation(timeout=15_000):  # the page reloads itself
        pass
    crawl = page.locator("tr[data-phase=crawl] [data-counter=pages]").inner_text()
    assert int(crawl.split("=")[1]) >= 40
    _shot(page, "portal-status.png")


def test_compose_publishes_the_portal_with_a_health_check() -> None:
    import yaml
    from click_parse import parse_command

    compose = Path(__file__).resolve().parent.parent / "docker-compose.yml"
    portal = yaml.safe_load(compose.read_text())["services"]["portal"]
    command, ctx = parse_command(portal["command"])
    assert command.name == "serve" and ctx.params["bind"] == "0.0.0.0"
    assert ctx.params["port"] == 8080
    assert portal["ports"] == ["${PORTAL_PORT:-8080}:8080"]  # 8080 unless PORTAL_PORT is set
    assert portal["healthcheck"]["test"] == ["CMD", "srcrawl", "health", "portal"]  # /healthz


DELAYED_ACK_MS = 40  # Linux's least delayed-ACK wait, which Nagle's algorithm meets


def _kept_alive_answers(url: str, n: int = 15) -> list[float]:
    """Milliseconds of ``n`` answers of /healthz on one kept-alive connection."""
    import http.client
    import time

    host, port = url.split("//")[1].rstrip("/").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    ms = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b'{"ok":true}'
            ms.append((time.perf_counter() - t0) * 1000)
    finally:
        conn.close()
    return ms


def test_keep_alive_answers_without_a_delayed_ack_wait(portal_url) -> None:
    """Answers on a kept-alive connection come at once: TCP_NODELAY on the server's side of
    the connection (without it each one waited 40 ms for the client's delayed ACK). The
    portal serves in this process: its side of the connection is read by its descriptor,
    not timed (a time against a margin of milliseconds fails on a busy machine)."""
    import http.client
    import socket

    import psutil

    host, port = portal_url.split("//")[1].rstrip("/").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    for _ in range(3):  # one connection, kept alive
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b'{"ok":true}'
    client_port = conn.sock.getsockname()[1]
    [served] = [
        c
        for c in psutil.Process().net_connections(kind="tcp")
        if c.laddr.port == int(port) and c.raddr and c.raddr.port == client_port
    ]
    server_side = socket.socket(fileno=os.dup(served.fd))
    try:
        assert server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server_side.close()
    conn.close()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        cmdline = (stat.parent / "cmdline").read_bytes()
        if int(fields[1]) == pid and b"resource_tracker" not in cmdline:
            kids.append(int(stat.parent.name))
    return kids


@pytest.mark.slow
def test_serve_with_worker_processes(indexed, portal_url) -> None:
    """`srcrawl serve --workers 2`: two processes, each its own portal built from the
    environment, answer on one socket as the single-process portal does, without the
    delayed-ACK wait; SIGTERM ends the server and its workers."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    _cfg, env, word = indexed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [sys.executable, "-m", "srcrawl.app.cli", "serve", "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the workers did not start"
            try:
                if _get(url, "/healthz").status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
        workers = _children(proc.pid)
        assert len(workers) >= 2, workers
        for _ in range(4):  # whichever worker answers, the same answer
            got, want = (_get(u, "/api/search", q=word).json() for u in (url, portal_url))
            assert got["hits"] == want["hits"] and got["matches"] == want["matches"], [
                [(h["url"], h["score"]) for h in side["hits"]] for side in (got, want)
            ]
        # the workers' sockets are theirs, not this process's: timed, but by the least of
        # 15 answers: a delayed-ACK wait adds 40 ms to every one of them, a busy machine
        # slows some of them, not each
        ms = _kept_alive_answers(url)
        assert min(ms) < DELAYED_ACK_MS, ms
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 15
    while [pid for pid in workers if Path(f"/proc/{pid}").exists()]:
        assert time.monotonic() < deadline, f"workers left running: {workers}"
        time.sleep(0.1)


# -- a new user's first searches (issue #44) ------------------------------------------
def _other_store(cfg: Config, path: Path) -> Config:
    """``cfg`` with another, empty SQLite store."""
    from dataclasses import replace

    from srcrawl.settings.config import DatabaseURL

    return replace(cfg, db=DatabaseURL(kind="sqlite", path=str(path), create_dirs=True), _cache={})


@pytest.mark.slow
def test_a_missing_index_or_an_empty_store_is_named_at_start_and_on_the_page(
    indexed, page, tmp_path
) -> None:
    """`srcrawl serve` of a job without an index, or over a store without its pages, says
    which job, index and store it opened, and which jobs have an index."""
    from srcrawl.portal.readiness import problems
    from srcrawl.portal.server import _announce_job

    cfg, _env, word = indexed
    no_index = cfg.with_job("default")
    lines: list[str] = []
    _announce_job(no_index, problems(no_index), lines.append)
    assert "job 'default'" in lines[0] and str(no_index.index_path) in lines[0]
    assert any("warning: job 'default' has no index" in line for line in lines), lines
    assert any(f"`srcrawl --job {cfg.job}" in line for line in lines), lines
    with serving_in_thread(build_portal(no_index, threads=0)) as url:
        page.goto(url)
        setup = " ".join(page.locator(".setup").all_inner_texts())
        assert "job 'default' has no index" in setup and f"srcrawl --job {cfg.job}" in setup
        _shot(page, "portal-no-index.png")
        page.goto(url + f"?q={word}")
        assert "no index" in page.inner_text("#problem") and page.locator(".setup").count()
    empty = _other_store(cfg, tmp_path / "empty.db")
    with serving_in_thread(build_portal(empty, threads=0)) as url:
        page.goto(url + f"?q={word}")
        assert f"{empty.db.redacted()} holds no pages" in page.inner_text(".setup")
        # what the index found and the store lacks is said, not shown as a count alone
        assert "not in the store" in page.inner_text("main")
    ready: list[str] = []
    _announce_job(cfg, problems(cfg), ready.append)
    assert not [line for line in ready if "warning" in line] and "serve" in ready[-1]


@pytest.mark.slow
def test_a_stemmed_word_is_marked_as_the_page_writes_it(portal_url, page) -> None:
    page.goto(portal_url + f"?q=villages+{STEM_TERM}")
    marks = page.locator("li.hit mark").all_inner_texts()
    assert {"Village", "villages", STEM_TERM} <= set(marks), marks
    assert "«" not in page.inner_text("li.hit .snippet")


@pytest.mark.slow
def test_the_count_is_that_of_the_pages_listed(portal_url, page) -> None:
    """One page holds the four characters, two others one each: the list shows the three,
    and so does the count (one of them with every word)."""
    api = _get(portal_url, "/api/search", q=CHARS).json()
    n = len(api["hits"])  # (a page of the test web may hold one of them too)
    assert (api["matches"], api["every"], api["pages"]) == (n, 1, 1) and n >= 3, api
    page.goto(portal_url + f"?q={CHARS}")
    assert page.locator("li.hit").count() == n
    summary = " ".join(page.inner_text("#summary").split())
    assert summary.startswith(f"{n} pages, 1 with every word"), summary


@pytest.mark.slow
def test_each_unusual_query_gets_its_own_message(portal_url, page) -> None:
    def problem(q: str, page_no: int = 1) -> str:
        page.goto(portal_url + "?" + urlencode({"q": q, "page": page_no}))
        return page.inner_text("#problem")

    for n in (3, 99):  # one result: within the reachable depth or past it
        assert f"page {n} is past the last page of results, 1" in problem(STEM_TERM, n)
        page.click("#last-page")
        assert page.locator("li.hit").count() == 1
    assert "only pages to leave out (-village)" in problem("-village")
    assert "stop words" in problem("to be or not to be")
    for q in ("-village", "to be or not to be", "-site:example.com"):
        assert _get(portal_url, "/api/search", q=q).status_code == 400
    # a pasted URL: its host; an unclosed quote: its words as words; both said
    for q, note in (
        (f"{HOSTILE_TERM} site:http://127.0.0.1:9/some/path?x=1", "site: takes a host"),
        (f'"elders {STEM_TERM}', "is not closed"),
    ):
        page.goto(portal_url + "?" + urlencode({"q": q}))
        assert page.locator("li.hit").count() == 1, q
        assert note in page.inner_text("main"), q


@pytest.mark.slow
def test_a_word_no_page_holds_is_named(portal_url, page) -> None:
    page.goto(portal_url + f"?q={STEM_TERM}+vilagee")
    assert page.locator("li.hit").count() == 1
    assert "no page holds «vilagee»" in page.inner_text("main")
    page.goto(portal_url + "?q=crawlingzz")
    assert page.locator("li.hit").count() == 0
    assert "no page holds «crawlingzz»" in page.inner_text("main")
    api = _get(portal_url, "/api/search", q=f"{STEM_TERM} vilagee").json()
    assert api["missing"] == ["vilagee"] and api["mode"] == "or"
    # a did-you-mean from the index's own terms, a link to its search
    page.goto(portal_url + "?q=vilage+elderz")
    assert page.inner_text("#suggestion") == "Did you mean village elder?"  # (stems as one)
    page.click("#suggestion a")
    assert page.input_value("input[name=q]") == "village elder"
    assert page.locator("li.hit").count() >= 1 and page.locator("#suggestion").count() == 0
    assert _get(portal_url, "/api/search", q=STEM_TERM).json()["missing"] == []


@pytest.mark.slow
def test_the_api_page_works_offline_under_the_csp(portal_url, page) -> None:
    """Swagger UI's files come from the portal: with every other host cut off, the page
    lists the API's operations, and its policy refuses nothing they need."""
    own = portal_url.rstrip("/")
    outside: list[str] = []

    def offline(route) -> None:
        if route.request.url.startswith(own):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    response = page.goto(own + "/docs")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_selector(".opblock", timeout=15_000)
    assert "/api/search" in page.inner_text("#swagger-ui")
    assert outside == [] and errors == [], (outside, errors)
    assert _get(portal_url, "/redoc").status_code == 404  # (it would load from a CDN)


@pytest.mark.slow
def test_the_syntax_help_is_linked_from_the_search_page(portal_url, page) -> None:
    page.goto(portal_url)
    page.click(".help-link a")
    assert page.inner_text("h1") == "Search syntax"
    text = page.inner_text("main")
    for said in ('"create index"', "-full", "site:", "stem", "jieba", "Stop words"):
        assert said in text, said


@pytest.mark.slow
def test_dark_mode_headings_favicon_and_focus(browser, indexed, portal_url) -> None:
    _cfg, _env, word = indexed
    context = browser.new_context(color_scheme="dark")
    page = context.new_page()
    try:
        page.goto(portal_url)
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background not in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)"), background
        assert page.locator("input[name=q]").get_attribute("autofocus") is not None
        assert page.locator("h1").count() == 1
        icon = page.get_attribute("link[rel=icon]", "href")
        for path in (icon, "/favicon.ico"):
            r = _get(portal_url, path)
            assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg")
        page.goto(portal_url + f"?q={word}")
        # a result page: no focus taken from the reader (the keys scroll the page)
        assert page.locator("input[name=q]").get_attribute("autofocus") is None
        assert page.evaluate("document.activeElement.tagName") == "BODY"
        assert page.locator("h2").inner_text() == "Results"
        assert page.locator("li.hit h3 a.title").count() >= 9  # (one mirror folded)
        _shot(page, "portal-dark.png")
    finally:
        context.close()


@pytest.mark.slow
def test_an_echoed_query_and_a_hit_of_another_scheme_run_nothing(portal_url, page) -> None:
    hostile = '</title><script>window.__pwned=6</script>"><img src=x onerror="window.__pwned=7">'
    page.goto(portal_url + "?" + urlencode({"q": f"{HOSTILE_TERM} {hostile}"}))
    assert page.title().startswith(f"{HOSTILE_TERM} {hostile}")  # the characters, as text
    assert page.input_value("input[name=q]") == f"{HOSTILE_TERM} {hostile}"
    # the one script is the portal's own file (the search box's completions)
    assert page.locator("img, script").count() == 1
    assert page.get_attribute("script", "src") == "/static/suggest.js"
    assert page.evaluate("window.__pwned") is None
    # a crawl stores http(s) pages only: a hit of another scheme is rendered here, and the
    # page loaded without the portal's CSP, so that link_target alone keeps it from running
    html = _page_of_hits([_hit(url) for url in SCHEME_URLS])
    page.set_content(html)
    assert sorted(page.locator("li.hit .url").all_inner_texts()) == sorted(SCHEME_URLS)
    for i in range(len(SCHEME_URLS)):
        link = page.locator("li.hit a.title").nth(i)
        assert link.get_attribute("href") == "#"
        # its stored copy is a path of the portal's, the URL a parameter of it
        stored = page.locator("li.hit a.stored-link").nth(i).get_attribute("href")
        assert stored == "/stored?" + urlencode({"url": SCHEME_URLS[i], "q": "q"})
        link.click()
        assert page.evaluate("window.__pwned") is None


def _hit(url: str):
    from srcrawl.indexer.search import Hit
    from srcrawl.indexer.search.snippets import Snippet

    return Hit(url, "a page", 1.0, Snippet("some text"), fingerprint("http://x/" + url))


def _page_of_hits(hits: list) -> str:
    """The search page as the portal renders it for ``hits``."""
    from srcrawl.indexer.search import SearchResult
    from srcrawl.portal.app import _templates
    from srcrawl.portal.search_pool import ResultPage

    result = SearchResult("q", ["q"], "and", len(hits), False, hits, 1.0, every=len(hits))
    found = ResultPage(result, 1, 10)
    template = _templates().get_template("search.html")
    return template.render(query="q", found=found, links=[1], max_chars=MAX_QUERY_CHARS)


def test_a_page_past_the_reachable_depth_names_the_last_page(indexed, monkeypatch) -> None:
    """Past MAX_RESULT_DEPTH, the last page named is the deepest that can be reached when
    the results go on that far, and the last of them when they end before."""
    from srcrawl.portal import search_pool
    from srcrawl.portal.search_pool import PastLastPage

    cfg, _env, word = indexed  # a word of 15 to 60 pages
    monkeypatch.setattr(search_pool, "MAX_RESULT_DEPTH", 10)
    pool = build_portal(cfg, threads=0).pool
    try:
        with pytest.raises(PastLastPage, match=r"page 9 is past the last page of results, 2 "):
            pool.search(word, page=9, size=5)  # 10 results reachable: 2 pages of 5
        with pytest.raises(PastLastPage) as e:
            pool.search(STEM_TERM, page=9, size=5)
        assert e.value.last == 1 and "only the first" not in str(e.value)
    finally:
        pool.close()


@pytest.mark.slow
def test_a_host_shows_at_most_twice_and_its_more_link_narrows_to_it(indexed, portal_url, page):
    """In the browser: a host passed over on the first page says how many more it has, and
    its link searches that host alone. (The test web has two hosts: with no third to
    fill the page, a host's passed-over pages fill it after the other's, as documented.)"""
    from srcrawl.core.urls import host_of

    _cfg, _env, word = indexed
    page.goto(portal_url + "?" + urlencode({"q": word}))
    links = page.locator(".more-host a")
    assert links.count() >= 1  # the test web's hosts share the common words
    host = links.first.get_attribute("data-host")
    more = int(links.first.inner_text().split()[0])
    shown = Counter(host_of(u) for u in page.locator("li.hit div.url").all_inner_texts())
    assert shown[host] >= 1 and len(shown) == 2, shown  # both hosts on the first page
    links.first.click()
    page.wait_for_url("**site%3A*")
    urls = page.locator("li.hit div.url").all_inner_texts()
    assert urls and {host_of(u) for u in urls} == {host}
    assert len(urls) >= min(10, shown[host] + more)
