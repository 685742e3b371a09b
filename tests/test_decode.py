"""Charset decoding on byte-exact samples, and the is-it-HTML decision."""

from __future__ import annotations

import codecs
import os
import random

import pytest

from srcrawl.slave.decode import (
    decode_html,
    http_charset,
    is_html,
    looks_binary,
    meta_charset,
    normalize_charset,
    utf8_source,
)

ZH = "分布式网络爬虫系统的设计与实现。搜索引擎需要抓取大量网页，并建立倒排索引。"
ZH_TW = "分散式網路爬蟲系統的設計與實現。搜尋引擎需要抓取大量網頁，並建立倒排索引。"


def page(body: str, head: str = "", title: str = "标题") -> str:
    return f"<html><head>{head}<title>{title}</title></head><body><p>{body}</p></body></html>"


# -- byte-exact samples -------------------------------------------------------


def test_gbk_bytes_decode_to_the_right_characters() -> None:
    body = b"<p>\xd6\xd0\xce\xc4</p>"  # 中文 in GBK
    text, enc = decode_html(body, "text/html; charset=GBK")
    assert (text, enc) == ("<p>中文</p>", "gb18030")


def test_gb2312_label_decodes_gbk_only_characters() -> None:
    # 镕 (U+9555) is in GBK but not GB2312; pages labelled gb2312 use it anyway.
    body = "<p>朱镕基 中文</p>".encode("gbk")
    with pytest.raises(UnicodeDecodeError):
        body.decode("gb2312")
    assert decode_html(body, "text/html; charset=gb2312") == ("<p>朱镕基 中文</p>", "gb18030")


def test_gb18030_four_byte_characters() -> None:
    body = b"<p>\x95\x32\x82\x36 \xa2\xe3</p>"  # U+20000 and the euro sign
    assert decode_html(body, "text/html; charset=gb18030") == ("<p>\U00020000 €</p>", "gb18030")


def test_big5_with_hkscs_characters() -> None:
    # 嘅 (0x9DEF) exists only in Big5-HKSCS.
    body = b"<p>\xa4\xa4\xa4\xe5 \x9d\xef</p>"
    with pytest.raises(UnicodeDecodeError):
        body.decode("big5")
    assert decode_html(body, "text/html; charset=big5") == ("<p>中文 嘅</p>", "big5hkscs")


def test_big5_with_cp950_extensions_uses_cp950() -> None:
    # The euro sign at 0xA3E1 exists in CP950 only.
    body = b"<p>\xa3\xe1100 \xa3\xe1200 \xa4\xa4\xa4\xe5</p>"
    assert decode_html(body, "text/html; charset=big5") == ("<p>€100 €200 中文</p>", "cp950")


def test_utf8_bom_wins_over_every_declaration() -> None:
    body = codecs.BOM_UTF8 + page(ZH, '<meta charset="gbk">').encode()
    text, enc = decode_html(body, "text/html; charset=iso-8859-1")
    assert enc == "utf-8" and text == page(ZH, '<meta charset="gbk">')


def test_utf16_boms() -> None:
    html = page(ZH)
    assert decode_html(codecs.BOM_UTF16_LE + html.encode("utf-16-le"), "") == (html, "utf-16-le")
    assert decode_html(codecs.BOM_UTF16_BE + html.encode("utf-16-be"), "") == (html, "utf-16-be")


def test_http_charset_wins_over_meta() -> None:
    html = page(ZH, '<meta charset="big5">')
    assert decode_html(html.encode("gbk"), 'text/html; charset="gbk"') == (html, "gb18030")


@pytest.mark.parametrize(
    "head",
    [
        '<meta charset="gbk">',
        "<meta charset=gb2312>",
        '<meta http-equiv="Content-Type" content="text/html; charset=GBK">',
        "<META HTTP-EQUIV='content-type' CONTENT='text/html;charset=gb2312'>",
    ],
)
def test_meta_only_declarations(head: str) -> None:
    html = page(ZH, head)
    assert decode_html(html.encode("gbk"), "text/html") == (html, "gb18030")


def test_meta_big5_declaration() -> None:
    html = page(ZH_TW, '<meta http-equiv="content-type" content="text/html; charset=big5">', "標題")
    assert decode_html(html.encode("big5"), "") == (html, "big5hkscs")


def test_meta_beyond_the_prescan_window_is_not_seen_but_detection_still_works() -> None:
    html = "<html><head>" + "<!-- padding -->" * 400 + '<meta charset="gbk">' + page(ZH * 5)
    text, enc = decode_html(html.encode("gbk"), "text/html")
    assert text == html and enc == "gb18030"


def test_undeclared_utf8() -> None:
    html = page(ZH)
    assert decode_html(html.encode(), "text/html") == (html, "utf-8")


def test_undeclared_gbk_is_detected() -> None:
    html = page(ZH * 4)
    assert decode_html(html.encode("gbk"), "text/html") == (html, "gb18030")


def test_undeclared_big5_is_detected() -> None:
    html = page(ZH_TW * 4, title="標題")
    text, enc = decode_html(html.encode("big5"), "")
    assert text == html and enc in ("big5hkscs", "cp950")


def test_a_wrong_utf8_label_loses_to_the_real_encoding() -> None:
    html = page(ZH * 3)
    assert decode_html(html.encode("gbk"), "text/html; charset=utf-8") == (html, "gb18030")


def test_a_wrong_gb2312_label_loses_to_utf8() -> None:
    html = page(ZH * 3)
    assert decode_html(html.encode(), "text/html; charset=gb2312") == (html, "utf-8")


def test_a_character_cut_by_the_byte_cap() -> None:
    data = page(ZH).encode()
    cut = data[: data.index("网".encode()) + 2]  # the middle of 网
    text, enc = decode_html(cut, "text/html; charset=utf-8")
    assert enc == "utf-8" and text.endswith("\ufffd") and "络" not in text
    assert text[:-1] == cut[:-2].decode()


def test_latin1_labels_decode_as_windows_1252() -> None:
    body = b"<p>caf\xe9 \x93quoted\x94 \x80</p>"
    assert decode_html(body, "text/html; charset=iso-8859-1") == (
        "<p>café “quoted” €</p>",
        "cp1252",
    )


def test_unknown_or_non_text_labels_are_ignored() -> None:
    html = page(ZH)
    for label in ("x-no-such-charset", "rot13", "base64", "undefined", "zlib"):
        assert decode_html(html.encode(), f"text/html; charset={label}") == (html, "utf-8")


def test_decoding_never_raises_on_garbage() -> None:
    rng = random.Random(7)
    for ctype in (
        "text/html",
        "text/html; charset=gbk",
        "text/html; charset=big5",
        "text/html; charset=utf-8",
        "text/html; charset=shift_jis",
        "",
    ):
        for _ in range(20):
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000)))
            text, enc = decode_html(junk, ctype)
            assert isinstance(text, str) and codecs.lookup(enc)
            text.encode("utf-8")  # no lone surrogates


def test_empty_body() -> None:
    assert decode_html(b"", "text/html") == ("", "utf-8")


# -- label handling -----------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        ("GB2312", "gb18030"),
        ("gbk", "gb18030"),
        ("x-gbk", "gb18030"),
        ("GB18030", "gb18030"),
        ("cp936", "gb18030"),
        ("big5", "big5hkscs"),
        ("Big5-HKSCS", "big5hkscs"),
        ("x-x-big5", "big5hkscs"),
        ("UTF8", "utf-8"),
        ("utf-8", "utf-8"),
        ("latin1", "cp1252"),
        ("US-ASCII", "cp1252"),
        ("windows-1251", "cp1251"),
        ("Shift_JIS", "cp932"),
        ("euc-kr", "cp949"),
        ("koi8-r", "koi8-r"),
        ("'gbk'", "gb18030"),
        ("rot13", None),
        ("hex", None),
        ("nonsense", None),
        ("", None),
    ],
)
def test_normalize_charset(label: str, codec: str | None) -> None:
    assert normalize_charset(label) == codec


def test_http_and_meta_charset_helpers() -> None:
    assert http_charset("text/html; charset=UTF-8") == "utf-8"
    assert http_charset("text/html") is None
    assert meta_charset(b'<meta charset="utf-16">') == "utf-8"  # as browsers do
    assert meta_charset(b'<?xml version="1.0" encoding="GBK"?><html>') == "gb18030"
    assert meta_charset(b"<p>charset=gbk</p>") is None


# -- is it HTML? ----------------------------------------------------------------


def test_html_types_are_parsed() -> None:
    body = page(ZH).encode()
    assert is_html("text/html", body)
    assert is_html("text/html; charset=utf-8", body)
    assert is_html("application/xhtml+xml", body)
    assert is_html("TEXT/HTML", body)


@pytest.mark.parametrize(
    "ctype", ["image/png", "application/pdf", "text/plain", "application/json", "text/css"]
)
def test_other_types_are_not(ctype: str) -> None:
    assert not is_html(ctype, page(ZH).encode())


def test_binary_served_as_html_is_refused() -> None:
    assert not is_html("text/html", os.urandom(20_000))
    assert not is_html("text/html", b"\x89PNG\r\n\x1a\n" + b"IHDR" + bytes(100))
    assert not is_html("text/html", b"\x1f\x8b\x08\x00" + os.urandom(100))
    assert not is_html("text/html", bytes(1000))


def test_a_few_stray_nul_bytes_do_not_make_a_page_binary() -> None:
    body = page(ZH * 10).encode().replace("。".encode(), b"\x00", 3)
    assert not looks_binary(body) and is_html("text/html", body)


def test_utf16_with_bom_is_not_binary() -> None:
    body = codecs.BOM_UTF16_LE + page(ZH).encode("utf-16-le")
    assert is_html("text/html", body)


@pytest.mark.parametrize(
    "body",
    [
        b"<!DOCTYPE html><html><body>x</body></html>",
        b"\n\n  <html lang=zh>",
        b"<HEAD><title>x</title>",
        b"<!-- comment --><p>x",
        codecs.BOM_UTF8 + b"<html>",
    ],
)
def test_untyped_html_is_sniffed(body: bytes) -> None:
    assert is_html("", body) and is_html("application/octet-stream", body)


@pytest.mark.parametrize(
    "body", [b"just some text", b'{"json": true}', b"%PDF-1.7", b"<?xml version='1.0'?><rss>"]
)
def test_untyped_non_html_is_not(body: bytes) -> None:
    assert not is_html("", body)


def test_the_utf8_source_is_the_body_only_when_the_text_is_its_exact_utf8() -> None:
    text = page(ZH)
    body = text.encode()
    assert utf8_source(body, *decode_html(body, "text/html")) == body
    with_bom = codecs.BOM_UTF8 + body
    assert utf8_source(with_bom, *decode_html(with_bom, "text/html")) == body
    # another charset, or a decoding error (U+FFFD in the text): parse the text
    gbk = text.encode("gbk")
    assert utf8_source(gbk, *decode_html(gbk, "text/html; charset=gbk")) is None
    broken = body[:-20] + b"\xff" + body[-20:]
    decoded = decode_html(broken, "text/html; charset=utf-8")
    assert decoded[1] == "utf-8" and "\ufffd" in decoded[0]
    assert utf8_source(broken, *decoded) is None
