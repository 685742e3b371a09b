"""The lexbor parse path: HTML → :class:`~srcrawl.slave.parse.ParsedPage` through selectolax.

lexbor builds an HTML5 tree in C faster than libxml2 does, and everything
per page that costs time happens in C calls over the whole tree: one CSS
query for the link, base, meta and title elements (in document order), one
for the block elements, one tree walk for the text. Python touches only the
elements that matter (links, blocks) and never a text node.

It keeps the lxml path's meaning exactly, as that path is tested against
BeautifulSoup: the same invisible and block elements, the same link rules
(:class:`~srcrawl.slave.parse._PageBuilder`), the same resolver, the same
whitespace collapsing. Where HTML5 tree building differs from libxml2's on
broken markup, the page may differ; on well-formed pages it does not.

The text is the tree's text once the invisible elements are gone and a
space stands on either side of every block element: a text node inserted
next to each block costs one call per block, not one per text node.
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser, LexborNode, SelectolaxError, create_tag

from srcrawl.slave.parse import (
    _BLOCKS,
    BLOCK_TAGS,
    INVISIBLE_TAGS,
    LINK_TAGS,
    LinkResolver,
    ParsedPage,
    _collapse,
    _PageBuilder,
    _utf8_bytes,
)

LEXBOR_ERRORS = (SelectolaxError, MemoryError, ValueError)
"""What lexbor raises on a page it cannot take (the caller falls back to BeautifulSoup)."""

ANCHOR_CHARS = 256
"""The most characters of anchor text kept for one URL of a page."""

# The ids lexbor gives the tags that matter (fixed for every tag HTML knows).
_IDS = {
    tag: create_tag(tag).tag_id
    for tag in (*BLOCK_TAGS, *INVISIBLE_TAGS, *LINK_TAGS, "base", "meta")
}
_A = _IDS["a"]
_TITLE = _IDS["title"]
_SCAN = {_IDS[tag]: tag for tag in (*LINK_TAGS, "base", "meta") if tag != "a"}
# body's spaces would only ever be at the ends of the text: no need to insert them
_BLOCK_IDS = frozenset(_IDS[tag] for tag in BLOCK_TAGS if tag != "body")
_INVISIBLE_IDS = frozenset(_IDS[tag] for tag in INVISIBLE_TAGS)
# What makes an anchor's text more than its plain text: an invisible element
# inside (only these can hold markup in an HTML5 tree, or be inside an <a>)
# or an image whose alt counts as text.
_ODD_ANCHOR_QUERY = ", ".join(
    f"a {tag}" for tag in ("script", "style", "noscript", "iframe", "title", "img[alt]")
)
_INVISIBLE = frozenset(INVISIBLE_TAGS)
_FFFD = "\ufffd".encode()


def _source(html: str, utf8: bytes | None) -> bytes:
    """The page as UTF-8 bytes, NUL as U+FFFD (as libxml2 reads it; HTML5 drops NUL in text)."""
    data = _utf8_bytes(html, utf8)
    if b"\x00" in data:
        data = data.replace(b"\x00", _FFFD)
    return data


class _Walk:
    """What one pass over the elements of the tree finds, in document order."""

    __slots__ = ("anchors", "builder", "invisible")

    def __init__(self) -> None:
        self.builder = _PageBuilder()
        self.anchors: list[tuple[LexborNode, str]] = []  # every <a href>, nofollow or not
        self.invisible: list[LexborNode] = []


def _walk(tree: LexborHTMLParser) -> _Walk:
    """Read the link, base, meta and title elements; put a space on either side of each block.

    One C query lists the elements; tags are told apart by lexbor's integer
    ids, which costs less than any selector list of forty tags.
    """
    walk = _Walk()
    builder, anchors, invisible = walk.builder, walk.anchors, walk.invisible
    hrefs = builder.hrefs
    for node in tree.css("*"):
        tag = node.tag_id
        if tag in _BLOCK_IDS:
            node.insert_before(" ")
            node.insert_after(" ")
        elif tag == _A:  # the bulk: inlined
            get = node.attrs.get
            href = get("href")
            if href is not None:
                anchors.append((node, href))
                rel = get("rel")
                if rel is None or "nofollow" not in rel.lower().split():
                    hrefs.append(href)
        elif tag in _INVISIBLE_IDS:
            invisible.append(node)
            if tag == _TITLE:
                if builder.title is None:
                    builder.title = node.text()
            elif tag in _SCAN:
                builder.element(_SCAN[tag], node.attrs.get)  # iframe
        elif tag in _SCAN:
            builder.element(_SCAN[tag], node.attrs.get)
    return walk


def _odd_text(node: LexborNode) -> str:
    """The visible text of ``node`` by a walk: invisible elements skipped, alt of images kept."""
    parts: list[str] = []
    stack = [node.first_child]
    while stack:
        child = stack.pop()
        if child is None:
            continue
        stack.append(child.next)
        if child.is_text_node:
            parts.append(child.text_content or "")
        elif child.is_element_node:
            tag = child.tag
            if tag == "img":
                parts.append(child.attrs.get("alt") or "")
            elif tag not in _INVISIBLE:
                spaced = tag in _BLOCKS
                if spaced:
                    parts.append(" ")
                stack.append(child.first_child)
    return "".join(parts)


def _enclosing_anchor(node: LexborNode) -> int | None:
    parent = node.parent
    while parent is not None:
        if parent.tag == "a":
            return parent.mem_id
        parent = parent.parent
    return None


def _anchor_texts(
    tree: LexborHTMLParser,
    anchors: list[tuple[LexborNode, str]],
    resolver: LinkResolver,
    links: list[str],
) -> dict[str, str]:
    """URL → the text of the ``<a>`` elements pointing to it, joined, capped.

    Runs once the block spaces are in the tree and before the invisible
    elements go (an ``<a>`` in ``<noscript>`` goes with them).
    """
    odd = {_enclosing_anchor(node) for node in tree.css(_ODD_ANCHOR_QUERY)}
    wanted = dict.fromkeys(links, "")
    url_of: dict[str, str | None] = {}
    for node, href in anchors:
        url = url_of.get(href, "")
        if url == "":
            url = url_of[href] = resolver.resolve(href)
        if url is None or url not in wanted:
            continue
        text = _collapse(_odd_text(node) if odd and node.mem_id in odd else node.text())
        if text:
            joined = wanted[url]
            if len(joined) < ANCHOR_CHARS:
                # cut at the cap, its trailing space dropped (as the lxml path does)
                wanted[url] = (joined + " " + text if joined else text)[:ANCHOR_CHARS].rstrip()
    return {url: text for url, text in wanted.items() if text}


def _visible_text(tree: LexborHTMLParser, invisible: list[LexborNode]) -> str:
    """The text of the page without its invisible elements, words split at blocks."""
    # Last first: an invisible element inside another goes before the outer
    # one frees it.
    for node in reversed(invisible):
        node.decompose()
    root = tree.root
    return _collapse(root.text()) if root is not None else ""


def parse_lexbor(html: str, base_url: str, utf8: bytes | None = None) -> ParsedPage:
    """Parse ``html`` with lexbor; ``utf8`` is ``html`` as UTF-8 bytes when the caller has them.

    Bytes are always parsed as UTF-8: the page was decoded already, a
    ``<meta charset>`` in it must not apply a second time. Raises whatever
    selectolax raises; :func:`~srcrawl.slave.parse.parse_html` falls back then.
    """
    # scripting off: <noscript> content is markup, its links count, as libxml2 reads it
    tree = LexborHTMLParser(_source(html, utf8))
    walk = _walk(tree)
    builder = walk.builder
    resolver = builder.resolver(base_url)
    links = resolver.resolve_all(builder.hrefs)
    anchor_texts = _anchor_texts(tree, walk.anchors, resolver, links) if links else {}
    return ParsedPage(
        title=_collapse(builder.title or ""),
        text=_visible_text(tree, walk.invisible),
        links=links,
        anchors=anchor_texts,
        noindex=builder.noindex,
        nofollow=builder.nofollow,
        parser="lexbor",
    )
