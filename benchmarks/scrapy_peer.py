"""A plain Scrapy spider as the peer of ``srcrawl bench crawl --peer scrapy``.

It crawls the same synthetic web from the same seeds, in a process of its
own (Scrapy's ``CrawlerProcess`` owns its reactor), under the rules srcrawl's
benchmark crawl follows:

- depth: ``DEPTH_LIMIT`` = ``--depth`` (seeds are depth 0, a redirect is one
  hop: redirects are not followed by the middleware but as a link, as
  srcrawl does);
- concurrency: ``CONCURRENT_REQUESTS`` = slaves × threads, and srcrawl's
  ``--per-host`` requests in flight per host (1 unless asked). Scrapy keys
  its download slots by host name without the port, so every
  ``127.0.0.1:PORT`` host would share one slot; each request names its
  ``host:port`` as ``download_slot`` instead, and
  ``CONCURRENT_REQUESTS_PER_DOMAIN`` = ``--per-host`` applies per slot (on
  Twisted's own reactor: see :func:`settings`);
- politeness: ``DOWNLOAD_DELAY = 0``, ``ROBOTSTXT_OBEY`` with srcrawl's user
  agent; no retries (srcrawl does not retry a fetch);
- scope: the seeds' ``host:port``;
- links: ``<a>``, ``<area>``, ``<link>`` (href), ``<frame>`` and ``<iframe>``
  (src), without ``rel=nofollow`` ones, none from a page whose robots meta
  says nofollow. What differs from srcrawl: Scrapy's ``<link>`` is any rel
  (srcrawl follows only ``rel=next``), its URL canonicalization is w3lib's,
  and its order is its scheduler's (one priority queue per slot, least busy
  slot first), not level by level, so a page first reached by a long path
  at the depth limit is not expanded where a level-by-level crawl would
  reach it sooner. With a depth that covers the web, both fetch the same
  set.

Every response counts as a page, whatever its status (robots.txt aside), and
so does a request that got no response: srcrawl stores those too. No item
pipeline runs. The child prints one JSON line: pages, requests refused by
robots.txt, its own CPU seconds (``getrusage``) and the crawl's seconds.
"""

from __future__ import annotations

import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from srcrawl.core.defaults import DEFAULT_USER_AGENT
from srcrawl.core.errors import ConfigError, SrcrawlError

LINK_TAGS = ("a", "area", "frame", "iframe", "link")
LINK_ATTRS = ("href", "src")


@dataclass
class PeerRun:
    """What the Scrapy peer did in one run."""

    pages: int
    seconds: float
    cpu_s: float
    concurrency: int
    disallowed: int = 0
    per_host: int = 1
    urls: list[str] | None = None


def require_scrapy() -> None:
    """ConfigError (one line, exit 2) when Scrapy is not installed."""
    if importlib.util.find_spec("scrapy") is None:
        raise ConfigError(
            "--peer scrapy needs Scrapy, which is not installed: pip install 'srcrawl[peer]'"
        )


def run_scrapy_peer(
    seeds: Sequence[str],
    *,
    depth: int,
    concurrency: int,
    timeout: float,
    per_host: int = 1,
    list_urls: bool = False,
    limit_s: float = 3600.0,
) -> PeerRun:
    """Crawl from ``seeds`` with the Scrapy spider in a child process; wall time includes
    the child's start-up, as srcrawl's includes its processes'. ``per_host``: requests
    in flight per host (``CONCURRENT_REQUESTS_PER_DOMAIN``)."""
    require_scrapy()
    spec = {
        "seeds": list(seeds),
        "depth": depth,
        "concurrency": concurrency,
        "per_host": per_host,
        "timeout": timeout,
        "list_urls": list_urls,
    }
    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "srcrawl.benchmarks.scrapy_peer"],
            input=json.dumps(spec).encode(),
            stdout=subprocess.PIPE,
            stderr=err,
            timeout=limit_s,
            check=False,
        )
        seconds = time.monotonic() - t0
        if done.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
            raise SrcrawlError(
                f"the Scrapy peer failed (exit {done.returncode}): "
                f"{tail[0] if tail else 'no message'}"
            )
    out = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return PeerRun(
        pages=out["pages"],
        seconds=seconds,
        cpu_s=out["cpu_s"],
        concurrency=concurrency,
        disallowed=out["disallowed"],
        per_host=per_host,
        urls=out.get("urls"),
    )


class NetlocSlot:
    """Downloader middleware: one download slot per ``host:port``, robots.txt requests too."""

    def process_request(self, request: Any, spider: Any = None) -> None:
        request.meta.setdefault("download_slot", urlsplit(request.url).netloc.lower())


def settings(spec: dict[str, Any]) -> dict[str, Any]:
    """The Scrapy settings of the peer (see the module docstring)."""
    return {
        "BOT_NAME": "srcrawl-peer",
        "USER_AGENT": DEFAULT_USER_AGENT,
        "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS": spec["concurrency"],
        "CONCURRENT_REQUESTS_PER_DOMAIN": spec.get("per_host", 1),
        "DOWNLOAD_DELAY": 0,
        "DEPTH_LIMIT": spec["depth"],
        "DOWNLOAD_TIMEOUT": spec["timeout"],
        "RETRY_ENABLED": False,
        "REDIRECT_ENABLED": False,
        "HTTPERROR_ALLOW_ALL": True,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "ERROR",
        "DOWNLOADER_MIDDLEWARES": {f"{__name__}.NetlocSlot": 50},
        # Under the asyncio reactor, Scrapy (2.19) starts the downloads of a slot's
        # queue as tasks that count themselves as transferring only once they run,
        # so a slot with several queued requests starts them all: more than one in
        # flight per host. Twisted's own reactor runs them at once and keeps the limit.
        "TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor"
        if sys.platform.startswith("linux")
        else "twisted.internet.selectreactor.SelectReactor",
    }


class _PeerLogic:
    """What the peer spider does; :func:`_spider_class` mixes it into ``scrapy.Spider``
    in the child process, the only one that imports Scrapy."""

    request_class: Any  # scrapy.Request
    html_class: Any  # scrapy.http.HtmlResponse
    ignored: Any  # scrapy.exceptions.IgnoreRequest

    def __init__(self, seeds: list[str], list_urls: bool, **kw: Any) -> None:
        from scrapy.linkextractors import LinkExtractor

        super().__init__(**kw)
        self.seeds = seeds
        self.scope = {urlsplit(s).netloc.lower() for s in seeds}
        self.links = LinkExtractor(tags=LINK_TAGS, attrs=LINK_ATTRS, deny_extensions=[])
        self.pages = 0
        self.disallowed = 0
        self.fetched: list[str] | None = [] if list_urls else None

    def request(self, url: str) -> Any:
        netloc = urlsplit(url).netloc.lower()
        return self.request_class(
            url, callback=self.parse, errback=self.failed, meta={"download_slot": netloc}
        )

    def in_scope(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and parts.netloc.lower() in self.scope

    def start_requests(self) -> Iterator[Any]:  # Scrapy < 2.13
        for url in self.seeds:
            yield self.request(url)

    async def start(self):  # Scrapy >= 2.13
        for request in self.start_requests():
            yield request

    def count(self, url: str) -> None:
        self.pages += 1
        if self.fetched is not None:
            self.fetched.append(url)

    def parse(self, response: Any) -> Iterator[Any]:
        self.count(response.url)
        if 300 <= response.status < 400:
            yield from self.redirect(response)
        elif response.status == 200 and isinstance(response, self.html_class):
            yield from self.follow(response)

    def redirect(self, response: Any) -> Iterator[Any]:
        location = response.headers.get("Location")
        if location:
            url = urljoin(response.url, location.decode("latin-1"))
            if self.in_scope(url):
                yield self.request(url)

    def follow(self, response: Any) -> Iterator[Any]:
        """The in-scope links of a page, unless its robots meta says nofollow."""
        robots = " ".join(
            response.xpath("//meta[translate(@name,'ROBTS','robts')='robots']/@content").getall()
        )
        if "nofollow" in robots.lower():
            return
        for link in self.links.extract_links(response):
            if not link.nofollow and self.in_scope(link.url):
                yield self.request(link.url)

    def failed(self, failure: Any) -> None:
        if failure.check(self.ignored):  # robots.txt said no: never requested
            self.disallowed += 1
        else:  # no response (timeout, reset): srcrawl stores these as status 0
            self.count(failure.request.url)


def _spider_class() -> type:
    import scrapy
    from scrapy.exceptions import IgnoreRequest
    from scrapy.http import HtmlResponse

    class PeerSpider(_PeerLogic, scrapy.Spider):
        name = "srcrawl-peer"
        request_class = scrapy.Request
        html_class = HtmlResponse
        ignored = IgnoreRequest

    return PeerSpider


def child_main() -> int:
    """The peer process: a JSON spec on stdin, one JSON line of results on stdout."""
    spec = json.loads(sys.stdin.read())
    from scrapy.crawler import CrawlerProcess

    spider_cls = _spider_class()
    process = CrawlerProcess(settings(spec))
    crawler = process.create_crawler(spider_cls)
    t0 = time.monotonic()
    process.crawl(crawler, seeds=spec["seeds"], list_urls=spec.get("list_urls", False))
    process.start()
    seconds = time.monotonic() - t0
    spider = crawler.spider
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {
        "pages": spider.pages,
        "disallowed": spider.disallowed,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "crawl_s": seconds,
    }
    if spider.fetched is not None:
        out["urls"] = spider.fetched
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
