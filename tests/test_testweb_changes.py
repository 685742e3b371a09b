"""The changing test web: a seeded schedule, validators and 304s, the live version at t."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from srcrawl.testweb import TestWeb
from srcrawl.testweb.changes import (
    CHANGING,
    GONE,
    STATIC,
    ChangeSchedule,
    etag,
    live_version,
    version_of_etag,
)


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_the_schedule_is_seeded_and_says_which_version_is_live() -> None:
    sched = ChangeSchedule(
        start=1000.0, seed=2, changing=0.4, gone=0.2, periods=(2.0, 5.0), gone_after=10.0
    )
    urls = [f"http://127.0.0.1:1/p/{n}.html" for n in range(200)]
    kinds = [sched.kind(u) for u in urls]
    assert kinds == [
        ChangeSchedule(
            start=0.0, seed=2, changing=0.4, gone=0.2, periods=(2.0, 5.0), gone_after=10.0
        ).kind(u)
        for u in urls
    ]
    counts = {k: sum(1 for kind, _ in kinds if kind == k) for k in (STATIC, CHANGING, GONE)}
    assert 50 < counts[CHANGING] < 110 and 20 < counts[GONE] < 60, counts
    for url, (kind, value) in zip(urls, kinds, strict=True):
        if kind == CHANGING:
            assert [sched.version_at(url, 1000.0 + value * i + 0.01) for i in range(3)] == [0, 1, 2]
            assert sched.modified_at(url, 2) == 1000.0 + 2 * value
        elif kind == GONE:
            assert 5.0 <= value < 10.0
            assert sched.version_at(url, 1000.0 + value - 0.01) == 0
            assert sched.version_at(url, 1000.0 + value + 0.001) is None
        else:
            assert sched.version_at(url, 10**9) == 0
    assert version_of_etag(etag(urls[0], 17)) == 17 and version_of_etag('W/"x"') is None
    with pytest.raises(ValueError):
        ChangeSchedule(start=0.0, changing=0.8, gone=0.3)


@pytest.mark.slow
def test_a_changing_web_answers_conditional_gets_and_takes_pages_away() -> None:
    sched = ChangeSchedule(
        start=time.time(), seed=3, changing=0.5, gone=0.3, periods=(1.0,), gone_after=2.0
    )
    # a page's kind is drawn from its URL, port included: with 60 pages every kind is
    # there whatever the port (10 pages had none static about one port in ten)
    with TestWeb.generate(hosts=1, pages=60, seed=5, changes=sched, in_process=True) as tw:
        pages = {u: sched.kind(u)[0] for u, p in tw.web.pages.items() if p.template == "regular"}
        static = next(u for u, k in pages.items() if k == STATIC)
        changing = next(u for u, k in pages.items() if k == CHANGING)
        gone = next(u for u, k in pages.items() if k == GONE)
        status, headers, _ = get(static)
        assert status == 200 and version_of_etag(headers["ETag"]) == 0
        assert get(static, **{"If-None-Match": headers["ETag"]})[::2] == (304, b"")
        assert get(static, **{"If-Modified-Since": headers["Last-Modified"]})[0] == 304
        assert get(static, **{"If-None-Match": '"9-x"'})[0] == 200
        first = get(changing)
        time.sleep(2.1)  # two versions later, and every gone page gone
        now = time.time()
        status, headers, later = get(changing)
        assert version_of_etag(headers["ETag"]) == live_version(tw.web, changing, now) >= 2
        assert later != first[2]
        assert get(changing, **{"If-None-Match": first[1]["ETag"]})[0] == 200
        assert get(gone)[0] == sched.gone_status(gone) in (404, 410)
        assert live_version(tw.web, gone, now) is None
        assert get(static, **{"If-None-Match": headers["ETag"]})[0] == 200  # another page's tag


def test_a_web_without_a_schedule_sends_no_validators_and_never_changes() -> None:
    with TestWeb.generate(hosts=1, pages=5, seed=5, in_process=True) as tw:
        assert tw.web.changes is None
        url = tw.seed_urls[0]
        status, headers, _ = get(url, **{"If-None-Match": "*"})
        assert status == 200 and "ETag" not in headers and "Last-Modified" not in headers
        assert live_version(tw.web, url, time.time() + 10**6) == 0


def test_copies_of_a_web_on_other_ports_change_alike_when_the_origins_are_given() -> None:
    sched = ChangeSchedule(start=0.0, seed=1, changing=0.5, gone=0.1, periods=(4.0, 8.0, 16.0))
    paths = [f"/p/{n}.html" for n in range(40)]
    a, b = ("http://127.0.0.1:1001", "http://127.0.0.1:1002"), ("http://127.0.0.1:2001", "x")
    left = ChangeSchedule(**{**sched.__dict__, "origins": a})
    right = ChangeSchedule(**{**sched.__dict__, "origins": b})
    for i in (0, 1):
        assert [left.kind(a[i] + p) for p in paths] == [right.kind(b[i] + p) for p in paths]
    # by URL alone the same pages on other ports draw other fates; hosts differ from each other
    assert [sched.kind(a[0] + p) for p in paths] != [sched.kind(b[0] + p) for p in paths]
    assert [left.kind(a[0] + p) for p in paths] != [left.kind(a[1] + p) for p in paths]
