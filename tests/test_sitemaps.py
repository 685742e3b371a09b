"""Sitemaps read within their limits, hostile ones bounded and counted, lastmod kept in Redis."""

from __future__ import annotations

import gzip

from srcrawl.master.frontier.recrawl import lastmod_of, record_lastmod
from srcrawl.slave.sitemaps import SitemapLimits, parse_lastmod, read_sitemaps

HOST = "http://127.0.0.1:9"


def urlset(*entries: tuple[str, str | None]) -> bytes:
    rows = "".join(
        f"<url><loc>{HOST}{path}</loc>" + (f"<lastmod>{mod}</lastmod>" if mod else "") + "</url>"
        for path, mod in entries
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</urlset>'
    ).encode()


def index(*locs: str) -> bytes:
    rows = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</sitemapindex>'.encode()


class Web:
    """Sitemap bodies by URL, and every URL asked for."""

    def __init__(self, bodies: dict[str, bytes]) -> None:
        self.bodies = bodies
        self.asked: list[str] = []

    def fetch(self, url: str) -> bytes | None:
        self.asked.append(url)
        return self.bodies.get(url)


def same_host(url: str) -> bool:
    return url.startswith(HOST + "/")


def test_an_index_of_a_plain_and_a_gzip_sitemap_gives_urls_and_lastmod() -> None:
    web = Web(
        {
            f"{HOST}/sitemap.xml": index(f"{HOST}/a.xml", f"{HOST}/b.xml.gz"),
            f"{HOST}/a.xml": urlset(("/one", "2024-05-06T10:00:00+02:00"), ("/two", None)),
            f"{HOST}/b.xml.gz": gzip.compress(urlset(("/three", "2024-05-06"))),
        }
    )
    report = read_sitemaps([f"{HOST}/sitemap.xml"], web.fetch, same_host)
    assert report.urls == {
        f"{HOST}/one": parse_lastmod("2024-05-06T08:00:00Z"),
        f"{HOST}/two": None,
        f"{HOST}/three": parse_lastmod("2024-05-06T00:00:00+00:00"),
    }
    assert report.fetched == 3 and report.counters() == {"sitemaps_fetched": 3, "sitemap_urls": 3}


def test_hostile_sitemaps_are_bounded_and_counted() -> None:
    bomb = gzip.compress(b"<urlset>" + b" " * 50_000_000 + b"</urlset>")  # 50 MB inflated
    web = Web(
        {
            f"{HOST}/sitemap.xml": index(
                f"{HOST}/sitemap.xml",  # itself
                "http://example.org/elsewhere.xml",  # off scope: never asked for
                f"{HOST}/bomb.xml.gz",
                f"{HOST}/many.xml",
                f"{HOST}/broken.xml",
                f"{HOST}/deep1.xml",
            ),
            f"{HOST}/bomb.xml.gz": bomb,
            f"{HOST}/many.xml": urlset(*((f"/p{i}", None) for i in range(50))),
            f"{HOST}/broken.xml": urlset(("/ok", None))[: -len(b"</urlset>")] + b"<url><loc>",
            f"{HOST}/deep1.xml": index(f"{HOST}/deep2.xml"),
            f"{HOST}/deep2.xml": index(f"{HOST}/deep3.xml"),
        }
    )
    limits = SitemapLimits(max_bytes=100_000, max_urls=10, max_depth=2, per_host=6)
    report = read_sitemaps([f"{HOST}/sitemap.xml"], web.fetch, same_host, limits)
    assert "http://example.org/elsewhere.xml" not in web.asked
    assert web.asked.count(f"{HOST}/sitemap.xml") == 1
    assert f"{HOST}/deep3.xml" not in web.asked  # an index below the second level
    assert report.refused == 1 and report.fetched == 6
    assert report.capped == 3  # the bomb, the 50 URLs, the third level
    assert report.malformed == 1  # broken.xml: its URL before the break is kept
    assert f"{HOST}/ok" in report.urls
    assert sum(u.startswith(f"{HOST}/p") for u in report.urls) == 10


def test_entities_are_never_expanded_nor_fetched() -> None:
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">'
        b'<!ENTITY x SYSTEM "http://example.org/secret">]>'
        b"<urlset><url><loc>http://127.0.0.1:9/&c;&x;</loc></url></urlset>"
    )
    web = Web({f"{HOST}/s.xml": laughs})
    report = read_sitemaps([f"{HOST}/s.xml"], web.fetch, same_host)
    assert web.asked == [f"{HOST}/s.xml"]
    assert all("aaaaaaaaaa" not in u for u in report.urls)


def test_a_sitemap_per_host_limit_stops_a_long_list() -> None:
    starts = [f"{HOST}/s{i}.xml" for i in range(20)]
    web = Web({u: urlset(("/x", None)) for u in starts})
    report = read_sitemaps(starts, web.fetch, same_host, SitemapLimits(per_host=3))
    assert len(web.asked) == 3 and report.capped == 17


def test_lastmod_forms() -> None:
    assert parse_lastmod("2024") == parse_lastmod("2024-01-01T00:00:00Z")
    assert parse_lastmod("2024-02") == parse_lastmod("2024-02-01")
    assert parse_lastmod("yesterday") is None and parse_lastmod(None) is None


def test_lastmod_is_kept_bounded_in_redis(redis_client, keys) -> None:
    assert record_lastmod(redis_client, keys, [(1, 100.0), (-5, 200.5)], limit=2) == 0
    assert record_lastmod(redis_client, keys, [(1, 150.0), (7, 300.0)], limit=2) == 1
    assert lastmod_of(redis_client, keys, [1, -5, 7]) == {1: 150.0, -5: 200.5}
    assert redis_client.hlen(keys.sitemap_lastmod) == 2
