"""The stored copy of a page: its body read back from its WARC record, made safe to show.

A crawled page is hostile until shown otherwise: its body is parsed by lxml, whose
tree this module only rewrites (links, images, the query's words marked), and what
is sent is what nh3 (the Rust sanitizer ammonia) lets through. nh3 was chosen over
lxml_html_clean for what it is: an allow-list of tags and attributes over an HTML5
parser (html5ever, the one browsers follow), where lxml_html_clean strips a block-list
over libxml2's parse, the kind of cleaner whose bypasses (a browser parsing the output
otherwise than the cleaner did) have been found again and again. Scripts, styles,
event handlers, forms, ``<base>``, ``<meta>``, frames, objects and embeds are not on
the list, and a URL must be http(s) or one of the portal's own ``/stored`` paths.

On top of that the page is served under a policy that runs no script at all
(``script-src 'none'`` through ``default-src``, and ``sandbox``: an opaque origin,
no forms, no plugins), loads images only from the portal's origin, and sets no cookie:
nothing of the page can run, and no request leaves for the live web from it.

Links go to the stored copy of their target when the store holds its body, else to
the live page; an image is loaded from the store when stored (``/stored/file``),
else not at all (its ``alt`` text stays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urljoin

import lxml.html
import nh3
from lxml import etree
from markupsafe import Markup, escape

from srcrawl.core.urls import InvalidURL, canonicalize, fingerprint
from srcrawl.indexer.search import QueryError, Searcher
from srcrawl.indexer.search.snippets import snippet_terms
from srcrawl.indexer.search.terms import find_terms
from srcrawl.indexer.text import fold_aligned
from srcrawl.portal.markup import query_string, stored_link
from srcrawl.portal.search_pool import MAX_QUERY_CHARS
from srcrawl.slave.decode import decode_html, is_html, looks_binary, mime_type
from srcrawl.sql.pages import Page, page_body
from srcrawl.sql.store import Store
from srcrawl.warc.storage import LocalWarcStorage, WarcStorage

STORED_PATH = "/stored"
RAW_PATH = "/stored/raw"
FILE_PATH = "/stored/file"
WARC_TYPE = "application/warc"

# No script of any kind (default-src covers script-src), the page in an opaque origin
# (sandbox: no script, form, plugin or popup either), images from the portal only
STORED_CSP = (
    "default-src 'none'; script-src 'none'; object-src 'none'; img-src 'self'; "
    "style-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'; sandbox"
)
STORED_HEADERS = {
    "Content-Security-Policy": STORED_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
FILE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

_LIVE = ("http://", "https://")
_OWN = (f"{STORED_PATH}?", f"{FILE_PATH}?")
_NOT_SHOWN = frozenset({"script", "style", "textarea", "title", "noscript", "template"})
"""Elements whose text is never shown (removed, or not text): no query word is marked there."""
_LINKING = {"a": "href", "area": "href", "img": "src"}


def _safe_url(_tag: str, attribute: str, value: str) -> str | None:
    """nh3's last word on each attribute: a URL attribute keeps only what the rewrite made
    of it (an http(s) link, or a path of the stored copies)."""
    if attribute in ("href", "src", "cite") and not value.startswith(_LIVE + _OWN):
        return None
    return value


CLEANER = nh3.Cleaner(
    tags=set(nh3.ALLOWED_TAGS),
    clean_content_tags={"script", "style", "template", "textarea"},
    attributes={**nh3.ALLOWED_ATTRIBUTES, "*": {"lang", "dir", "title"}},
    attribute_filter=_safe_url,
    url_schemes={"http", "https"},
    link_rel="noopener noreferrer nofollow",
    strip_comments=True,
)
"""The allow-list every stored copy passes last (built once: its options are parsed once)."""


def raw_link(url: str) -> str:
    """The portal path of ``url``'s WARC record."""
    return f"{RAW_PATH}?" + query_string({"url": url})


def file_link(url: str) -> str:
    """The portal path of a stored image (served as its type, under a sandbox)."""
    return f"{FILE_PATH}?" + query_string({"url": url})


def _canonical(url: str) -> str | None:
    try:
        return canonicalize(url)
    except InvalidURL:
        return None


def warc_storage(store: Store) -> WarcStorage | None:
    """Where ``store``'s pages' WARC records are read (None: no WARC files known)."""
    texts = store.warc_texts
    if texts is None:
        return None
    if texts.storage is not None:
        return texts.storage
    return LocalWarcStorage(texts.root) if texts.root is not None else None


@dataclass
class Stored:
    """A stored page and what its body is: ``kind`` html, text or binary."""

    page: Page
    body: bytes
    kind: str

    @property
    def has_record(self) -> bool:
        return self.page.warc_file is not None and self.page.warc_offset is not None


def stored_page(store: Store, url: str) -> Stored | None:
    """The page of ``url`` with its stored body (None: not stored, or stored without one)."""
    canonical = _canonical(url)
    if canonical is None:
        return None
    pages = store.get_pages([fingerprint(canonical)], with_body=True)
    if not pages or (pages[0].warc_file is None and not pages[0].body):
        return None
    page = pages[0]
    storage = warc_storage(store)
    if page.warc_file is not None and storage is None:
        return None
    body = page_body(storage, page)  # type: ignore[arg-type]  # (no record: the store's copy)
    return Stored(page, body, body_kind(page.content_type, body))


def body_kind(content_type: str, body: bytes) -> str:
    """html (shown sanitized), text (shown as text) or binary (offered as a download)."""
    if is_html(content_type, body):
        return "html"
    mime = mime_type(content_type)
    if (mime.startswith("text/") or mime in ("", "application/json")) and not looks_binary(body):
        return "text"
    return "binary"


def raw_record(store: Store, url: str) -> bytes | None:
    """The WARC response record of ``url``'s page as stored (one gzip member), or None."""
    canonical = _canonical(url)
    if canonical is None:
        return None
    pages = store.get_pages([fingerprint(canonical)])
    storage = warc_storage(store)
    if not pages or storage is None:
        return None
    p = pages[0]
    if p.warc_file is None or p.warc_offset is None or p.warc_length is None:
        return None
    return storage.read(p.warc_file, p.warc_offset, p.warc_length)


def stored_file(store: Store, url: str) -> tuple[bytes, str] | None:
    """The body and type of a stored image (what ``/stored/file`` serves), else None."""
    found = stored_page(store, url)
    if found is None or not mime_type(found.page.content_type).startswith("image/"):
        return None
    return found.body, mime_type(found.page.content_type)


# -- the page itself ----------------------------------------------------------------------
def page_text(stored: Stored) -> str:
    """The body decoded (its declared charset, else as the crawl would have it)."""
    return decode_html(stored.body, stored.page.content_type)[0]


def html_copy(
    text: str,
    page_url: str,
    terms: list[str],
    stored_types: Callable[[list[int]], dict[int, str]],
    q: str = "",
) -> Markup:
    """The body of the HTML page ``text`` (fetched from ``page_url``) as it is safe to show:
    links rewritten (:func:`rewrite_links`), ``terms`` marked in its text, then sanitized."""
    try:
        doc = lxml.html.document_fromstring(text)
    except (etree.ParserError, ValueError):  # empty, or nothing but a comment
        return Markup("")
    rewrite_links(doc, page_url, stored_types, q)
    body = doc.find("body")
    root = body if body is not None else doc
    if terms:
        mark_terms(root, snippet_terms(root.text_content(), terms))
    return Markup(CLEANER.clean(lxml.html.tostring(root, encoding="unicode")))


def _base(doc: lxml.html.HtmlElement, page_url: str) -> str:
    """What the page's relative links are relative to: its ``<base href>`` when http(s),
    as the crawl resolved them (the element itself is never shown)."""
    for base in doc.iter("base"):
        href = (base.get("href") or "").strip()
        if href:
            joined = urljoin(page_url, href)
            return joined if joined.lower().startswith(_LIVE) else page_url
    return page_url


def rewrite_links(
    doc: lxml.html.HtmlElement,
    page_url: str,
    stored_types: Callable[[list[int]], dict[int, str]],
    q: str = "",
) -> None:
    """Point each link of ``doc`` at the stored copy of its target when the store holds
    its body (``stored_types``: fp -> Content-Type of those among the fps asked, one
    look-up for the page), else at the live page (an http(s) URL; any other link loses
    its ``href``); an image at the store when it is stored there, else nowhere."""
    base = _base(doc, page_url)
    found: list[tuple[lxml.html.HtmlElement, str, str | None]] = []
    for el in doc.iter(*_LINKING):
        attr = _LINKING[el.tag]
        raw = el.get(attr)
        if raw is None:
            continue
        target = urljoin(base, raw.strip()) if raw.strip() else None
        found.append((el, attr, _canonical(target) if target else None))
        el.attrib.pop("srcset", None)  # another list of URLs: not followed
    types = stored_types(list({fingerprint(c) for _el, _a, c in found if c is not None}))
    for el, attr, canonical in found:
        ctype = types.get(fingerprint(canonical)) if canonical else None
        if canonical is None:
            del el.attrib[attr]
        elif attr == "src":
            if ctype is not None and mime_type(ctype).startswith("image/"):
                el.set("src", file_link(canonical))
            else:
                del el.attrib["src"]  # nothing is fetched from the live web
        elif ctype is not None:
            el.set("href", stored_link(canonical, q))
        else:
            el.set("href", canonical)


def mark_terms(root: lxml.html.HtmlElement, terms: Iterable[str]) -> None:
    """Wrap each occurrence of ``terms`` in the text of ``root`` in ``<mark>``: found in text
    nodes only (never in a tag or an attribute), as the snippets find them (any case,
    whole tokens, Chinese anywhere)."""
    terms = list(terms)
    for el in list(root.iter()):  # (the marks added are not walked again)
        shown = isinstance(el.tag, str) and el.tag not in _NOT_SHOWN
        if shown and el.text:
            spans = find_terms(fold_aligned(el.text), terms)
            if spans:
                el.text, marks = _split(el.text, spans)
                for i, mark in enumerate(marks):
                    el.insert(i, mark)
        parent = el.getparent()
        if el is not root and el.tail and parent is not None and parent.tag not in _NOT_SHOWN:
            spans = find_terms(fold_aligned(el.tail), terms)
            if spans:
                el.tail, marks = _split(el.tail, spans)
                at = parent.index(el) + 1
                for i, mark in enumerate(marks):
                    parent.insert(at + i, mark)


def _split(text: str, spans: list[tuple[int, int]]) -> tuple[str, list[lxml.html.HtmlElement]]:
    """``text`` before the first span, and a ``<mark>`` per span (its tail the text up to
    the next one)."""
    marks = []
    for i, (start, end) in enumerate(spans):
        mark = lxml.html.Element("mark")
        mark.text = text[start:end]
        mark.tail = text[end : spans[i + 1][0] if i + 1 < len(spans) else len(text)]
        marks.append(mark)
    return text[: spans[0][0]], marks


def text_copy(text: str, terms: list[str]) -> Markup:
    """A text body escaped, ``terms`` marked: shown in a ``<pre>``, never as HTML."""
    if not terms:
        return Markup(escape(text))
    out, pos = [], 0
    for start, end in find_terms(fold_aligned(text), snippet_terms(text, terms), limit=10**6):
        out.append(f"{escape(text[pos:start])}<mark>{escape(text[start:end])}</mark>")
        pos = end
    out.append(str(escape(text[pos:])))
    return Markup("".join(out))


def stored_view(searcher: Searcher, url: str, q: str = "") -> tuple[int, dict[str, Any]]:
    """(status, the context of stored.html) of ``url``'s stored copy, ``q``'s words marked:
    404 and a page that says so when the store has no body of it."""
    query = q.strip()[:MAX_QUERY_CHARS]
    found = stored_page(searcher.store, url)
    if found is None:
        return 404, {"page": None, "url": url, "query": query}
    page = found.page
    terms = _terms(searcher, query)
    content: Markup | None = None
    if found.kind == "html":
        content = html_copy(page_text(found), page.url, terms, searcher.store.stored_types, query)
    elif found.kind == "text":
        content = text_copy(page_text(found), terms)
    when = datetime.fromtimestamp(page.fetched_at, timezone.utc)
    return 200, {
        "page": page,
        "kind": found.kind,
        "content": content,
        "size": len(found.body),
        "query": query,
        "fetched": when.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "fetched_iso": when.isoformat(timespec="seconds"),
        "raw": raw_link(page.url),
    }


def _terms(searcher: Searcher, query: str) -> list[str]:
    """The tokens the search looks for in ``query`` (none when it is unusable)."""
    if not query:
        return []
    try:
        units, _notes = searcher.units(query)
    except QueryError:
        return []
    return units.terms
