"""The bytes served for each page of the model: HTML, encoded text, files, broken things.

Rendering is deterministic: text comes from a generator seeded by the web's
seed and the page's path (not its port), so a page has the same words
whatever port serves it. Every link of a page is written with its ``href``
exactly as the model stores it.
"""

from __future__ import annotations

import html
import random
import struct
import zlib
from dataclasses import dataclass

from srcrawl.testweb import words
from srcrawl.testweb.model import Host, Link, Page, Web
from srcrawl.testweb.specials import TRUNCATED_MISSING_BYTES
from srcrawl.testweb.urls import target_of

LARGE_FILLER_CHUNK = 64 * 1024
"""Bytes of distinct text repeated to fill the large page."""


@dataclass(frozen=True)
class Response:
    """What the server sends for one request, before the per-connection headers."""

    status: int
    content_type: str | None
    body: bytes
    location: str | None = None
    behavior: str = "normal"
    declared_length: int | None = None
    """Content-Length to announce when it differs from ``len(body)`` (truncated page)."""
    etag: str | None = None
    last_modified: str | None = None
    """Validators, sent only by a web with a change schedule (see testweb/changes.py)."""


def render(web: Web, page: Page, version: int = 0) -> Response:
    """The response for ``page``; ``version`` > 0 draws its words anew (links and planted
    terms stay): a later version of a page of a changing web."""
    salt = f":v{version}" if version else ""
    rng = random.Random(f"{web.seed}:{target_of(page.url)}{salt}")
    template = page.template
    if template == "redirect":
        body = b"<html><body><h1>Moved</h1></body></html>"
        return Response(page.status, "text/html; charset=utf-8", body, location=page.location)
    if template == "error":
        reason = "Not Found" if page.status == 404 else "Server Error"
        body = f"<html><body><h1>{page.status} {reason}</h1></body></html>".encode()
        return Response(page.status, "text/html; charset=utf-8", body)
    if template in _FILES:
        return Response(page.status, page.content_type, _FILES[template](rng))
    if template == "large":
        body = _large(rng, page, web.large_bytes)
    elif template == "frameset":
        body = _frameset(page).encode()
    elif template == "unclosed":
        body = _unclosed(rng, page).encode()
    elif template == "garbage":
        body = _garbage(rng, page)
    else:
        body = _html(rng, page).encode(page.encoding)
    ctype = page.content_type
    if page.charset_in == "header":
        ctype = f"{ctype}; charset={page.encoding}"
    missing = TRUNCATED_MISSING_BYTES if page.behavior == "truncate" else None
    declared = None if missing is None else len(body) + missing
    return Response(page.status, ctype, body, behavior=page.behavior, declared_length=declared)


def robots_body(host: Host) -> bytes:
    return (host.robots_text or "").encode()


def not_found(status: int = 404) -> Response:
    """The answer for a path the model does not hold (410: one it held once)."""
    reason = "Gone" if status == 410 else "Not Found"
    body = f"<html><body><h1>{status} {reason}</h1></body></html>".encode()
    return Response(status, "text/html; charset=utf-8", body)


def server_error() -> Response:
    return Response(
        500, "text/html; charset=utf-8", b"<html><body><h1>500 Server Error</h1></body></html>"
    )


# ---- text


def _paragraphs(
    rng: random.Random, n: int, zh: tuple[str, ...] | list[str], zh_share: float
) -> list[str]:
    out = []
    for _ in range(n):
        if rng.random() < zh_share:
            out.append(
                "".join(
                    words.sentence_zh(rng, rng.randint(4, 10), zh) for _ in range(rng.randint(3, 6))
                )
            )
        else:
            out.append(
                " ".join(
                    words.sentence_en(rng, rng.randint(6, 16)) for _ in range(rng.randint(2, 5))
                )
            )
    return out


def _title(rng: random.Random, zh: tuple[str, ...] | list[str]) -> str:
    en = " ".join(rng.choice(words.ENGLISH) for _ in range(3)).title()
    return f"{en} {''.join(rng.choice(zh) for _ in range(2))}"


def _anchor(rng: random.Random, zh: tuple[str, ...] | list[str] = words.CHINESE) -> str:
    return rng.choice(words.ENGLISH) + " " + rng.choice(zh)


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def _html(rng: random.Random, page: Page) -> str:
    """Every HTML page but the few malformed ones: head, links by kind, text, planted terms."""
    zh = words.TRADITIONAL if page.encoding == "big5" else words.CHINESE
    title = _title(rng, zh) if page.title is None else page.title
    head = [f"<title>{html.escape(title)}</title>", *_head_meta(page)]
    links = _Links(rng, zh)
    for link in page.links:
        links.add(link, head)
    for href in page.dropped:
        links.nav.append(f'<li><a href="{_attr(href)}">{_anchor(rng, zh)}</a></li>')
    body = [f"<h1>{html.escape(title)}</h1>"]
    if links.menu:
        body.insert(0, "<header><nav><ul>" + "".join(links.menu) + "</ul></nav></header>")
    if links.nav:
        body.append("<nav><ul>" + "".join(links.nav) + "</ul></nav>")
    if links.areas:
        body.append('<map name="m">' + "".join(links.areas) + '</map><img alt="map" usemap="#m">')
    body.extend(links.frames)
    body.extend(f"<p>{p}</p>" for p in _text(rng, page, zh))
    lang = "zh-Hant" if page.encoding == "big5" else "zh-CN"
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head>{"".join(head)}</head>\n'
        f"<body>{''.join(body)}</body></html>\n"
    )


def _head_meta(page: Page) -> list[str]:
    """The head's charset, robots and base elements, after the title."""
    head = []
    if page.charset_in == "meta":
        if page.encoding == "big5":
            head.append(
                f'<meta http-equiv="Content-Type" content="text/html; charset={page.encoding}">'
            )
        else:
            head.append(f'<meta charset="{page.encoding}">')
    if page.noindex:
        head.append('<meta name="robots" content="noindex">')
    if page.meta_nofollow:
        head.append('<meta name="robots" content="nofollow">')
    if page.base_href:
        head.append(f'<base href="{_attr(page.base_href)}">')
    return head


class _Links:
    """A page's links written as their kind asks: in the head, a map, frames, the nav list."""

    def __init__(self, rng: random.Random, zh: tuple[str, ...] | list[str]) -> None:
        self.rng, self.zh = rng, zh
        self.nav: list[str] = []
        self.menu: list[str] = []
        self.areas: list[str] = []
        self.frames: list[str] = []
        self.nofollows = 0

    def add(self, link: Link, head: list[str]) -> None:
        href = _attr(link.href)
        if link.kind == "next":
            head.append(f'<link rel="next" href="{href}">')
        elif link.kind == "area":
            coords = f"0,0,{10 + len(self.areas)},10"
            alt = _anchor(self.rng, self.zh)
            self.areas.append(f'<area shape="rect" coords="{coords}" href="{href}" alt="{alt}">')
        elif link.kind == "iframe":
            self.frames.append(f'<iframe src="{href}" title="inner"></iframe>')
        elif link.nofollow:
            rel = "nofollow" if self.nofollows % 2 == 0 else "noopener nofollow"
            self.nofollows += 1
            self.nav.append(
                f'<li><a rel="{rel}" href="{href}">{_anchor(self.rng, self.zh)}</a></li>'
            )
        else:
            text = _anchor(self.rng, self.zh) if link.anchor is None else html.escape(link.anchor)
            (self.menu if link.menu else self.nav).append(f'<li><a href="{href}">{text}</a></li>')


def _text(rng: random.Random, page: Page, zh: tuple[str, ...] | list[str]) -> list[str]:
    """The paragraphs of a page, its planted terms in one of them."""
    encoded = page.encoding != "utf-8"
    paragraphs = _paragraphs(rng, 12 if encoded else rng.randint(3, 6), zh, 0.9 if encoded else 0.4)
    if page.terms:
        en, zh_term = page.terms
        at = rng.randrange(len(paragraphs))
        paragraphs[at] += (
            f" Keyword {en}. 关键词「{zh_term}」。"
            if page.encoding != "big5"
            else f" Keyword {en}. 關鍵詞「{zh_term}」。"
        )
    return paragraphs


def _frameset(page: Page) -> str:
    frames = "".join(f'<frame src="{_attr(ln.href)}">' for ln in page.links if ln.kind == "frame")
    return (
        '<!DOCTYPE html PUBLIC "-//W3C//DTD HTML 4.01 Frameset//EN">\n'
        f'<html><head><title>Frames</title></head><frameset cols="50%,50%">{frames}'
        "<noframes><p>Frames needed.</p></noframes></frameset></html>\n"
    )


def _unclosed(rng: random.Random, page: Page) -> str:
    links = "".join(f'<li><a href="{_attr(ln.href)}">{_anchor(rng)}' for ln in page.links)
    text = " ".join(words.sentence_en(rng, 8) for _ in range(6))
    return (
        f"<html><head><title>Unclosed</title><body><div><p>{text} <b>bold <i>italic"
        f"<ul>{links}<table><tr><td>cell<td>{text}<p>more <span>text"
    )


def _garbage(rng: random.Random, page: Page) -> bytes:
    links = "".join(f'<p><a href="{_attr(ln.href)}">{_anchor(rng)}</a></p>' for ln in page.links)
    head = f"<html><head><title>Garbage</title></head><body>{links}<p>before the noise</p>".encode()
    noise = b"\xff\xfe\x00\xc3\x28\xa0\xa1\xe2\x28\xa1<<<>>></div></span><!-- \x00\x01\x02 --"
    tail = " ".join(words.sentence_en(rng, 10) for _ in range(5)).encode()
    return head + noise + tail + b"</p></body>"


def _large(rng: random.Random, page: Page, size: int) -> bytes:
    """``size`` bytes (at least the head) of ASCII HTML; links come first."""
    links = "".join(f'<li><a href="{_attr(ln.href)}">{_anchor(rng)}</a></li>' for ln in page.links)
    head = (
        f"<!DOCTYPE html>\n<html><head><title>Large</title></head><body><ul>{links}</ul>".encode()
    )
    tail = b"</body></html>\n"
    chunk = bytearray()
    while len(chunk) < LARGE_FILLER_CHUNK:
        chunk += f"<p>{' '.join(words.sentence_en(rng, 12) for _ in range(5))}</p>\n".encode()
    room = max(0, size - len(head) - len(tail))
    filler = (bytes(chunk) * (room // len(chunk) + 1))[:room]
    return head + filler + tail


# ---- files


def _png(rng: random.Random) -> bytes:
    width = height = 16
    raw = b"".join(
        b"\x00" + bytes(rng.randrange(256) for _ in range(width * 3)) for _ in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _pdf(rng: random.Random) -> bytes:
    stream = rng.randbytes(2048)
    return (
        b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
        b"2 0 obj\n<< /Length 2048 >>\nstream\n" + stream + b"\nendstream\nendobj\n%%EOF\n"
    )


def _octet(rng: random.Random) -> bytes:
    return rng.randbytes(4096)


def _binary_as_html(rng: random.Random) -> bytes:
    """Random bytes with no ``<`` or ``&``: nothing in them parses as a tag or a link."""
    return bytes(b for b in rng.randbytes(6000) if b not in b"<&")[:4096]


_FILES = {"png": _png, "pdf": _pdf, "octet": _octet, "binary": _binary_as_html}
