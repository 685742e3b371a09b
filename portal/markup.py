"""Crawled text into HTML: escaped always, the query terms of a snippet marked."""

from __future__ import annotations

import re
from urllib.parse import quote_plus

from markupsafe import Markup, escape

from srcrawl.indexer.search.snippets import Snippet


def marked(snippet: Snippet) -> Markup:
    """The snippet's text escaped, each query term in it as ``<mark>term</mark>``: the
    marks are the snippet's ranges, so whatever the page's text holds is only text."""
    # the pieces escaped one by one and joined as plain text: joining Markup escapes (and
    # copies) every piece again, most of the page's rendering time
    out = [
        f"<mark>{escape(piece)}</mark>" if term else escape(piece)
        for piece, term in snippet.pieces()
    ]
    return Markup("".join(out))


def page_links(page: int, pages: int, around: int = 3) -> list[int]:
    """The page numbers to link to: the first, the last and a few around ``page``."""
    shown = {1, pages, *range(max(1, page - around), min(pages, page + around) + 1)}
    return sorted(shown)


def link_target(url: str) -> str:
    """``url`` if it is an http(s) URL, else ``#``: a crawled ``javascript:`` link never runs."""
    return url if url.lower().startswith(("http://", "https://")) else "#"


_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
_ASCII_VALUE = {c: "+" if c == 32 else f"%{c:02X}" for c in range(128) if chr(c) not in _SAFE}
"""An ASCII character of a query string's value as urlencode writes it."""


def query_string(params: dict[str, str]) -> str:
    """``urlencode(params)``, ASCII values by one ``str.translate`` each: every hit of a
    results page has its links made so, and urlencode quotes byte by byte in Python."""
    return "&".join(
        f"{quote_plus(k, safe='')}="
        + (v.translate(_ASCII_VALUE) if v.isascii() else quote_plus(v, safe=""))
        for k, v in params.items()
    )


def stored_link(url: str, q: str = "") -> str:
    """The portal path of ``url``'s stored copy, ``q``'s words to be marked in it."""
    return "/stored?" + query_string({"url": url, "q": q} if q else {"url": url})


def site_query(host: str, q: str) -> str:
    """The search page of ``q`` within ``host`` (a grouped host's "more from" link)."""
    return "/?" + query_string({"q": f"site:{host} {q}"})


_FILTER = re.compile(r"(?<!\S)-?(?:site|lang|since|until):\S+")
LANGUAGE_NAMES = {"en": "English", "zh": "中文", "und": "not determined"}
"""How the results page names the languages most pages are in (others by their code)."""


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def search_link(q: str) -> str:
    """The search page of ``q``."""
    return "/?" + query_string({"q": q})


def with_filter(q: str, token: str) -> str | None:
    """The search page of ``q`` narrowed by ``token`` (``lang:zh``, or filters separated by
    spaces), or None when ``q`` has them already (a facet's link)."""
    typed = q.split()
    return None if all(t in typed for t in token.split()) else search_link(f"{q} {token}")


def active_filters(q: str) -> list[tuple[str, str]]:
    """Each filter typed in ``q`` (``lang:zh``, ``-site:…``) and the search page without it."""
    out = []
    for m in _FILTER.finditer(q):
        rest = " ".join((q[: m.start()] + q[m.end() :]).split())
        out.append((m.group(), search_link(rest) if rest else "/"))
    return out
