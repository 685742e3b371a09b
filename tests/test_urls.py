from __future__ import annotations

import pytest

from srcrawl.core.urls import InvalidURL, canonicalize, fingerprint, host_of, origin


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("http://127.0.0.1:8000/a/b?x=1", "http://127.0.0.1:8000/a/b?x=1"),
        ("HTTP://Example.COM/Path", "http://example.com/Path"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com:80/", "http://example.com/"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("https://example.com:80/x", "https://example.com:80/x"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/../../x", "http://example.com/x"),
        ("http://example.com/a/..", "http://example.com/"),
        ("http://example.com/%7euser/%41", "http://example.com/~user/A"),
        ("http://example.com/a%2fb%2F", "http://example.com/a%2Fb%2F"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://example.com/100%", "http://example.com/100%25"),
        ("http://example.com/中文?q=中", "http://example.com/%E4%B8%AD%E6%96%87?q=%E4%B8%AD"),
        ("http://例子.测试/", "http://xn--fsqu00a.xn--0zwm56d/"),
        ("http://[0:0::1]:8080/x", "http://[::1]:8080/x"),
        ("http://user:pw@example.com/", "http://example.com/"),
        ("http://example.com/?", "http://example.com/"),
        ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
        ("http://example.com/?b=2&&a=2&a=1", "http://example.com/?a=1&a=2&b=2"),
        ("  http://example.com/\tx\n ", "http://example.com/x"),
        ("http://example.com./", "http://example.com/"),
    ],
)
def test_canonicalize(raw: str, canonical: str) -> None:
    assert canonicalize(raw) == canonical
    assert canonicalize(canonical) == canonical  # idempotent


@pytest.mark.parametrize(
    "raw",
    [
        "javascript:alert(1)",
        "mailto:a@b.c",
        "data:text/html,x",
        "ftp://example.com/",
        "http://[::1/",
        "http://[zz::1]/",
        "http://example.com:99999/",
        "http://example.com:-1/",
        "http:///nohost",
        "//example.com/",
        "/relative",
        "",
        "http://exa mple.com/",
        "http://-bad-.com/",
        "http://a..b/",
        "http://example.com/" + "a" * 3000,
    ],
)
def test_invalid_urls(raw: str) -> None:
    with pytest.raises(InvalidURL):
        canonicalize(raw)


def test_fingerprint_is_signed_64_bit_and_stable() -> None:
    fps = {fingerprint(f"http://127.0.0.1/{i}") for i in range(10_000)}
    assert len(fps) == 10_000
    assert all(-(2**63) <= f < 2**63 for f in fps)
    assert fingerprint("http://a/") == fingerprint("http://a/")


def test_origin_and_host() -> None:
    assert origin("http://127.0.0.1:81/a/b?c") == "http://127.0.0.1:81"
    assert origin("http://h") == "http://h"
    assert host_of("https://[::1]:8443/x") == "[::1]:8443"
