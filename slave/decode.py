"""Bytes of a fetched page → Unicode text, and whether a response is HTML at all.

The charset is chosen in the order browsers use (WHATWG "encoding sniffing"):
a byte order mark, the HTTP ``charset``, a ``<meta charset>`` or
``http-equiv`` declaration near the start of the page, then detection
(strict UTF-8 first, charset-normalizer for the rest). Labels map to the
encodings browsers actually use: ``gb2312``/``gbk`` pages decode as GB18030
(their superset), ``big5`` as Big5-HKSCS (or CP950 when that fits better),
``iso-8859-1``/``ascii`` as Windows-1252. A declaration that contradicts the
bytes (a page labelled UTF-8 that is GBK) loses to the candidate that
decodes with fewer errors. Decoding never raises: errors="replace" is the
last resort.
"""

from __future__ import annotations

import codecs
import re

from charset_normalizer import from_bytes

from srcrawl.core.defaults import DEFAULT_CHARSET_DETECT_BYTES, DEFAULT_CHARSET_PRESCAN_BYTES

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
"""Content types parsed as HTML."""

SNIFFED_TYPES = frozenset(
    {"", "application/octet-stream", "unknown/unknown", "application/unknown", "*/*"}
)
"""Content types that say nothing: the body decides (WHATWG MIME sniffing)."""

BINARY_RATIO = 0.02
"""Share of control bytes (NUL and other C0 controls but whitespace) that marks a body binary."""

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

# Labels Python does not know, or knows as a narrower codec than browsers use.
_LABELS = {
    "unicode-1-1-utf-8": "utf-8",
    "unicode11utf8": "utf-8",
    "unicode20utf8": "utf-8",
    "x-unicode20utf8": "utf-8",
    "utf8": "utf-8",
    "x-gbk": "gb18030",
    "gb_2312": "gb18030",
    "gb_2312-80": "gb18030",
    "iso-ir-58": "gb18030",
    "csgb2312": "gb18030",
    "csiso58gb231280": "gb18030",
    "chinese": "gb18030",
    "x-x-big5": "big5hkscs",
    "cn-big5": "big5hkscs",
    "csbig5": "big5hkscs",
    "x-sjis": "cp932",
    "ms_kanji": "cp932",
    "windows-31j": "cp932",
    "csshiftjis": "cp932",
    "x-euc-jp": "euc_jp",
    "ks_c_5601-1987": "cp949",
    "ks_c_5601-1989": "cp949",
    "ksc5601": "cp949",
    "ksc_5601": "cp949",
    "windows-949": "cp949",
    "x-mac-roman": "mac-roman",
    "macintosh": "mac-roman",
    "x-mac-cyrillic": "mac-cyrillic",
    "tis-620": "cp874",
    "iso-8859-11": "cp874",
    "windows-874": "cp874",
}
# Python codec name -> the codec browsers use for it.
_WIDEN = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "big5": "big5hkscs",
    "cp950": "big5hkscs",
    "ascii": "cp1252",
    "latin-1": "cp1252",
    "iso8859-1": "cp1252",
    "iso8859-9": "cp1254",
    "iso8859-11": "cp874",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "utf-16": "utf-16-le",
}
# What browsers can decode; anything else named in a page is ignored (Python
# also has codecs such as rot13, base64 or "undefined" that are no charsets).
_WEB_CODECS = frozenset(
    {
        "utf-8",
        "utf-16-le",
        "utf-16-be",
        "gb18030",
        "big5hkscs",
        "cp932",
        "euc_jp",
        "iso2022_jp",
        "cp949",
        "cp866",
        "koi8-r",
        "koi8-u",
        "mac-roman",
        "mac-cyrillic",
        "cp874",
        "cp1250",
        "cp1251",
        "cp1252",
        "cp1253",
        "cp1254",
        "cp1255",
        "cp1256",
        "cp1257",
        "cp1258",
        "iso8859-2",
        "iso8859-3",
        "iso8859-4",
        "iso8859-5",
        "iso8859-6",
        "iso8859-7",
        "iso8859-8",
        "iso8859-10",
        "iso8859-13",
        "iso8859-14",
        "iso8859-15",
        "iso8859-16",
    }
)
# Candidates tried when the chosen codec does not decode the page cleanly.
_ALTERNATIVES = {"big5hkscs": ("cp950",), "gb18030": ("utf-8",), "utf-8": ("gb18030",)}

_HTTP_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_:.+\-]+)""", re.I)
_META_CHARSET = re.compile(rb"""<meta\b[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_:.+\-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.+\-]+)""", re.I)
# WHATWG "binary data bytes": C0 controls other than TAB LF FF CR and ESC.
_BINARY_BYTES = bytes([*range(0, 9), 11, *range(14, 27), *range(28, 32)])
_BINARY_MAGIC = (
    b"\x89PNG",
    b"GIF87a",
    b"GIF89a",
    b"\xff\xd8\xff",
    b"%PDF-",
    b"PK\x03\x04",
    b"\x1f\x8b",
    b"BZh",
    b"\xfd7zXZ",
    b"7z\xbc\xaf",
    b"Rar!",
    b"\x7fELF",
    b"MZ",
    b"\x00asm",
    b"OggS",
    b"ID3",
    b"fLaC",
    b"\x1a\x45\xdf\xa3",
    b"RIFF",
    b"\x00\x00\x01\x00",
    b"wOFF",
    b"wOF2",
    b"\xca\xfe\xba\xbe",
    b"%!PS",
)
_HTML_SIGNATURES = re.compile(
    rb"\s*(?:<!doctype\s+html|<html|<head|<script|<iframe|<h1|<div|<font|<table|<a|<style"
    rb"|<title|<b|<body|<br|<p)[\s>]|\s*<!--",
    re.I,
)


def normalize_charset(label: str | None) -> str | None:
    """The Python codec a browser would use for the charset ``label``, or None if unknown."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    name = _LABELS.get(label)
    if name is None:
        try:
            name = codecs.lookup(label).name
        except LookupError:
            return None
    name = _WIDEN.get(name, name)
    return name if name in _WEB_CODECS else None


def http_charset(content_type: str) -> str | None:
    """The codec named by the ``charset`` parameter of a Content-Type, if any."""
    m = _HTTP_CHARSET.search(content_type or "")
    return normalize_charset(m.group(1)) if m else None


def meta_charset(head: bytes) -> str | None:
    """The codec declared by ``<meta>`` (or an XML declaration) in ``head``, if any."""
    for pattern in (_META_CHARSET, _XML_ENCODING):
        m = pattern.search(head)
        if m:
            name = normalize_charset(m.group(1).decode("ascii"))
            if name is not None:
                # A page that reached us as bytes in a UTF-16 it names itself
                # would have carried a BOM: browsers read the label as UTF-8.
                return "utf-8" if name.startswith("utf-16") else name
    return None


def _decode_errors(body: bytes, encoding: str) -> tuple[str, int]:
    """``body`` decoded (errors replaced) and how many decoding errors there were."""
    try:
        return body.decode(encoding), 0
    except UnicodeDecodeError as e:
        if e.end >= len(body) and e.start >= len(body) - 4:
            # The byte cap cut the last character in two: one error, at the end.
            return body[: e.start].decode(encoding, "replace") + "\ufffd", 1
    text = body.decode(encoding, "replace")
    # U+FFFD the page itself carries is no decoding error.
    return text, text.count("\ufffd") - body.decode(encoding, "ignore").count("\ufffd")


def _detect(body: bytes) -> str | None:
    best = from_bytes(body[:DEFAULT_CHARSET_DETECT_BYTES]).best()
    return normalize_charset(best.encoding) if best is not None else None


def _decode_as(body: bytes, encoding: str) -> tuple[str, str]:
    text, errors = _decode_errors(body, encoding)
    if errors <= 1:
        return text, encoding
    # The label and the bytes disagree: take whichever candidate fits best,
    # the declared one winning ties.
    best = (errors, 0, text, encoding)
    candidates = [*_ALTERNATIVES.get(encoding, ()), _detect(body)]
    for rank, candidate in enumerate(candidates, start=1):
        if candidate is None or candidate == encoding:
            continue
        alt_text, alt_errors = _decode_errors(body, candidate)
        if (alt_errors, rank) < best[:2]:
            best = (alt_errors, rank, alt_text, candidate)
        if alt_errors == 0:
            break
    return best[2], best[3]


def decode_html(body: bytes, content_type: str = "") -> tuple[str, str]:
    """Decode a page to ``(text, encoding)``; never raises.

    ``encoding`` is the Python codec name used (``utf-8``, ``gb18030``,
    ``big5hkscs``, ``cp1252``, …). A byte order mark is removed from the text.
    """
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return _decode_errors(body[len(bom) :], encoding)[0], encoding
    declared = http_charset(content_type) or meta_charset(body[:DEFAULT_CHARSET_PRESCAN_BYTES])
    if declared is not None:
        return _decode_as(body, declared)
    text, errors = _decode_errors(body, "utf-8")
    if errors <= 1:
        return text, "utf-8"
    detected = _detect(body)
    if detected is not None and detected != "utf-8":
        return _decode_as(body, detected)
    return text, "utf-8"


def utf8_source(body: bytes, text: str, encoding: str) -> bytes | None:
    """The bytes ``text`` was decoded from, when they are exactly its UTF-8 (a
    byte order mark dropped); else None.

    Given to :func:`~srcrawl.slave.parse.parse_html`, they spare it encoding
    the text again for libxml2. A decoding error leaves U+FFFD in the text,
    so text without one, decoded as UTF-8, is the strict decoding of the body.
    """
    if encoding != "utf-8" or "\ufffd" in text:
        return None
    return body[len(codecs.BOM_UTF8) :] if body.startswith(codecs.BOM_UTF8) else body


def mime_type(content_type: str) -> str:
    """The lower-case ``type/subtype`` of a Content-Type header ('' if none)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def looks_binary(body: bytes, sample: int = 4096) -> bool:
    """True when the start of ``body`` is a known binary format or full of control bytes."""
    head = body[:sample]
    if not head or head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False
    if head.startswith(_BINARY_MAGIC):
        return True
    controls = len(head) - len(head.translate(None, _BINARY_BYTES))
    return controls > BINARY_RATIO * len(head)


def is_html(content_type: str, body: bytes) -> bool:
    """Whether a response should be parsed as HTML.

    HTML and XHTML content types are, unless the body is binary junk (an
    image or random bytes served as text/html). A missing or meaningless
    content type is sniffed: the body must open like an HTML document. Any
    other type (images, PDF, text/plain, JSON, …) is not HTML.
    """
    mime = mime_type(content_type)
    if mime in HTML_TYPES:
        return not looks_binary(body)
    if mime in SNIFFED_TYPES:
        head = body[:1024]
        for bom, _ in _BOMS:
            if head.startswith(bom):
                head = head[len(bom) :]
                break
        return bool(_HTML_SIGNATURES.match(head)) and not looks_binary(body)
    return False
