"""The portal's admin area over HTTP (a real uvicorn server on loopback), the status
pages' gate driven as ASGI with a non-loopback client address, and the whole of it in
a real headless browser beside a running crawl master and slave."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
import requests
from chromium_browser import CHROMIUM, CHROMIUM_ARGS

from srcrawl.core.defaults import ADMIN_LOGIN_FAILURES
from srcrawl.master.crawl_control import paused_since
from srcrawl.master.crawl_master import CrawlMaster
from srcrawl.portal.admin_auth import SESSION_COOKIE, AdminPassword
from srcrawl.portal.app import create_app
from srcrawl.portal.server import build_portal, serving_in_thread
from srcrawl.settings.config import Config

from .conftest import cli_env
from .test_crawl_master import GraphHandler, run_slave_thread

PASSWORD = "correct horse battery"


@pytest.fixture
def cfg(redis_url: str, tmp_path) -> Iterator[Config]:
    cfg = Config.load(env=cli_env(redis_url, f"a-{uuid.uuid4().hex[:10]}", tmp_path))
    yield cfg
    cfg.close()


def _portal(cfg: Config, password: str | None = PASSWORD):
    admin = AdminPassword.of(password) if password else None
    portal = build_portal(cfg, threads=0, admin_token="", admin_password=admin)
    if password is None:  # build_portal reads the variable when given none
        portal.admin_password = None
    return portal


@pytest.fixture
def url(cfg: Config) -> Iterator[str]:
    with serving_in_thread(_portal(cfg)) as url:
        yield url


def _login(url: str, password: str = PASSWORD) -> tuple[requests.Session, requests.Response]:
    s = requests.Session()
    r = s.post(url + "admin/login", data={"password": password}, allow_redirects=False, timeout=30)
    return s, r


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:2000]
    return found.group(1)


def test_without_a_password_the_admin_area_is_disabled(cfg: Config) -> None:
    with serving_in_thread(_portal(cfg, None)) as url:
        r = requests.get(url + "admin", timeout=30)
        assert r.status_code == 404 and "SRCRAWL_ADMIN_PASSWORD" in r.text
        _s, r = _login(url, "")
        assert r.status_code == 404 and SESSION_COOKIE not in r.cookies
        r = requests.post(url + "admin/jobs/x/pause", data={"csrf": "x"}, timeout=30)
        assert r.status_code == 404
        assert requests.get(url + "status", timeout=30).status_code == 200  # loopback


def test_a_login_sets_a_strict_http_only_cookie_and_logout_ends_it(url: str) -> None:
    r = requests.get(url + "admin", allow_redirects=False, timeout=30)
    assert r.status_code == 303 and r.headers["location"] == "/admin/login"
    s, r = _login(url)
    assert r.status_code == 303, r.text
    set_cookie = r.headers["set-cookie"]
    assert "HttpOnly" in set_cookie and "SameSite=strict" in set_cookie
    assert "Secure" not in set_cookie  # plain http here
    page = s.get(url + "admin", timeout=30)
    assert page.status_code == 200 and 'id="jobs"' in page.text
    assert page.headers["cache-control"] == "no-store"
    cookie = s.cookies[SESSION_COOKIE]
    r = s.post(url + "admin/logout", data={"csrf": _csrf(page.text)}, allow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/admin/login"
    # the same cookie again, after the logout: the session is gone in Redis
    again = requests.get(
        url + "admin", cookies={SESSION_COOKIE: cookie}, allow_redirects=False, timeout=30
    )
    assert again.status_code == 303


def test_a_wrong_password_is_refused_then_the_address_is_rate_limited(url: str) -> None:
    for _ in range(ADMIN_LOGIN_FAILURES):
        _s, r = _login(url, "wrong")
        assert r.status_code == 401 and "Wrong password" in r.text
        assert SESSION_COOKIE not in r.cookies
    _s, r = _login(url)  # the right password, too late: the window holds
    assert r.status_code == 429 and SESSION_COOKIE not in r.cookies


def test_a_post_without_the_session_csrf_token_does_nothing(cfg: Config, url: str) -> None:
    s, _r = _login(url)
    token = _csrf(s.get(url + "admin", timeout=30).text)
    pause = url + f"admin/jobs/{cfg.job}/pause"
    for data in ({}, {"csrf": "forged"}, {"csrf": _changed(token)}):
        r = s.post(pause, data=data, timeout=30)
        assert r.status_code == 403, data
        assert paused_since(cfg.redis(), cfg.keys) is None
    # another session's token is no good either
    other, _r = _login(url)
    r = other.post(pause, data={"csrf": token}, timeout=30)
    assert r.status_code == 403 and paused_since(cfg.redis(), cfg.keys) is None
    r = s.post(pause, data={"csrf": token}, timeout=30)
    assert r.status_code == 200 and 'id="paused"' in r.text
    assert paused_since(cfg.redis(), cfg.keys) is not None
    r = s.post(url + f"admin/jobs/{cfg.job}/resume", data={"csrf": token}, timeout=30)
    assert r.status_code == 200 and paused_since(cfg.redis(), cfg.keys) is None


def _changed(text: str) -> str:
    """The text with its last character replaced by a different one (never the same)."""
    return text[:-1] + ("A" if text[-1] != "A" else "B")


def test_a_tampered_session_cookie_is_refused(url: str) -> None:
    s, _r = _login(url)
    cookie = s.cookies[SESSION_COOKIE]
    session, mac = cookie.split(".")
    for forged in (f"{session}.{_changed(mac)}", f"{_changed(session)}.{mac}", session, ""):
        r = requests.get(
            url + "admin", cookies={SESSION_COOKIE: forged}, allow_redirects=False, timeout=30
        )
        assert r.status_code == 303, forged


def test_seeds_are_judged_as_srcrawl_seed_judges_them_each_named(cfg: Config, url: str) -> None:
    s, _r = _login(url)
    token = _csrf(s.get(url + "admin", timeout=30).text)
    # this machine's own name: its addresses are private (as in test_portal's /api/seeds)
    own = f"http://{socket.gethostname()}:9/"
    seeds = url + f"admin/jobs/{cfg.job}/seeds"
    r = s.post(seeds, data={"csrf": token, "urls": f"{own}\nnot a url"}, timeout=30)
    assert r.status_code == 422, r.text  # nothing queued
    refused = dict(re.findall(r'<li data-url="([^"]*)"><code>[^<]*</code>: ([^<]*)</li>', r.text))
    assert set(refused) == {own, "not", "a", "url"}
    assert "--allow-private" in refused[own]
    assert "invalid seed" in refused["not"] and "no scheme" in refused["not"]
    assert cfg.redis().llen(cfg.keys.nrq("crawl")) == 0
    data = {"csrf": token, "urls": f"{own} http://127.0.0.2:9/b", "allow_private": "on"}
    r = s.post(seeds, data=data, timeout=30)
    assert r.status_code == 200 and 'id="refused"' not in r.text
    queued = re.search(r'id="queued">(.*?)</p>', r.text).group(1)
    assert own in queued and "http://127.0.0.2:9/b" in queued
    assert cfg.redis().llen(cfg.keys.nrq("crawl")) == 1  # one seed message


# -- /status and /metrics: public on loopback only by default ------------------------------
def _asgi_get(app, path: str, client: str, cookie: str | None = None) -> tuple[int, bytes]:
    """One GET of ``path`` answered by the ASGI ``app`` for a client at ``client``."""
    headers = [(b"host", b"portal")]
    if cookie is not None:
        headers.append((b"cookie", f"{SESSION_COOKIE}={cookie}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": (client, 1234),
        "server": ("portal", 80),
    }
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("path", ["/status", "/api/status", "/metrics"])
def test_status_pages_need_a_session_from_a_non_loopback_address(cfg: Config, path: str) -> None:
    portal = _portal(cfg)
    app = create_app(portal)
    status, body = _asgi_get(app, path, "10.0.0.1")
    assert status == 403 and b"/admin" in body
    assert _asgi_get(app, path, "127.0.0.1")[0] == 200
    assert _asgi_get(app, path, "::1")[0] == 200
    cookie = portal_session(app)
    assert _asgi_get(app, path, "10.0.0.1", cookie)[0] == 200
    assert _asgi_get(app, path, "10.0.0.1", _changed(cookie))[0] == 403
    everyone = create_app(_portal(replace(cfg, status_public="all")))
    assert _asgi_get(everyone, path, "10.0.0.1")[0] == 200
    no_one = create_app(_portal(replace(cfg, status_public="admin")))
    assert _asgi_get(no_one, path, "127.0.0.1")[0] == 403


def portal_session(app) -> str:
    """A session of ``app``'s admin area, as a login would make it."""
    gate = app.middleware_stack  # built on the first request
    while gate is not None and type(gate).__name__ != "StatusGate":
        gate = getattr(gate, "app", None)
    assert gate is not None
    return gate.sessions.start()


def test_the_status_setting_comes_from_the_environment(redis_url: str, tmp_path) -> None:
    from srcrawl.core.errors import ConfigError

    env = cli_env(redis_url, "j", tmp_path)
    assert Config.load(env=env).status_public == "loopback"
    assert Config.load(env={**env, "SRCRAWL_STATUS_PUBLIC": "all"}).status_public == "all"
    with pytest.raises(ConfigError, match="SRCRAWL_STATUS_PUBLIC"):
        Config.load(env={**env, "SRCRAWL_STATUS_PUBLIC": "yes"})


def test_the_password_comes_from_a_file_and_only_its_hash_is_kept(tmp_path) -> None:
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\n")
    password = AdminPassword.from_env({"SRCRAWL_ADMIN_PASSWORD_FILE": str(secret)})
    assert password is not None and password.matches(PASSWORD) and not password.matches("x")
    assert PASSWORD.encode() not in repr(password).encode() + password.digest + password.salt
    assert AdminPassword.from_env({}) is None
    # two hashes of one password differ: each has its own salt
    assert AdminPassword.of(PASSWORD).digest != AdminPassword.of(PASSWORD).digest


# -- in a real browser, beside a running crawl -------------------------------------------
@pytest.fixture
def crawl(cfg: Config) -> Iterator[GraphHandler]:
    """A crawl master waiting for seeds (always on) and a slave answering from a graph."""
    first, second = "http://127.0.0.1:9/first", "http://127.0.0.2:9/second"
    handler = GraphHandler({first: [], second: []})
    started = threading.Event()
    holder: dict = {}

    def run_master() -> None:
        master = CrawlMaster.from_config(cfg, wait_for_work=True)
        holder["master"] = master
        started.set()
        master.run(keep_running=True)

    thread = threading.Thread(target=run_master, daemon=True)
    thread.start()
    slave, slave_thread = run_slave_thread(cfg, handler)
    yield handler
    started.wait(60)
    holder["master"].stopping.set()
    slave.stopping.set()
    thread.join(timeout=30)
    slave_thread.join(timeout=30)


def _reloading(page, job_page: str):  # type: ignore[no-untyped-def]
    """Two looks at the job's page, each reloading it until what it waits for shows."""

    def pages_shown(n: str) -> None:
        for _ in range(150):
            page.goto(job_page)
            if page.locator("#pages").inner_text() == n:
                return
            time.sleep(0.2)
        raise AssertionError(f"the job's page never showed {n} pages")

    def host_row(host: str) -> str:
        """The host's row once the master has taken it up (a reload a 0.2 s)."""
        for _ in range(150):
            page.goto(job_page)
            row = page.locator(f"tr[data-host='{host}']")
            if row.count():
                return row.inner_text()
            time.sleep(0.2)
        raise AssertionError(f"{host} never shown")

    return pages_shown, host_row


@pytest.mark.slow
def test_in_a_browser_log_in_seed_watch_pause_resume_log_out(cfg: Config, url: str, crawl) -> None:
    from playwright.sync_api import expect, sync_playwright

    job_page = url + f"admin/jobs/{cfg.job}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        page.goto(url + "admin")
        page.fill("input[name=password]", "not it")
        page.click("button[type=submit]")
        expect(page.locator("#error")).to_contain_text("Wrong password")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.click(f"#jobs a:text-is('{cfg.job}')")

        def add_seed(seed: str) -> None:
            page.fill("textarea[name=urls]", seed)
            page.check("input[name=allow_private]")
            page.click("#add-seeds")
            expect(page.locator("#queued")).to_contain_text(seed)

        pages_shown, host_row = _reloading(page, job_page)
        add_seed("http://127.0.0.1:9/first")
        wait_for(lambda: ("http://127.0.0.1:9/first", 0) in crawl.fetched, "the first seed fetched")
        # the job's progress counts it once the master took the outcome in
        pages_shown("1")
        page.click("#pause")
        expect(page.locator("#paused")).to_be_visible()
        time.sleep(1.5)  # the master looks at the flag every DEFAULT_PAUSE_CHECK (0.5 s)
        add_seed("http://127.0.0.2:9/second")
        row = host_row("127.0.0.2:9")
        assert re.match(r"127\.0\.0\.2:9\s+1\s+0\s", row), row  # queued, not in flight
        time.sleep(1.0)
        assert [u for u, _d in crawl.fetched] == ["http://127.0.0.1:9/first"]
        page.click("#resume")
        expect(page.locator("#pause")).to_be_visible()
        wait_for(lambda: len(crawl.fetched) == 2, "the second seed fetched after resume")
        pages_shown("2")
        assert page.locator("#paused").count() == 0
        page.click("#logout")
        expect(page.locator("input[name=password]")).to_be_visible()
        page.goto(job_page)
        assert page.url.endswith("/admin/login")
        browser.close()


def wait_for(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_job_names_in_paths_are_checked(cfg: Config, url: str) -> None:
    s, _r = _login(url)
    token = _csrf(s.get(url + "admin", timeout=30).text)
    r = s.post(url + "admin/jobs/" + "x" * 70 + "/pause", data={"csrf": token}, timeout=30)
    assert r.status_code == 404
    r = s.post(url + f"admin/jobs/{cfg.job}/explode", data={"csrf": token}, timeout=30)
    assert r.status_code == 404


def test_a_job_page_shows_each_host_as_the_store_and_the_frontier_have_it(
    cfg: Config, url: str
) -> None:
    from srcrawl.core.urls import fingerprint
    from srcrawl.sql.pages import Page

    host, pages = "127.0.0.3:9", ["http://127.0.0.3:9/a", "http://127.0.0.3:9/b"]
    cfg.store().put_pages(
        [
            Page(fingerprint(pages[0]), pages[0], host, status=200, depth=1),
            Page(fingerprint(pages[1]), pages[1], host, status=0, depth=2, error="timeout"),
        ]
    )
    cfg.redis().set(cfg.keys.robots(f"http://{host}"), b"RUser-agent: *\nDisallow:\n")
    cfg.redis().rpush(cfg.keys.crawl_queue(host), b"task")  # one URL queued for it
    s, _r = _login(url)
    page = s.get(url + f"admin/jobs/{cfg.job}", timeout=30).text
    row = re.search(rf'<tr data-host="{re.escape(host)}">(.*?)</tr>', page, re.S).group(1)
    cells = [
        re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    ]
    # queued, in flight, fetched, errors, backing off, deferred, robots.txt
    assert cells[:8] == [host, "1", "0", "2", "1", "–", "no", "rules"], cells
    cfg.redis().delete(cfg.keys.crawl_queue(host))
    recrawl = url + f"admin/jobs/{cfg.job}/recrawl"
    token = _csrf(page)
    r = s.post(recrawl, data={"csrf": token, "host": host}, timeout=30)
    assert r.status_code == 409 and "has no crawl" in r.text  # no crawl of the job yet
    seeds = {"csrf": token, "urls": "http://127.0.0.3:9/a", "allow_private": "on"}
    assert s.post(url + f"admin/jobs/{cfg.job}/seeds", data=seeds, timeout=30).ok
    r = s.post(recrawl, data={"csrf": token, "host": host}, timeout=30)
    assert r.status_code == 200 and "2 stored pages" in r.text
    assert cfg.redis().llen(cfg.keys.nrq("crawl")) == 2  # the seed, then the host's pages
    r = s.post(recrawl, data={"csrf": token, "host": "127.0.0.4:9"}, timeout=30)
    assert r.status_code == 404 and "no stored page" in r.text
