"""Crawled text into HTML: escaped always, the query terms of a snippet marked."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from markupsafe import Markup, escape

from srcrawl.indexer.search.snippets import MARK_CLOSE, MARK_OPEN

_MARKED = re.compile(f"{re.escape(MARK_OPEN)}([^{MARK_OPEN}{MARK_CLOSE}]*){re.escape(MARK_CLOSE)}")


def marked(snippet: str, terms: Sequence[str]) -> Markup:
    """The snippet escaped, each «term» of ``terms`` as ``<mark>term</mark>``.

    Text the page itself had between « and » stays as it was: only a query term is marked.
    """
    wanted = {unicodedata.normalize("NFKC", t).casefold() for t in terms}
    # the pieces escaped one by one and joined as plain text: joining Markup escapes (and
    # copies) every piece again, most of the page's rendering time
    out, at = [], 0
    for m in _MARKED.finditer(snippet):
        if unicodedata.normalize("NFKC", m.group(1)).casefold() not in wanted:
            continue
        out += [escape(snippet[at : m.start()]), "<mark>", escape(m.group(1)), "</mark>"]
        at = m.end()
    out.append(escape(snippet[at:]))
    return Markup("".join(out))


def page_links(page: int, pages: int, around: int = 3) -> list[int]:
    """The page numbers to link to: the first, the last and a few around ``page``."""
    shown = {1, pages, *range(max(1, page - around), min(pages, page + around) + 1)}
    return sorted(shown)


def link_target(url: str) -> str:
    """``url`` if it is an http(s) URL, else ``#``: a crawled ``javascript:`` link never runs."""
    return url if url.lower().startswith(("http://", "https://")) else "#"
