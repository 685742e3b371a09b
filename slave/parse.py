"""HTML → title, visible text, outgoing links and robots meta flags.

Two parsers produce the same :class:`ParsedPage` on ordinary pages:

- ``lxml`` (the fast path): libxml2's HTML parser builds the tree from UTF-8
  bytes; links and meta tags come from one C-filtered walk over the few tags
  that matter, the visible text from one compiled XSLT pass (libxslt) that
  also collapses ASCII whitespace. No Python work per text node; Python
  only finishes the rare other whitespace and resolves the links.
- ``bs4``: BeautifulSoup over Python's ``html.parser``. It shares no code
  with libxml2, which makes it the fallback when libxml2 gives up (an
  exception, or nesting deeper than its resource limit, where it drops the
  rest of the page) and the reference the fast path is tested against.

Links are resolved against ``<base href>`` when present, else the page URL,
in document order, without fragments and without duplicates. Only http and
https links survive; ``javascript:``, ``mailto:``, ``data:``, ``tel:``, same
document ``#fragment`` references and malformed URLs (``http://[::1/``) are
dropped without failing the page.
"""

from __future__ import annotations

import re
import threading
import warnings
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, XMLParsedAsHTMLWarning
from bs4.element import PreformattedString, Tag
from lxml import etree

from srcrawl.core.defaults import DEFAULT_FALLBACK_PARSE_CHARS

# Pages are whatever servers send: an XHTML page or a bare URL is no mistake here.
warnings.filterwarnings("ignore", category=XMLParsedAsHTMLWarning)
warnings.filterwarnings("ignore", category=MarkupResemblesLocatorWarning)

PARSERS = ("lxml", "bs4", "lexbor")
"""Names accepted by :func:`parse_html`'s ``parser`` argument."""

INVISIBLE_TAGS = ("script", "style", "noscript", "template", "head", "title", "iframe")
"""Elements whose content is never part of the visible text (the title is kept apart)."""

BLOCK_TAGS = (
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "br",
    "button",
    "caption",
    "dd",
    "details",
    "dialog",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "option",
    "p",
    "pre",
    "section",
    "select",
    "summary",
    "table",
    "tbody",
    "td",
    "textarea",
    "tfoot",
    "th",
    "thead",
    "tr",
    "ul",
)
"""Elements that separate words: their text never runs into the text around them."""

LINK_TAGS = ("a", "area", "frame", "iframe", "link")
"""Elements that carry outgoing links (``link`` only with rel next or alternate)."""

_SCAN_TAGS = (*LINK_TAGS, "base", "meta", "title")
_LXML_SCAN_TAGS = (*_SCAN_TAGS, "template")
_SCAN = frozenset(_SCAN_TAGS)
_INVISIBLE = frozenset(INVISIBLE_TAGS)
_BLOCKS = frozenset(BLOCK_TAGS)
MAX_ANCHOR_CHARS = 256
"""Characters of anchor text kept per linked URL (see :class:`ParsedPage`)."""

_LINK_ATTR = {"a": "href", "area": "href", "link": "href", "frame": "src", "iframe": "src"}
_FOLLOWED_LINK_RELS = frozenset({"next", "alternate"})

# WHATWG strips leading and trailing C0 controls and spaces from URLs.
_C0_SPACE = "".join(chr(i) for i in range(33))
# The shapes LinkResolver joins itself; anything else takes urljoin.
_PORT = r"(?::(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
_HOST = r"[A-Za-z0-9.\-]+" + _PORT
_CHARS = r"[A-Za-z0-9\-._~!$&'()*+,=:@/?%]*"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_ABSOLUTE = re.compile(rf"https?://{_HOST}(?:[/?]|\Z)")
_NETWORK_PATH = re.compile(rf"//{_HOST}(?:[/?]|\Z)")
_EMPTY_AUTHORITY = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//[/?#\\]|(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//\Z"
)
_SIMPLE_BASE = re.compile(rf"https?://{_HOST}(?:/{_CHARS})?\Z")
_REFRESH_URL = re.compile(r"""^\s*[0-9.]*\s*[;,]?\s*(?:url\s*=\s*)?['"]?([^'"]*)""", re.I)
# libxml2 turns NUL into U+FFFD; html.parser keeps it. Make bs4 agree.
_NUL_TO_FFFD = {0: "\ufffd"}
# Control characters have no place in page text (what libxml2 and html.parser
# keep of them differs, too).
_DROP_CONTROLS = dict.fromkeys([*range(0, 32), 127, *range(128, 160)])


@dataclass(slots=True)
class ParsedPage:
    """What a crawler keeps of an HTML page.

    ``links`` are absolute http(s) URLs without fragments, in document order,
    deduplicated, without ``rel=nofollow`` ones. ``anchors`` maps a URL of
    ``links`` to the visible text of the ``<a>`` elements of the page that
    point to it: an anchor's text nodes in document order, the ``alt`` of an
    ``<img>`` inside taken as text, invisible elements left out and block
    elements separating words as in ``text``; whitespace collapsed, the
    anchors of one URL joined with a single space in document order, cut at
    :data:`MAX_ANCHOR_CHARS` characters (trailing space dropped). A URL whose
    anchors have no text is absent. ``noindex`` and ``nofollow``
    come from ``<meta name="robots">``; links are listed even under
    ``nofollow`` (they still describe the page) and the caller decides
    whether to follow them. ``parser`` names the parser that produced the
    page; it does not take part in comparisons.
    """

    title: str = ""
    text: str = ""
    links: list[str] = field(default_factory=list)
    anchors: dict[str, str] = field(default_factory=dict)
    """For each URL of ``links``, the visible text of the ``<a>`` elements of the
    page pointing to it (an ``<img alt>`` inside counts as text), whitespace
    collapsed, several anchors to one URL joined by one space in document
    order, capped at 256 characters; URLs whose anchors have no text are absent."""
    noindex: bool = False
    nofollow: bool = False
    parser: str = field(default="", compare=False)


class LinkResolver:
    """Resolves hrefs against one base URL, fast for the shapes most links have.

    :meth:`resolve` returns exactly ``urljoin(base, href)`` without its
    fragment, or None when that is not an absolute http(s) URL with a host
    (and a valid port), when ``urljoin`` rejects the href, for a
    same-document ``#fragment``, and for an href with an empty authority
    (``http://``, ``//``, ``http:///x``), which ``urljoin`` would read as the
    base URL itself. Simple absolute, scheme-relative, root-relative,
    query-only and relative hrefs (leading ``./`` and ``../`` included) are
    joined by a few string tests each (:meth:`_join`), because ``urljoin``
    costs several microseconds a link; every other shape goes through
    ``urljoin``. :meth:`resolve_all` does the same for a whole page.
    """

    __slots__ = ("_base", "_dir", "_origin", "_parents", "_query_base", "_scheme")

    def __init__(self, base_url: str) -> None:
        self._base = base_url
        self._scheme = self._origin = self._dir = self._query_base = ""
        self._parents: list[str] = []  # the base directory, its parent, …, the root
        if not _SIMPLE_BASE.match(base_url):
            return  # anything unusual about the base: every href takes urljoin
        parts = urlsplit(base_url)
        self._scheme = parts.scheme
        self._origin = f"{parts.scheme}://{parts.netloc}"
        path = parts.path or "/"
        # urljoin drops empty segments and resolves dot segments of the base
        # path when it joins a relative path; only a base path free of both
        # joins by concatenation.
        if "//" not in path and "/." not in path:
            self._dir = self._origin + path[: path.rfind("/") + 1]
            self._query_base = self._origin + parts.path
            directory = path[: path.rfind("/") + 1]
            while True:
                self._parents.append(self._origin + directory)
                if directory == "/":
                    break
                directory = directory[: directory.rfind("/", 0, -1) + 1]

    def resolve_all(
        self, hrefs: list[str], resolved: dict[str, str | None] | None = None
    ) -> list[str]:
        """The resolved links of ``hrefs``, in order, without None and duplicates.

        ``resolved``, when given (empty), receives each distinct href's own result
        (a same-document ``#fragment`` is left out: None by ``resolved.get``).

        Equals :meth:`resolve` applied to each href and joins by the same
        :meth:`_join`. This loop runs for every link of every page, so it
        tests for the characters urljoin treats specially once for the whole
        page, and makes :func:`_joinable`'s test inline: calls are what costs here.
        Its one store per href is ``resolved``'s; the links are deduplicated from it after.
        """
        if resolved is None:
            resolved = {}
        unique = dict.fromkeys(hrefs)
        page_plain = _without_odd_characters("".join(unique))
        join, resolve = self._join, self.resolve
        for original in unique:
            href = original
            if "#" in original:
                cut = original.find("#")
                if cut == 0:
                    continue  # same-document reference
                href = original[:cut]
            last = href[-1:]
            if (
                last > " "
                and last != "?"
                and href[0] > " "
                and (page_plain or _without_odd_characters(href))
            ):
                url = join(href)
            else:
                url = resolve(original)  # spaces or controls to strip first, or empty
            resolved[original] = url
        return list(dict.fromkeys(filter(None, resolved.values())))

    def resolve(self, href: str) -> str | None:
        """The absolute http(s) URL ``href`` points to, without fragment, or None."""
        href = href.strip(_C0_SPACE)
        cut = href.find("#")
        if cut >= 0:
            if cut == 0:
                return None  # same-document reference
            href = href[:cut]
        elif not href:
            return None  # the page itself
        return self._join(href) if _joinable(href) else self._slow(href)

    def _join(self, href: str) -> str | None:
        """:meth:`resolve` of a :func:`_joinable` href: by its shape, else by urljoin.

        The shapes most links have (``/path``, ``name``) are joined right here.
        """
        first = href[0]
        if first == "/":
            if href[1:2] == "/":
                return self._join_network_path(href)
            if self._origin and "/." not in href:
                return self._origin + href
            return self._join_root_dots(href)
        if first == "?":
            return self._query_base + href if self._query_base else self._slow(href)
        if first == ".":
            return self._join_dots(href)
        if ":" in href:
            if _ABSOLUTE.match(href):
                return href  # an absolute http(s) link, as most with a ":" are
            scheme = _SCHEME.match(href)
            if scheme is not None:
                return self._join_scheme(href, scheme.group(1))
        if self._dir and "/." not in href and "//" not in href:
            return self._dir + href  # a relative path (a ":" may come after its scheme-less start)
        return self._slow(href)  # dot or empty segments inside, or an unusual base

    def _join_network_path(self, href: str) -> str | None:
        """A scheme-relative href: ``//host/path``."""
        if self._scheme and _NETWORK_PATH.match(href):
            return self._scheme + ":" + href
        return self._slow(href)

    def _join_root_dots(self, href: str) -> str | None:
        """A root-relative href with dot segments: ``/a/../b``."""
        path, sep, query = href.partition("?")
        if self._origin and "//" not in path:
            return self._origin + _root_dots(path) + sep + query
        return self._slow(href)

    def _join_dots(self, href: str) -> str | None:
        """Leading ``./`` and ``../`` segments, the usual dot segments of a link."""
        start = up = 0
        end = len(href)
        while start < end and href[start] == ".":
            if href.startswith("./", start):
                start += 2
            elif href.startswith("../", start):
                start += 3
                up += 1
            else:
                return self._slow(href)  # "." or ".." as the last segment, or ".name"
        rest = href[start:]
        parents = self._parents
        if not parents or rest[:1] == "/" or "/." in rest or "//" in rest or ":" in rest:
            return self._slow(href)  # empty or dot segments inside, or a scheme
        return parents[min(up, len(parents) - 1)] + rest

    def _join_scheme(self, href: str, scheme: str) -> str | None:
        """An href that starts with a scheme, not a plain absolute http(s) URL."""
        name = scheme.lower()
        if name != "http" and name != "https":
            return None  # mailto:, javascript:, data:, tel:, ftp: ...
        if scheme != name and self._scheme:
            # "HTTP://": urljoin lowers the scheme when it is the base's, and
            # returns any other URL as it is
            lowered = name + href[len(name) :]
            if _ABSOLUTE.match(lowered):
                return lowered if name == self._scheme else href
        return self._slow(href)

    def _slow(self, href: str) -> str | None:
        try:
            if _EMPTY_AUTHORITY.match(href):
                return None  # urljoin would read "http://" as the base itself
            url = urljoin(self._base, href)
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                return None
            parts.port  # noqa: B018 -- raises ValueError for a port out of range
        except ValueError:
            return None
        cut = url.find("#")
        return url if cut < 0 else url[:cut]


def _without_odd_characters(text: str) -> bool:
    """No tab, newline or ``;``: urljoin removes the first anywhere and may drop ``;`` params."""
    return not ("\t" in text or "\n" in text or "\r" in text or ";" in text)


def _joinable(href: str) -> bool:
    """Whether :meth:`LinkResolver._join` may take ``href`` (no fragment, the first
    character past the space): urljoin strips spaces and controls at the end and
    drops an empty query (``a?``)."""
    last = href[-1]
    return last > " " and last != "?" and _without_odd_characters(href)


def _root_dots(path: str) -> str:
    """A root-relative path without empty segments, its dot segments resolved as urljoin does."""
    segments = path.split("/")
    resolved: list[str] = []
    for segment in segments:
        if segment == "..":
            if resolved:
                resolved.pop()
        elif segment != ".":
            resolved.append(segment)
    if segments[-1] in (".", ".."):
        resolved.append("")
    joined = "/".join(resolved) or "/"
    return joined if joined[0] == "/" else "/" + joined


def _rel_tokens(value: object) -> set[str]:
    if not value:
        return set()
    if isinstance(value, str):
        return set(value.lower().split())
    return {str(v).lower() for v in value}  # type: ignore[attr-defined]


def _robots_flags(content: str) -> tuple[bool, bool]:
    tokens = set(content.lower().replace(",", " ").split())
    if "none" in tokens:
        return True, True
    return "noindex" in tokens, "nofollow" in tokens


def _refresh_target(content: str) -> str | None:
    m = _REFRESH_URL.match(content)
    target = m.group(1).strip() if m else ""
    return target or None


class _PageBuilder:
    """Collects what one walk over the link-bearing elements finds."""

    __slots__ = ("a_hrefs", "a_texts", "base_href", "hrefs", "nofollow", "noindex", "title")

    def __init__(self) -> None:
        self.title: str | None = None
        self.base_href: str | None = None
        self.hrefs: list[str] = []
        # The <a> elements, side by side: each one's href (None: not followed)
        # and its text, whitespace collapsed. The lxml walk lists every <a>.
        self.a_hrefs: list[str | None] = []
        self.a_texts: list[str] = []
        self.noindex = False
        self.nofollow = False

    def element(self, tag: str, get) -> None:  # type: ignore[no-untyped-def]
        """One link, base or meta element of the walk; ``get(attr)`` reads an attribute."""
        attr = _LINK_ATTR.get(tag)
        if attr is not None:
            href = get(attr)
            if href is None:
                return
            rel = _rel_tokens(get("rel"))
            if "nofollow" in rel:
                return
            if tag == "link" and (not rel & _FOLLOWED_LINK_RELS or "stylesheet" in rel):
                return
            self.hrefs.append(href)
        elif tag == "meta":
            name = get("name")
            if name is not None and name.strip().lower() == "robots":
                noindex, nofollow = _robots_flags(get("content") or "")
                self.noindex |= noindex
                self.nofollow |= nofollow
            else:
                equiv = get("http-equiv")
                if equiv is not None and equiv.strip().lower() == "refresh":
                    target = _refresh_target(get("content") or "")
                    if target:
                        self.hrefs.append(target)
        elif tag == "base" and self.base_href is None:
            self.base_href = get("href")

    def resolver(self, base_url: str) -> LinkResolver:
        """The resolver of the page's links: ``<base href>`` when valid, else ``base_url``."""
        resolver = LinkResolver(base_url)
        if self.base_href is not None:
            base = resolver.resolve(self.base_href)
            if base is not None:
                resolver = LinkResolver(base)
        return resolver

    def build(self, text: str, base_url: str, parser: str) -> ParsedPage:
        resolved: dict[str, str | None] = {}
        links = self.resolver(base_url).resolve_all(self.hrefs, resolved)
        return ParsedPage(
            title=_collapse(self.title or ""),
            text=text,
            links=links,
            anchors=_anchor_texts(self.a_hrefs, self.a_texts, resolved) if links else {},
            noindex=self.noindex,
            nofollow=self.nofollow,
            parser=parser,
        )


def _anchor_texts(
    hrefs: list[str | None], texts: list[str], resolved: dict[str, str | None]
) -> dict[str, str]:
    """URL -> the text of its anchors, joined in document order and capped.

    ``hrefs`` and ``texts``: each anchor's href (None: not followed) and its
    collapsed text; ``resolved``: href -> its link (None: not one), as the
    page's links were resolved.
    """
    joined: dict[str, str] = {}
    get = joined.get
    for url, text in zip(map(resolved.get, hrefs), texts, strict=True):  # type: ignore[arg-type]
        if text and url is not None:
            before = get(url)
            joined[url] = text if before is None else f"{before} {text}"
    # one test for the page; the loop below only on the rare page that needs it
    if joined and (
        max(map(len, joined.values())) > MAX_ANCHOR_CHARS
        or not "".join(joined.values()).isprintable()
    ):
        for url, text in joined.items():
            if len(text) > MAX_ANCHOR_CHARS or not text.isprintable():
                joined[url] = _collapse(text)[:MAX_ANCHOR_CHARS].rstrip()
    return joined


def _collapse(text: str) -> str:
    """Whitespace runs to one space, no leading or trailing space, no control characters."""
    text = " ".join(text.split())
    if not text.isprintable():  # rare: also false for format characters such as U+200B
        cleaned = text.translate(_DROP_CONTROLS)
        if cleaned != text:
            text = " ".join(cleaned.split())
    return text


def _normalize_text(text: str) -> str:
    """:func:`_collapse` of text whose runs of space, tab, CR and LF are single spaces already.

    No-break and ideographic spaces, the usual other ones, split the text
    where they are, which is rarely. The result is exact when printable;
    anything else (control characters, other Unicode spaces, format
    characters) takes :func:`_collapse`.
    """
    ideographic = "\u3000" in text
    if ideographic or "\xa0" in text:
        if ideographic:
            text = text.replace("\u3000", "\xa0")
        # Inside a piece whitespace is single spaces already; only its ends may have one.
        pieces = [piece.strip(" ") for piece in text.split("\xa0")]
        text = " ".join([piece for piece in pieces if piece])
    return text if text.isprintable() else _collapse(text)


# --- lxml ------------------------------------------------------------------


# After the text, the same pass writes the text of every <a> in document
# order (an <img>'s alt as text), each after this mark; a page that holds
# the mark itself has its anchors read by _lxml_anchor_text instead. Every
# <a>, not only those with an href: a [@href] predicate costs libxslt an
# XPath evaluation per element, more than the whole anchor pass otherwise.
_ANCHOR_MARK = "\ue000"

# The visible text, block-aware, in one C pass: invisible elements produce
# nothing, block elements a space on either side, text nodes themselves; the
# whole then goes through XPath's normalize-space, which collapses runs of
# space, tab, CR and LF in C (far cheaper than splitting the text in Python).
# Other whitespace and control characters are left to _normalize_text.
_TEXT_XSLT = f"""<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
<xsl:output method="text" encoding="utf-8"/>
<xsl:param name="anchors" select="true()"/>
<xsl:template match="/">
<xsl:variable name="text"><xsl:apply-templates/></xsl:variable>
<xsl:value-of select="normalize-space($text)"/>
<xsl:if test="$anchors">
<xsl:for-each select="//a">
<xsl:text>{_ANCHOR_MARK}</xsl:text>
<xsl:apply-templates mode="anchor"/>
</xsl:for-each>
</xsl:if>
</xsl:template>
<xsl:template match="{"|".join(INVISIBLE_TAGS)}"/>
<xsl:template match="{"|".join(INVISIBLE_TAGS)}" mode="anchor"/>
<xsl:template match="{"|".join(BLOCK_TAGS)}">
<xsl:text> </xsl:text><xsl:apply-templates/><xsl:text> </xsl:text>
</xsl:template>
<xsl:template match="{"|".join(BLOCK_TAGS)}" mode="anchor">
<xsl:text> </xsl:text><xsl:apply-templates mode="anchor"/><xsl:text> </xsl:text>
</xsl:template>
<xsl:template match="img" mode="anchor">
<xsl:text> </xsl:text><xsl:value-of select="@alt"/><xsl:text> </xsl:text>
</xsl:template>
</xsl:stylesheet>""".encode()

_local = threading.local()


def _lxml_tools() -> tuple[etree.HTMLParser, etree.XSLT]:
    # Parser and XSLT objects are not thread-safe; each thread that parses gets its own.
    tools = getattr(_local, "tools", None)
    if tools is None:
        parser = etree.HTMLParser(
            encoding="utf-8",
            remove_comments=True,
            remove_pis=True,
            no_network=True,
            recover=True,
            collect_ids=False,
            # Pages are capped by the fetcher; the default limits would drop
            # text nodes over 10 MB and everything nested deeper than 256.
            huge_tree=True,
        )
        tools = _local.tools = (parser, etree.XSLT(etree.XML(_TEXT_XSLT)))
    return tools


class _LxmlGaveUp(Exception):
    """libxml2 stopped before the end of the document (a resource limit)."""


# Fatal libxml2 errors after which the tree misses the rest of the page.
_GAVE_UP = frozenset({"ERR_RESOURCE_LIMIT", "ERR_NO_MEMORY", "ERR_INTERNAL_ERROR"})


def _lxml_walk(root: etree._Element) -> _PageBuilder | None:
    """The link, base, meta and title elements of the tree; None at a ``<template>``."""
    builder = _PageBuilder()
    hrefs, anchors = builder.hrefs, builder.a_hrefs
    for el in root.iter(*_LXML_SCAN_TAGS):
        tag = el.tag
        if tag == "a":  # the bulk: inlined
            href = el.get("href")
            if href is not None:
                rel = el.get("rel")
                if rel is not None and "nofollow" in rel.lower().split():
                    href = None
                else:
                    hrefs.append(href)
            anchors.append(href)  # its text comes from the XSLT pass
        elif tag == "title":
            if builder.title is None:
                builder.title = "".join(el.itertext())
        elif tag == "template":
            return None
        else:
            builder.element(tag, el.get)
    return builder


def _utf8_bytes(html: str, utf8: bytes | None) -> bytes:
    """``utf8`` when the caller has the page's UTF-8 bytes, else ``html`` encoded."""
    if utf8 is not None:
        return utf8
    try:
        return html.encode("utf-8")
    except UnicodeEncodeError:
        return html.encode("utf-8", "replace")  # lone surrogates


def _lxml_anchor_text(a: etree._Element) -> str:
    """The visible text of an ``<a>`` with child elements, by the rules of the page text."""
    parts = [a.text or ""]
    hidden = None  # the invisible element being walked through
    for event, node in etree.iterwalk(a, events=("start", "end")):
        if node is a:
            continue
        tag = node.tag
        if event == "start":
            if hidden is not None:
                continue
            if tag in _INVISIBLE:
                hidden = node
                continue
            if tag in _BLOCKS:
                parts.append(" ")
            elif tag == "img":
                parts.append(f" {node.get('alt') or ''} ")
            parts.append(node.text or "")
            continue
        if node is hidden:
            hidden = None
        elif hidden is None and tag in _BLOCKS:
            parts.append(" ")
        if hidden is None and node.tail:
            parts.append(node.tail)
    return "".join(parts)


def _split_anchors(marked: str) -> list[str]:
    """The texts after each mark of ``marked``, whitespace collapsed.

    One collapse over all of them, then the spaces beside the marks dropped:
    the same as collapsing each text, in a few C passes instead of one a text.
    """
    mark = _ANCHOR_MARK
    collapsed = " ".join(marked.split()).replace(" " + mark, mark).replace(mark + " ", mark)
    return collapsed.split(mark)


def _lxml_text_and_anchors(
    root: etree._Element, text_of: etree.XSLT, a_hrefs: list[str | None]
) -> tuple[str, list[str]]:
    """The page text (before :func:`_normalize_text`) and each ``<a>``'s collapsed text."""
    out = bytes(text_of(root)).decode("utf-8")
    cut = out.find(_ANCHOR_MARK)
    if cut < 0:
        if not a_hrefs:
            return out, []
    else:
        anchors = _split_anchors(out[cut + 1 :])
        if len(anchors) == len(a_hrefs):
            return out[:cut], anchors
    # The page holds the mark itself: the text alone, and the anchors walked.
    text = bytes(text_of(root, anchors="false()")).decode("utf-8")
    anchors = [
        " ".join(_lxml_anchor_text(a).split()) if href is not None else ""
        for a, href in zip(root.iter("a"), a_hrefs, strict=True)
    ]
    return text, anchors


def _parse_lxml(html: str, base_url: str, utf8: bytes | None = None) -> ParsedPage:
    data = _utf8_bytes(html, utf8)
    parser, text_of = _lxml_tools()
    # Bytes, not str: libxml2 refuses str input that carries an XML encoding
    # declaration, and parsing UTF-8 bytes is no slower.
    root = etree.fromstring(data, parser)
    for error in parser.error_log.filter_from_fatals():
        if error.type_name in _GAVE_UP:
            raise _LxmlGaveUp(error.message)
    if root is None:  # nothing but whitespace
        return _PageBuilder().build("", base_url, "lxml")
    builder = _lxml_walk(root)
    if builder is None:
        # Template content is inert: never shown, its links never followed.
        etree.strip_elements(root, "template", with_tail=False)
        builder = _lxml_walk(root)
        assert builder is not None
    text, builder.a_texts = _lxml_text_and_anchors(root, text_of, builder.a_hrefs)
    return builder.build(_normalize_text(text), base_url, "lxml")


# --- BeautifulSoup ------------------------------------------------------------


class _Bs4Walk:
    """Where the walk of :func:`_bs4_walk` is: the open elements and the text so far.

    The text of the ``<a>`` being walked through is gathered apart, by the
    same rules, since an anchor may sit inside an element the page text hides.
    """

    __slots__ = (
        "anchor",
        "anchor_at",
        "anchor_hidden",
        "anchor_parts",
        "builder",
        "hidden",
        "inert",
        "open_tags",
        "parts",
    )

    def __init__(self, builder: _PageBuilder) -> None:
        self.builder = builder
        self.parts: list[str] = []
        self.open_tags: list[Tag] = []  # the ancestors of the current node
        self.hidden: Tag | None = None  # the invisible element being walked through
        self.inert: Tag | None = None  # the <template> being walked through
        self.anchor: Tag | None = None  # the followed <a> being walked through
        self.anchor_at = 0  # its entry in builder.a_texts
        self.anchor_parts: list[str] = []
        self.anchor_hidden: Tag | None = None  # the invisible element inside it

    def close_up_to(self, parent: Tag | None) -> None:
        """Leave the elements the walk has come out of, up to ``parent``."""
        open_tags = self.open_tags
        while open_tags and open_tags[-1] is not parent:
            closed = open_tags.pop()
            if self.anchor is not None:
                self.leave_in_anchor(closed)
            if closed is self.inert:
                self.inert = None
            if closed is self.hidden:
                self.hidden = None
            elif self.hidden is None and closed.name in _BLOCKS:
                self.parts.append(" ")

    def enter(self, tag: Tag) -> None:
        """Enter an element: read it if it bears links, start hiding or spacing its text."""
        self.open_tags.append(tag)
        name = tag.name
        if self.anchor is not None and self.anchor_hidden is None:
            self.enter_in_anchor(tag, name)
        if self.inert is None:
            if name == "template":
                self.inert = tag
            elif name == "title":
                if self.builder.title is None:
                    self.builder.title = tag.get_text()
            elif name in _SCAN:
                followed = len(self.builder.hrefs)
                self.builder.element(name, _bs4_getter(tag))
                if name == "a" and len(self.builder.hrefs) > followed:
                    self.start_anchor(tag)
        if self.hidden is None:
            if name in _INVISIBLE:
                self.hidden = tag
            elif name in _BLOCKS:
                self.parts.append(" ")

    def start_anchor(self, tag: Tag) -> None:
        self.end_anchor()  # html.parser nests an <a> in an open one; libxml2 closes that
        self.anchor, self.anchor_parts, self.anchor_hidden = tag, [], None
        self.anchor_at = len(self.builder.a_texts)
        self.builder.a_hrefs.append(self.builder.hrefs[-1])
        self.builder.a_texts.append("")

    def enter_in_anchor(self, tag: Tag, name: str) -> None:
        if name in _INVISIBLE:
            self.anchor_hidden = tag
        elif name in _BLOCKS:
            self.anchor_parts.append(" ")
        elif name == "img":
            alt = tag.get("alt")
            self.anchor_parts.append(f" {alt if isinstance(alt, str) else ''} ")

    def leave_in_anchor(self, closed: Tag) -> None:
        if closed is self.anchor:
            self.end_anchor()
        elif closed is self.anchor_hidden:
            self.anchor_hidden = None
        elif self.anchor_hidden is None and closed.name in _BLOCKS:
            self.anchor_parts.append(" ")

    def end_anchor(self) -> None:
        if self.anchor is not None:
            self.builder.a_texts[self.anchor_at] = " ".join("".join(self.anchor_parts).split())
            self.anchor = None

    def text(self) -> str:
        """The text of the finished walk, closing the elements still open."""
        self.end_anchor()
        if self.hidden is None:
            self.parts.extend(" " for tag in self.open_tags if tag.name in _BLOCKS)
        return "".join(self.parts)


def _bs4_walk(soup: BeautifulSoup, builder: _PageBuilder) -> str:
    """Feed the link-bearing elements to ``builder`` and return the visible text.

    One linear walk with the XSLT's text rules. Mutating the soup instead
    (inserting separators, decomposing invisible tags) costs time
    proportional to the nesting depth per change, which a hostile page turns
    into minutes.
    """
    walk = _Bs4Walk(builder)
    open_tags, parts = walk.open_tags, walk.parts
    for node in soup.descendants:
        if open_tags and open_tags[-1] is not node.parent:
            walk.close_up_to(node.parent)
        if isinstance(node, Tag):
            walk.enter(node)
        elif not isinstance(node, PreformattedString):
            if walk.hidden is None:
                parts.append(node)  # type: ignore[arg-type]
            if walk.anchor is not None and walk.anchor_hidden is None:
                walk.anchor_parts.append(node)  # type: ignore[arg-type]
    return walk.text()


def _bs4_getter(tag: Tag):  # type: ignore[no-untyped-def]
    def get(name: str) -> str | None:
        value = tag.get(name)
        if value is None or isinstance(value, str):
            return value
        return " ".join(value)  # multi-valued attributes such as rel

    return get


def _parse_bs4(html: str, base_url: str) -> ParsedPage:
    try:
        html.encode("utf-8")
    except UnicodeEncodeError:
        html = html.encode("utf-8", "replace").decode("utf-8")
    soup = BeautifulSoup(html.translate(_NUL_TO_FFFD), "html.parser")
    builder = _PageBuilder()
    text = _bs4_walk(soup, builder)
    return builder.build(_collapse(text), base_url, "bs4")


def parse_html(
    html: str, base_url: str, parser: str = "lxml", *, utf8: bytes | None = None
) -> ParsedPage:
    """Parse ``html`` fetched from ``base_url``; never raises for any page content.

    ``parser="lxml"`` takes the fast path and falls back to BeautifulSoup when
    libxml2 fails or stops early (on the page's first
    ``DEFAULT_FALLBACK_PARSE_CHARS`` characters only: such a page is hostile
    or broken, and the fallback is slow); ``parser="bs4"`` uses BeautifulSoup only.
    The result's ``parser`` field says which one produced it. An unknown
    ``parser`` name is a ValueError. ``utf8``: ``html`` encoded as UTF-8, when
    the caller has it (the fetched bytes, see
    :func:`~srcrawl.slave.decode.utf8_source`); the lxml path parses it
    instead of encoding ``html`` again.
    """
    if parser not in PARSERS:
        raise ValueError(f"unknown parser {parser!r}; expected one of {', '.join(PARSERS)}")
    if parser == "lexbor":
        from srcrawl.slave.parse_lexbor import LEXBOR_ERRORS, parse_lexbor

        try:
            return parse_lexbor(html, base_url, utf8)
        except LEXBOR_ERRORS:
            html = html[:DEFAULT_FALLBACK_PARSE_CHARS]
    elif parser == "lxml":
        try:
            return _parse_lxml(html, base_url, utf8)
        except (etree.LxmlError, ValueError, _LxmlGaveUp):
            # what libxml2 cannot take is hostile or broken: bound the slow fallback
            html = html[:DEFAULT_FALLBACK_PARSE_CHARS]
    return _parse_bs4(html, base_url)
