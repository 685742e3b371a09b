"""The portal's ASGI app: search page, JSON API, status page, metrics, health, control.

Every search runs in :class:`~srcrawl.portal.search_pool.SearchPool`'s threads,
so the event loop keeps answering while searches run, or with none (the default
with a SQLite store) in the event loop itself. Everything shown that
came from crawled pages goes through Jinja2's autoescape.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.util
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST

from srcrawl.core.defaults import DEFAULT_MAX_QUERY_TERMS
from srcrawl.core.errors import SrcrawlError
from srcrawl.core.urls import host_of
from srcrawl.portal.admin import include_admin
from srcrawl.portal.admin_auth import AdminPassword
from srcrawl.portal.cluster import CrawlRate, snapshot
from srcrawl.portal.hot import (
    DOCS_HEADERS,
    JSON_TYPE,
    PAGE_HEADERS,
    PAGE_SIZE,
    HotPaths,
    search_html,
    search_json,
)
from srcrawl.portal.markup import (
    active_filters,
    language_name,
    link_target,
    marked,
    site_query,
    stored_link,
    with_filter,
)
from srcrawl.portal.metrics import PortalMetrics
from srcrawl.portal.readiness import Readiness
from srcrawl.portal.schemas import (
    API_VERSION,
    ErrorOut,
    SearchOut,
    SeedsIn,
    SeedsOut,
    StatusOut,
)
from srcrawl.portal.search_pool import MAX_PAGE_SIZE, MAX_QUERY_CHARS, SearchPool
from srcrawl.portal.stored import (
    FILE_HEADERS,
    STORED_HEADERS,
    WARC_TYPE,
    raw_record,
    stored_file,
    stored_view,
)
from srcrawl.portal.suggest import suggest_routes
from srcrawl.settings.config import Config

HERE = Path(__file__).parent
SWAGGER_UI = Path(importlib.util.find_spec("fastapi_offline").origin).parent / "static"
"""Swagger UI's files as fastapi-offline ships them (its bundle and style sheet)."""
STATUS_REFRESH_S = 5
ENV_ADMIN_TOKEN = "SRCRAWL_ADMIN_TOKEN"


@dataclass
class Portal:
    """What every request shares: the config, the search threads, the metrics."""

    cfg: Config
    pool: SearchPool
    admin_token: str | None = None
    admin_password: AdminPassword | None = None
    """The admin area's password, hashed (None: the area is disabled, see portal/admin.py)."""
    rate: CrawlRate = field(default_factory=CrawlRate)
    metrics: PortalMetrics | None = None
    readiness: Readiness | None = None
    """What keeps the job from being searched (none: ready), shown on the search page."""

    def problems(self) -> list[str]:
        return self.readiness.current() if self.readiness is not None else []

    def snapshot(self) -> dict[str, Any]:
        return snapshot(self.cfg, self.rate)


def _templates() -> Jinja2Templates:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["marked"] = marked
    env.filters["link_target"] = link_target
    env.filters["stored"] = stored_link
    env.filters["host_of"] = host_of
    env.globals["site_query"] = site_query
    env.globals["with_filter"] = with_filter
    env.globals["active_filters"] = active_filters
    env.filters["language_name"] = language_name
    return Jinja2Templates(env=env)


def create_app(portal: Portal) -> FastAPI:
    """The app serving ``portal``; its search threads are closed when the app stops."""
    portal.metrics = portal.metrics or PortalMetrics(portal.snapshot)
    portal.pool.on_search = portal.metrics.observe_search

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        portal.pool.close()

    app = FastAPI(
        title="srcrawl portal",
        version=API_VERSION,
        lifespan=lifespan,
        description="Search the crawled pages; watch the crawl.",
        # FastAPI's own pages load Swagger UI from a CDN and start it by an inline script:
        # blank offline and under a CSP. The portal serves its own (see _docs_routes)
        docs_url=None,
        redoc_url=None,
    )
    app.state.portal = portal
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.mount("/swagger-ui", StaticFiles(directory=SWAGGER_UI), name="swagger-ui")
    templates = _templates()
    _search_routes(app, portal, templates)
    suggest_routes(app, portal)
    _stored_routes(app, portal, templates)
    _docs_routes(app, templates)
    _status_routes(app, portal, templates)
    if portal.admin_token:
        _control_routes(app, portal)
    include_admin(app, portal, templates)
    return app


def _html(
    templates: Jinja2Templates, request: Request, name: str, status: int = 200, **context: Any
) -> HTMLResponse:
    response = templates.TemplateResponse(request, name, context, status_code=status)
    response.headers.update(PAGE_HEADERS)
    return response


def _search_routes(app: FastAPI, portal: Portal, templates: Jinja2Templates) -> None:
    # a plain GET of either path is answered by HotPaths; these routes answer the rest
    # (HEAD, parameters FastAPI must judge) from the same functions, and document the API
    page_template = templates.get_template("search.html")
    app.add_middleware(HotPaths, portal=portal, page=page_template)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def search_page(q: str = "", page: str = "1") -> HTMLResponse:
        status, html = await search_html(portal, page_template, q, page)
        return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)

    @app.get(
        "/api/search",
        response_model=SearchOut,
        responses={
            400: {"model": ErrorOut, "description": "An unusable query"},
            422: {"model": ErrorOut, "description": "A filter whose value is not one"},
        },
    )
    async def api_search(
        q: str = Query(..., description="The query: words in any language"),
        page: int = Query(1, ge=1, description="Which page of results, from 1"),
        size: int = Query(PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, description="Results a page"),
        lang: str | None = Query(None, description="Pages in this language (ISO 639-1: zh, en)"),
        site: str | None = Query(None, description="Pages of this host or its subdomains"),
        since: str | None = Query(None, description="Pages fetched on or after (YYYY-MM-DD, UTC)"),
        until: str | None = Query(None, description="Pages fetched on or before (YYYY-MM-DD)"),
    ) -> Any:
        """Ranked results, as ``srcrawl search --json`` gives them, with totals, timing and
        the matching pages counted by language, host and fetch month (``facets``). The
        filter parameters narrow the search as ``lang:``, ``site:``, ``since:`` and
        ``until:`` in the query do."""
        # a Response is sent as it is: the response model documents the answer, and
        # validating and re-encoding every answer against it is work no client needs
        filters = {"lang": lang, "site": site, "since": since, "until": until}
        status, body = await search_json(portal, q, page, size, filters)
        return Response(body, status_code=status, media_type=JSON_TYPE)


def _stored_routes(app: FastAPI, portal: Portal, templates: Jinja2Templates) -> None:
    """A page's stored copy, its WARC record, and the images it shows from the store."""
    template = templates.get_template("stored.html")

    @app.get("/stored", response_class=HTMLResponse, include_in_schema=False)
    async def stored(url: str = "", q: str = "") -> HTMLResponse:
        status, context = await portal.pool.call_async(lambda s: stored_view(s, url, q))
        return HTMLResponse(template.render(**context), status, headers=STORED_HEADERS)

    @app.get(
        "/stored/raw",
        response_class=Response,
        responses={200: {"content": {WARC_TYPE: {}}}, 404: {"model": ErrorOut}},
    )
    async def stored_raw(url: str = Query(..., description="The page's URL")) -> Response:
        """The WARC response record of a stored page, as the crawl wrote it (one gzip
        member: a WARC file of one record, ``.warc.gz``)."""
        record = await portal.pool.call_async(lambda s: raw_record(s.store, url))
        if record is None:
            return JSONResponse({"error": f"no WARC record of {url}"}, status_code=404)
        headers = {
            "Content-Disposition": 'attachment; filename="record.warc.gz"',
            "X-Content-Type-Options": "nosniff",
        }
        return Response(record, media_type=WARC_TYPE, headers=headers)

    @app.get("/stored/file", include_in_schema=False)
    async def stored_image(url: str = "") -> Response:
        found = await portal.pool.call_async(lambda s: stored_file(s.store, url))
        if found is None:
            return Response(status_code=404, headers=FILE_HEADERS)
        body, media_type = found
        return Response(body, media_type=media_type, headers=FILE_HEADERS)


def _docs_routes(app: FastAPI, templates: Jinja2Templates) -> None:
    """The syntax help, and the API's Swagger UI from the portal itself (fastapi-offline's
    files, started by a script of the portal's: no inline script), so that both work
    offline and under a CSP."""

    @app.get("/help", response_class=HTMLResponse, include_in_schema=False)
    async def help_page(request: Request) -> HTMLResponse:
        return _html(
            templates,
            request,
            "help.html",
            max_chars=MAX_QUERY_CHARS,
            max_terms=DEFAULT_MAX_QUERY_TERMS,
        )

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def api_docs(request: Request) -> HTMLResponse:
        response = templates.TemplateResponse(request, "docs.html", {})
        response.headers.update(DOCS_HEADERS)
        return response

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        # browsers ask for it whatever the page links to
        return Response((HERE / "static" / "favicon.svg").read_bytes(), media_type="image/svg+xml")


def _status_routes(app: FastAPI, portal: Portal, templates: Jinja2Templates) -> None:
    @app.get("/api/status", response_model=StatusOut)
    async def api_status() -> Any:
        """What ``srcrawl status --json`` returns, with the longest queues and recent pages/s."""
        return await asyncio.to_thread(portal.snapshot)

    @app.get("/status", response_class=HTMLResponse, include_in_schema=False)
    async def status_page(request: Request) -> HTMLResponse:
        snap = await asyncio.to_thread(portal.snapshot)
        return _html(templates, request, "status.html", snap=snap, refresh=STATUS_REFRESH_S)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        assert portal.metrics is not None
        body = await asyncio.to_thread(portal.metrics.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", responses={503: {"model": ErrorOut}})
    async def healthz() -> Any:
        """200 when Redis answers and the store can be read (docker compose's healthcheck)."""
        try:
            await asyncio.to_thread(_check, portal.cfg)
        except Exception as e:  # whatever is down, the answer is 503 with the reason
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=503)
        return {"ok": True}


def _check(cfg: Config) -> None:
    cfg.redis().ping()
    cfg.store().count("meta")


def _control_routes(app: FastAPI, portal: Portal) -> None:
    token = (portal.admin_token or "").encode()

    def authorize(header: str | None) -> None:
        given = (header or "").removeprefix("Bearer ").encode()
        # constant time: how long the compare takes says nothing about the token
        if not hmac.compare_digest(given, token):
            raise HTTPException(status_code=403, detail="a valid admin token is needed")

    @app.post(
        "/api/seeds",
        response_model=SeedsOut,
        responses={403: {"model": ErrorOut}, 422: {"description": "Every seed was refused"}},
    )
    async def add_seeds(body: SeedsIn, authorization: str | None = Header(None)) -> Any:
        """Add seed URLs to the job's crawl (needs ``Authorization: Bearer <token>``).

        Seeds are judged as `srcrawl seed` judges them: one whose address the crawl may
        not reach (loopback, private, link-local, unless allowed) is not queued and is
        named in ``refused``; when every seed is refused the answer is 422.
        """
        authorize(authorization)
        from srcrawl.master.crawl_run import add_seeds as add
        from srcrawl.slave.fetch_policy import refuse_seed

        def queue() -> Any:
            # the address judge `srcrawl seed` applies: a seed the fetch would refuse
            # is named with the reason instead of failing later in the crawl
            return add(
                portal.cfg,
                body.urls,
                allow_private=body.allow_private,
                allow_networks=body.allow_networks,
                refuse=refuse_seed,
            )

        try:
            added = await asyncio.to_thread(queue)
        except (SrcrawlError, ValueError) as e:  # a malformed URL or network, a scheme
            raise HTTPException(status_code=400, detail=str(e)) from e
        out = {
            "added": len(added.queued),
            "strategy_version": added.strategy.version if added.strategy else None,
            "refused": added.refused,
            "again": len(added.again),
        }
        # nothing queued because every seed was refused: the request did nothing
        return JSONResponse(out, status_code=422) if added.refused and not added.queued else out
