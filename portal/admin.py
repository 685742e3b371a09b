"""The portal's admin area under ``/admin``: log in, add seeds, watch each job's hosts,
pause and resume a job, fetch a host again, log out.

Who may use it is :mod:`srcrawl.portal.admin_auth`'s. Every page is plain HTML forms (the
portal's CSP runs no script); every form that changes something carries the session's
CSRF token. What it does is what the command line does: seeds go through
:func:`~srcrawl.master.crawl_run.add_seeds` with the fetch's own address judge, as
`srcrawl seed`; pausing is :mod:`srcrawl.master.crawl_control`'s flag.

:class:`StatusGate` keeps /status, /api/status and /metrics to the clients
``Config.status_public`` lets read them; anyone else needs an admin session.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from srcrawl.core.defaults import ADMIN_SESSION_TTL
from srcrawl.core.errors import ConfigError, SrcrawlError
from srcrawl.portal.admin_auth import SESSION_COOKIE, AdminSessions, is_loopback
from srcrawl.portal.hot import PAGE_HEADERS
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.master.crawl_control import HostQueue
    from srcrawl.portal.app import Portal

ADMIN_HEADERS = {**PAGE_HEADERS, "Cache-Control": "no-store"}
GATED_PATHS = ("/status", "/api/status", "/metrics")
"""What ``Config.status_public`` keeps from clients without an admin session."""
MAX_FORM_BYTES = 64 * 1024
HOSTS_SHOWN = 500
"""Hosts a job's page lists, the busiest first (a crawl may hold millions)."""


def include_admin(app: FastAPI, portal: Portal, templates: Jinja2Templates) -> None:
    """The admin area's routes, and the gate in front of the status pages."""
    sessions = AdminSessions(portal.cfg)
    app.add_middleware(StatusGate, cfg=portal.cfg, sessions=sessions)
    app.include_router(_router(portal, sessions, templates))


class StatusGate:
    """Answers 403 to a request for a status page from a client the setting leaves out,
    unless it has an admin session (which the admin area must be enabled to give)."""

    def __init__(self, app: ASGIApp, cfg: Config, sessions: AdminSessions) -> None:
        self.app, self.cfg, self.sessions = app, cfg, sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gated = scope["type"] == "http" and scope["path"] in GATED_PATHS
        if gated and not await self._allowed(Request(scope)):
            text = "403: this page needs an admin session here; log in at /admin first\n"
            await Response(text, 403, media_type="text/plain")(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _allowed(self, request: Request) -> bool:
        public = self.cfg.status_public
        if public == "all" or (public == "loopback" and is_loopback(_client(request))):
            return True
        cookie = request.cookies.get(SESSION_COOKIE)
        return cookie is not None and bool(
            await asyncio.to_thread(self.sessions.session_of, cookie)
        )


def _client(request: Request) -> str | None:
    return request.client.host if request.client is not None else None


async def _form(request: Request) -> dict[str, str]:
    """The fields of a posted urlencoded form (the last value of each)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in fields.items()}


class _Area:
    """What the admin area's routes share: the page renderer and the session checks."""

    def __init__(self, portal: Portal, sessions: AdminSessions, templates: Jinja2Templates) -> None:
        self.portal, self.sessions, self.templates = portal, sessions, templates

    @property
    def enabled(self) -> bool:
        return self.portal.admin_password is not None

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """The page ``name``; with no password set, the page saying the area is disabled."""
        if not self.enabled:
            name, status, context = "admin_disabled.html", 404, {}
        response = self.templates.TemplateResponse(request, name, context, status_code=status)
        response.headers.update(ADMIN_HEADERS)
        return response

    def disabled(self, request: Request) -> HTMLResponse:
        return self.page(request, "admin_disabled.html", 404)

    async def signed_in(self, request: Request, form: dict[str, str] | None = None) -> str | None:
        """The request's session; a POST's (``form``) only with the session's CSRF token."""
        if not self.enabled:
            return None
        cookie = request.cookies.get(SESSION_COOKIE)
        found = await asyncio.to_thread(self.sessions.session_of, cookie)
        if found is not None and form is not None:
            return found if self.sessions.csrf_ok(found, form.get("csrf")) else None
        return found

    def refused(self, request: Request) -> HTMLResponse:
        """A POST with no session, or without its CSRF token: nothing was done."""
        if not self.enabled:
            return self.disabled(request)
        error = "Not done: log in again (no session, or the form was not this session's)."
        return self.page(request, "admin_login.html", 403, error=error)

    def to_login(self, request: Request) -> Response:
        if not self.enabled:
            return self.disabled(request)
        return RedirectResponse("/admin/login", status_code=303)


def _router(portal: Portal, sessions: AdminSessions, templates: Jinja2Templates) -> APIRouter:
    router = APIRouter(prefix="/admin", include_in_schema=False)
    area = _Area(portal, sessions, templates)
    _login_routes(router, area)
    _job_routes(router, area)
    return router


def _job_routes(router: APIRouter, area: _Area) -> None:
    cfg = area.portal.cfg

    @router.get("", response_class=HTMLResponse)
    async def jobs_page(request: Request) -> Response:
        found = await area.signed_in(request)
        if found is None:
            return area.to_login(request)
        rows = await asyncio.to_thread(_jobs, cfg)
        return area.page(
            request, "admin_jobs.html", jobs=rows, csrf=area.sessions.csrf_token(found)
        )

    @router.get("/jobs/{job}", response_class=HTMLResponse)
    async def job_page(request: Request, job: str) -> Response:
        found = await area.signed_in(request)
        if found is None:
            return area.to_login(request)
        return await _job_view(request, area, job, area.sessions.csrf_token(found))

    @router.post("/jobs/{job}/{action}", response_class=HTMLResponse)
    async def job_action(request: Request, job: str, action: str) -> Response:
        form = await _form(request)
        found = await area.signed_in(request, form)
        if found is None:
            return area.refused(request)
        try:
            job_cfg = cfg.with_job(job)
        except ConfigError:
            return area.page(request, "admin_job.html", 404, job=job, missing=True)
        done = await asyncio.to_thread(_act, job_cfg, action, form)
        if done is None:
            return area.page(request, "admin_job.html", 404, job=job, missing=True)
        status, told = done
        csrf = area.sessions.csrf_token(found)
        return await _job_view(request, area, job, csrf, status, **told)


def _login_routes(router: APIRouter, area: _Area) -> None:
    @router.get("/login", response_class=HTMLResponse)
    async def login_page(request: Request) -> HTMLResponse:
        return area.page(request, "admin_login.html")

    @router.post("/login", response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        password = area.portal.admin_password
        if password is None:
            return area.disabled(request)
        form = await _form(request)
        client = _client(request) or "unknown"
        if await asyncio.to_thread(area.sessions.locked_out, client):
            error = "Too many failed logins from your address: wait a minute."
            return area.page(request, "admin_login.html", 429, error=error)
        # scrypt takes tens of ms of CPU: off the event loop
        if not await asyncio.to_thread(password.matches, form.get("password", "")):
            await asyncio.to_thread(area.sessions.failed, client)
            return area.page(request, "admin_login.html", 401, error="Wrong password.")
        cookie = await asyncio.to_thread(area.sessions.start)
        response = RedirectResponse("/admin", status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            cookie,
            max_age=ADMIN_SESSION_TTL,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        form = await _form(request)
        found = await area.signed_in(request, form)
        if found is None:
            return area.refused(request)
        await asyncio.to_thread(area.sessions.end, found)
        response = RedirectResponse("/admin/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response


async def _job_view(
    request: Request, area: _Area, job: str, csrf: str, status: int = 200, **told: Any
) -> HTMLResponse:
    try:
        job_cfg = area.portal.cfg.with_job(job)
    except ConfigError:
        return area.page(request, "admin_job.html", 404, job=job, missing=True)
    view = await asyncio.to_thread(_job, job_cfg)
    return area.page(request, "admin_job.html", status, job=job, csrf=csrf, **view, **told)


def _jobs(cfg: Config) -> list[dict[str, Any]]:
    """Each job Redis holds a crawl of (and the portal's own), with its progress."""
    from srcrawl.master.crawl_control import jobs, paused_since
    from srcrawl.master.crawl_master import crawl_state
    from srcrawl.master.crawl_run import progress

    client = cfg.redis()
    rows = []
    for name in sorted({cfg.job, *jobs(client)}):
        job_cfg = cfg.with_job(name)
        counters = progress(job_cfg)
        rows.append(
            {
                "job": name,
                "state": crawl_state(job_cfg).get("state", "no crawl"),
                "paused": paused_since(client, job_cfg.keys) is not None,
                "pages": counters.get("pages", 0) + counters.get("refetched", 0),
                "queued": counters["queued"],
                "in_flight": counters["in_flight"],
            }
        )
    return rows


def _job(cfg: Config) -> dict[str, Any]:
    """A job's state, counters and hosts, for its page."""
    from srcrawl.master.crawl_control import frontier_hosts, paused_since
    from srcrawl.master.crawl_master import crawl_state
    from srcrawl.master.crawl_run import progress
    from srcrawl.slave.robots import robots_states

    client = cfg.redis()
    queues = frontier_hosts(cfg)
    try:
        stored = cfg.store().host_counts()
    except SrcrawlError:  # the frontier is still shown
        stored = {}
    # the busiest hosts first (in the frontier, then the most fetched), HOSTS_SHOWN of them
    names = sorted(
        set(queues) | set(stored),
        key=lambda h: (-_busy(queues.get(h)), -stored.get(h, (0, 0))[0], h),
    )
    shown, names = len(names), names[:HOSTS_SHOWN]
    origins = [f"{scheme}://{h}" for h in names for scheme in ("http", "https")]
    robots = robots_states(client, cfg.keys, origins)
    hosts = []
    for h in names:
        q = queues.get(h)
        fetched, errors = stored.get(h, (0, 0))
        read = [robots[o] for o in (f"http://{h}", f"https://{h}") if robots[o] != "not read"]
        hosts.append(
            {
                "host": h,
                "queued": q.queued if q else 0,
                "in_flight": q.in_flight if q else 0,
                "fetched": fetched,
                "errors": errors,
                "backing_off": _until(q.backing_off_until) if q else None,
                "deferred": bool(q and (q.lagging or q.robots_error)),
                "robots": (q.robots_error.get("reason") if q and q.robots_error else None)
                or (read[0] if read else "not read"),
            }
        )
    paused = paused_since(client, cfg.keys)
    return {
        "state": crawl_state(cfg).get("state", "no crawl"),
        "paused": paused is not None,
        "paused_at": _until(paused),
        "counters": progress(cfg),
        "hosts": hosts,
        "hosts_total": shown,
    }


def _busy(q: HostQueue | None) -> int:
    return q.queued + q.in_flight if q is not None else 0


def _until(epoch: float | None) -> str | None:
    return None if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))


def _act(cfg: Config, action: str, form: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
    """Do a job page's action; (the status, what to tell) or None for no such action."""
    from srcrawl.master.crawl_control import pause_crawl, resume_crawl

    if action == "pause":
        pause_crawl(cfg)
        return 200, {"notice": "Paused: no new task is handed out."}
    if action == "resume":
        resume_crawl(cfg)
        return 200, {"notice": "Resumed."}
    if action == "seeds":
        return _seeds(cfg, form.get("urls", "").split(), form.get("allow_private") == "on")
    if action == "recrawl":
        return _recrawl(cfg, form.get("host", "").strip())
    return None


def _seeds(cfg: Config, urls: list[str], allow_private: bool) -> tuple[int, dict[str, Any]]:
    """Add seeds as `srcrawl seed` does; each one not queued is named with the reason."""
    from srcrawl.master.crawl_run import add_seeds, check_seeds
    from srcrawl.slave.fetch_policy import refuse_seed

    refused: dict[str, str] = {}
    valid = []
    for url in urls:  # judged one by one, so that each malformed one is named
        try:
            check_seeds([url])
            valid.append(url)
        except ConfigError as e:
            refused[url] = str(e)
    queued: list[str] = []
    if valid:
        try:
            added = add_seeds(cfg, valid, allow_private=allow_private, refuse=refuse_seed)
        except (SrcrawlError, ValueError) as e:
            refused.update((u, str(e)) for u in valid)
        else:
            queued = added.queued
            refused.update(added.refused)
    if not urls:
        refused[""] = "give at least one seed URL"
    return (200 if queued or not refused else 422), {"queued": queued, "refused": refused}


def _recrawl(cfg: Config, host: str) -> tuple[int, dict[str, Any]]:
    from srcrawl.master.crawl_run import recrawl_host

    try:
        n = recrawl_host(cfg, host) if host else 0
    except SrcrawlError as e:
        return 409, {"error": str(e)}
    if not n:
        return 404, {"error": f"no stored page of {host or 'that host'} to fetch again"}
    return 200, {"notice": f"{n} stored pages of {host} queued to be fetched again."}
