"""The two hot endpoints, ``GET /api/search`` and the search page ``/``, answered ahead
of the framework.

Through FastAPI's routes a search passes the framework's ASGI layers, the
routing, dependency solving and pydantic's checks of its parameters before it
starts. :class:`HotPaths`, the app's outermost user middleware, answers a GET
of either path whose parameters are plain (each given at most once; numbers
written as plain decimals within their bounds) itself: the parameters parsed
once, the search run in the pool, the body encoded once (orjson, or the page's
template, looked up once). Every other request goes on to FastAPI, and so do
these paths with parameters FastAPI must judge (no ``q``, a page of ``abc``):
its routes answer from the same functions below, so both give the same answer,
and they describe the API in the OpenAPI document.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson
from jinja2 import Template

from srcrawl.indexer.search import QueryError
from srcrawl.indexer.search.query import FilterError, day_start, language_code
from srcrawl.portal.markup import page_links
from srcrawl.portal.search_pool import MAX_PAGE_SIZE, MAX_QUERY_CHARS, PastLastPage

if TYPE_CHECKING:
    from srcrawl.portal.app import Portal

PAGE_SIZE = 10
# the portal's own pages run only its own script files (the search box's completions): no
# inline script, so a script that slipped into crawled text could not run
CSP = "default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'"
JSON_TYPE = "application/json"
HTML_TYPE = "text/html; charset=utf-8"
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}
# the API page runs Swagger UI: scripts of the portal's own origin only (no inline script,
# no eval), and the inline styles and data: images its widgets set
DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; frame-ancestors 'none'"
)
DOCS_HEADERS = {"Content-Security-Policy": DOCS_CSP, "X-Content-Type-Options": "nosniff"}
_PLAIN_NUMBER = re.compile(r"[1-9][0-9]{0,8}")
_UNUSABLE = (QueryError, ValueError)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


FILTER_PARAMS = ("lang", "site", "since", "until")
"""The API's parameters that narrow a search as the query's ``name:value`` do."""


def with_filters(q: str, filters: dict[str, str | None]) -> str:
    """``q`` with the API's filter parameters (``lang=zh``, ``site=``, ``since=``,
    ``until=``) added as the query syntax's filters; raise FilterError for a value that is
    not one (a site with a space, an empty value: the syntax would read them otherwise)."""
    added = []
    for name in FILTER_PARAMS:
        value = filters.get(name)
        if value is None:
            continue
        value = value.strip()
        if not value or any(c.isspace() or c == '"' for c in value):
            raise FilterError(f"{name}= takes one value without spaces, not {value!r}")
        if name == "lang":
            value = language_code(value)
        elif name != "site":
            day_start(value, f"{name}=")
        added.append(f"{name}:{value}")
    return " ".join([q, *added]) if added else q


async def search_json(
    portal: Portal, q: str, page: int, size: int, filters: dict[str, str | None] | None = None
) -> tuple[int, bytes]:
    """(status, body) of ``/api/search``: the result page as JSON, or 400 (an unusable
    query) or 422 (a filter that is not one) and the reason."""
    try:
        query = with_filters(q, filters or {})
        found = await portal.pool.search_async(query, page, size)
    except FilterError as e:
        return 422, orjson.dumps({"error": str(e)})
    except _UNUSABLE as e:
        return 400, orjson.dumps({"error": str(e)})
    return 200, orjson.dumps(found.as_json())


def page_number(raw: str) -> int:
    """The search page's ``page``: a number from 1, anything else the first page."""
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


async def search_html(portal: Portal, template: Template, q: str, page: str) -> tuple[int, str]:
    """(status, HTML) of the search page ``/`` for the query ``q``, its page ``page``."""
    query = q.strip()[:MAX_QUERY_CHARS]  # (the box shows what was searched)
    setup = portal.problems()  # a job or store missing or empty: said above any answer
    if not query:
        return 200, template.render(query="", max_chars=MAX_QUERY_CHARS, setup=setup)
    try:
        found = await portal.pool.search_async(q.strip(), page_number(page), PAGE_SIZE)
    except _UNUSABLE as e:
        last = e.last if isinstance(e, PastLastPage) else None
        return 200, template.render(
            query=query, problem=str(e), last=last, max_chars=MAX_QUERY_CHARS, setup=setup
        )
    links = page_links(found.page, found.pages)
    return 200, template.render(
        query=query, found=found, links=links, max_chars=MAX_QUERY_CHARS, setup=setup
    )


def plain_params(query_string: bytes) -> dict[str, str] | None:
    """The query string's parameters as Starlette parses them; None when one is repeated
    (which of them counts is left to the framework)."""
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    params = dict(pairs)
    return params if len(params) == len(pairs) else None


def _plain_int(raw: str | None, default: int, most: int) -> int | None:
    """``raw`` as a number in [1, most] if written plainly (``default`` if absent), else
    None: pydantic judges any other spelling."""
    if raw is None:
        return default
    if _PLAIN_NUMBER.fullmatch(raw) is None:
        return None
    n = int(raw)
    return n if n <= most else None


class HotPaths:
    """ASGI middleware answering the plain GETs of ``/api/search`` and ``/`` itself."""

    def __init__(self, app: ASGIApp, portal: Portal, page: Template) -> None:
        self.app, self.portal, self.page = app, portal, page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path = scope["path"]
            if path == "/api/search" or path == "/":
                params = plain_params(scope["query_string"])
                if params is not None:
                    if path == "/":
                        status, html = await search_html(
                            self.portal, self.page, params.get("q", ""), params.get("page", "1")
                        )
                        return await _answer(send, status, html.encode(), HTML_TYPE, PAGE_HEADERS)
                    answer = await self._api(params)
                    if answer is not None:
                        return await _answer(send, *answer, JSON_TYPE)
        await self.app(scope, receive, send)

    async def _api(self, params: dict[str, str]) -> tuple[int, bytes] | None:
        q = params.get("q")
        page = _plain_int(params.get("page"), 1, 10**9)
        size = _plain_int(params.get("size"), PAGE_SIZE, MAX_PAGE_SIZE)
        if q is None or page is None or size is None:
            return None
        filters = {name: params.get(name) for name in FILTER_PARAMS}
        return await search_json(self.portal, q, page, size, filters)


async def _answer(
    send: Send, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None
) -> None:
    headers = [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", content_type.encode()),
    ]
    if extra:
        headers += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
