"""Pages and links from any standard WARC file (``srcrawl import warc``).

Each ``response`` record of an http(s) URL becomes a page as a crawl would
have stored it (title, text, links with their anchor text, a redirect's
target as its one link), pointing into the file it came from, so that
``srcrawl index`` and search work on an archive made by another tool (wget
``--warc-file``, Heritrix, …). robots.txt responses are not pages. The body
is read as the record holds it: a chunked or gzip-encoded one is decoded
(:func:`srcrawl.warc.read.recorded_body`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastwarc.warc import WarcRecord

from srcrawl.core.urls import InvalidURL, canonicalize, fingerprint, host_of
from srcrawl.queues.crawl_protocol import canonical_links
from srcrawl.slave.decode import decode_html, is_html, utf8_source
from srcrawl.slave.links import canonical_anchors
from srcrawl.sql.pages import Link, Page
from srcrawl.sql.store import Store
from srcrawl.warc.read import recorded_body, responses
from srcrawl.warc.storage import WarcError

_BATCH = 200


@dataclass
class ImportCounts:
    pages: int = 0
    links: int = 0
    skipped: int = 0
    """Records that are no http(s) response srcrawl keeps (robots.txt, other schemes)."""


def _page(record: WarcRecord, url: str, path: str, parser: str) -> tuple[Page, list[Link]]:
    http = record.http_headers
    headers = {k.lower(): v for k, v in http.items()} if http is not None else {}
    status = http.status_code if http is not None else 0
    ctype = headers.get("content-type", "")
    body = recorded_body(record, headers)
    fp = fingerprint(url)
    page = Page(
        fp=fp,
        url=url,
        host=host_of(url),
        status=status,
        content_type=ctype,
        fetched_at=record.record_date.timestamp() if record.record_date else 0.0,
        warc_file=path,
        warc_offset=record.stream_pos,
        payload_digest=record.headers.get("WARC-Payload-Digest"),
    )
    links: list[str] = []
    anchors: dict[str, str] = {}
    location = headers.get("location")
    if 300 <= status < 400 and location:
        from urllib.parse import urljoin

        links = [urljoin(url, location.strip())]
    elif 200 <= status < 300 and is_html(ctype, body):
        from srcrawl.slave.parse import parse_html

        html, encoding = decode_html(body, ctype)
        parsed = parse_html(html, url, parser, utf8=utf8_source(body, html, encoding))
        page.title = parsed.title
        page.text = "" if parsed.noindex else parsed.text
        links = [] if parsed.nofollow else parsed.links
        anchors = parsed.anchors
    canonical, _invalid = canonical_links(links)
    texts = canonical_anchors(canonical, anchors) if anchors and canonical else {}
    return page, [(fp, dst, texts.get(dst)) for dst in canonical.values()]


def import_warc(
    store: Store, path: Path, *, parser: str = "lxml", name: str | None = None
) -> ImportCounts:
    """Store the pages and links of the WARC file ``path``; how many. Its pages point into
    ``name`` (an ``s3://`` URL the file was copied from), else into ``path`` itself."""
    path = path.resolve()
    name = name or str(path)
    counts = ImportCounts()
    pages: list[Page] = []
    links: list[Link] = []
    last: Page | None = None
    try:
        for record, pos in responses(path):
            if last is not None:  # its record ends where the next begins
                last.warc_length, last = pos - (last.warc_offset or 0), None
            if record is None:
                continue
            page = _one(record, name, parser, counts)
            if page is None:
                continue
            pages.append(page[0])
            links.extend(page[1])
            last = page[0]
            if len(pages) >= _BATCH:
                _save(store, pages[:-1], links, counts)
                pages, links = pages[-1:], [x for x in links if x[0] == pages[-1].fp]
    except (OSError, ValueError) as e:
        raise WarcError(f"cannot read {path}: {e}") from e
    if last is not None:
        last.warc_length = path.stat().st_size - (last.warc_offset or 0)
    _save(store, pages, links, counts)
    return counts


def _one(
    record: WarcRecord, path: str, parser: str, counts: ImportCounts
) -> tuple[Page, list[Link]] | None:
    uri = record.headers.get("WARC-Target-URI", "").strip("<>")
    try:
        url = canonicalize(uri)
    except InvalidURL:
        counts.skipped += 1
        return None
    if not url.startswith(("http://", "https://")) or url.endswith("/robots.txt"):
        counts.skipped += 1
        return None
    return _page(record, url, path, parser)


def _save(store: Store, pages: list[Page], links: list[Link], counts: ImportCounts) -> None:
    if pages:
        store.save_fetched(pages, links)
        counts.pages += len(pages)
        counts.links += len(links)
