"""``srcrawl bench parse``: pages/s of the HTML parsers on a realistic page, or on real pages.

With ``--dir``, the pages are every ``*.html`` file under a directory (for
instance a documentation tree), read into memory and decoded once; the fast
parse paths take turns over all of them, round after round, so both meet
the same load on a shared machine.

Otherwise the page is generated, not downloaded: Chinese and English
paragraphs, a navigation bar, a sidebar, a footer, about a hundred links of
every kind a crawler meets (absolute, root-relative, relative, with queries, fragments,
``mailto:``/``javascript:``, nofollow), and inline script and style blocks.
Every run uses the same page for a given size, so figures compare.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from lxml import etree
from selectolax.lexbor import LexborHTMLParser

from srcrawl.core.errors import SrcrawlError
from srcrawl.slave.decode import decode_html, utf8_source
from srcrawl.slave.parse import ParsedPage, parse_html

BENCH_BASE_URL = "http://127.0.0.1:8080/news/2024/article-1234.html"
"""The URL the benchmark page is parsed as coming from."""

_HANZI = (
    "分布式网络爬虫系统设计与实现搜索引擎索引排序网页链接分析数据存储队列主从节点"
    "中文分词倒排索引查询处理缓存策略礼貌抓取协议服务器客户端并发线程进程调度负载均衡"
    "哈希函数统计结果实验表明性能提高明显我们提出了一种新的方法用于解决大规模问题"
)
_WORDS = [
    "crawler",
    "search",
    "engine",
    "distributed",
    "index",
    "ranking",
    "pagerank",
    "redis",
    "queue",
    "master",
    "slave",
    "politeness",
    "robots",
    "frontier",
    "fetch",
    "parse",
    "link",
    "anchor",
    "text",
    "document",
    "term",
    "posting",
    "python",
    "cluster",
    "throughput",
    "latency",
    "benchmark",
    "cache",
    "clock",
    "fingerprint",
    "canonical",
]
_SCRIPT = """
(function () {
  var config = {endpoint: "/api/track", sample: 0.25, tags: ["news", "article"]};
  function send(event, data) {
    if (Math.random() > config.sample) { return; }
    var xhr = new XMLHttpRequest();
    xhr.open("POST", config.endpoint + "?e=" + encodeURIComponent(event), true);
    xhr.setRequestHeader("Content-Type", "application/json");
    xhr.send(JSON.stringify({event: event, data: data, ts: Date.now()}));
  }
  document.addEventListener("click", function (e) {
    var a = e.target.closest("a");
    if (a && a.href) { send("click", {href: a.href, text: a.textContent.slice(0, 40)}); }
  });
  window.addEventListener("load", function () { send("load", {w: innerWidth}); });
})();
"""
_STYLE = """
body { font-family: "PingFang SC", "Microsoft YaHei", Helvetica, Arial, sans-serif; }
.nav a { display: inline-block; padding: 4px 8px; color: #333; text-decoration: none; }
.nav a:hover, .nav a.active { background: #eef; color: #003; }
article p { line-height: 1.8; margin: 0 0 1em; text-indent: 2em; }
aside ul { list-style: none; padding: 0; } aside li { margin: 2px 0; }
footer { font-size: 12px; color: #999; border-top: 1px solid #ddd; }
@media (max-width: 600px) { aside { display: none; } .nav a { padding: 2px; } }
"""


def _hanzi(rng: random.Random, n: int) -> str:
    chars = [rng.choice(_HANZI) for _ in range(n)]
    for i in range(rng.randint(8, 14), n, rng.randint(9, 16)):
        chars[i] = "，" if i % 3 else "。"
    return "".join(chars) + "。"


def _english(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "."


def _href(rng: random.Random, i: int) -> str:
    kind = i % 10
    if kind in (0, 1):
        return f"/news/2024/article-{rng.randint(1000, 9999)}.html"
    if kind in (2, 3):
        return f"article-{rng.randint(1000, 9999)}.html"
    if kind == 4:
        return f"http://127.0.0.{rng.randint(2, 9)}:8080/topic/{rng.choice(_WORDS)}/"
    if kind == 5:
        return f"/search?q={rng.choice(_WORDS)}&page={rng.randint(1, 9)}"
    if kind == 6:
        return f"../2023/archive-{rng.randint(1, 99)}.html#comments"
    if kind == 7:
        return f"https://127.0.0.{rng.randint(2, 9)}/{rng.choice(_WORDS)}/{rng.randint(1, 999)}"
    if kind == 8:
        return f"./tags/{rng.choice(_WORDS)}.html"
    return f"/user/{rng.randint(1, 500)}?tab=posts"


def make_page(size_kb: int = 30, seed: int = 2024) -> str:
    """A deterministic news-like page of about ``size_kb`` KiB of UTF-8."""
    rng = random.Random(seed)
    target = size_kb * 1024
    link_no = 0

    def link(extra: str = "") -> str:
        nonlocal link_no
        link_no += 1
        return (
            f'<a href="{_href(rng, link_no)}"{extra}>{_english(rng, rng.randint(1, 3))[:-1]}'
            f"{_hanzi(rng, rng.randint(2, 5))[:-1]}</a>"
        )

    head = (
        '<!DOCTYPE html>\n<html lang="zh-CN">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_hanzi(rng, 12)[:-1]} - Distributed Crawler News</title>\n"
        '<link rel="stylesheet" href="/static/site.css">\n'
        '<link rel="alternate" type="application/rss+xml" href="/feed.xml">\n'
        '<link rel="next" href="article-1234.html?page=2">\n'
        f"<style>{_STYLE}</style>\n<script>{_SCRIPT}</script>\n</head>\n"
    )
    nav = '<div class="nav">' + "".join(link() for _ in range(16)) + "</div>\n"
    aside = (
        "<aside><h3>相关文章 Related</h3><ul>"
        + "".join(f"<li>{link()}</li>" for _ in range(18))
        + "</ul></aside>\n"
    )
    footer = (
        "<footer><p>"
        + " | ".join(link() for _ in range(8))
        + ' <a href="mailto:editor@example.test">editor</a>'
        + ' <a href="javascript:void(0)">top</a>'
        + ' <a rel="nofollow" href="/login?next=/news">登录</a>'
        + "</p><p>©&nbsp;2024 srcrawl 新闻网&nbsp;&nbsp;版权所有</p></footer>\n"
        + f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )
    fixed = len((head + nav + aside + footer).encode())
    paragraphs: list[str] = []
    body_bytes = 0
    budget = max(target - fixed - 200, 0)
    while body_bytes < budget:
        parts = [_hanzi(rng, rng.randint(40, 90)), _english(rng, rng.randint(10, 25))]
        if rng.random() < 0.9:
            parts.insert(1, link())
        if rng.random() < 0.5:
            parts.append(link())
        p = "<p>" + " ".join(parts) + "</p>\n"
        paragraphs.append(p)
        body_bytes += len(p.encode())
    article = (
        "<body>\n<header><h1>分布式爬虫 Distributed crawling</h1></header>\n"
        + nav
        + '<article><h2>正文 <span class="date">2024-05-01</span></h2>\n'
        + "".join(paragraphs)
        + "<table><tr><th>节点</th><th>pages/s</th></tr><tr><td>1</td><td>420</td></tr>"
        + "</table></article>\n"
    )
    return head + article + aside + footer


@dataclass
class ParseBenchmark:
    """Throughput of each step: (name, pages, wall seconds, CPU seconds) per row."""

    pages: str
    """What was parsed."""
    rows: list[tuple[str, int, float, float]]
    differences: list[str] | None = None
    """Real pages the parse paths disagree on (None: not compared)."""

    def render(self) -> str:
        lines = [
            f"parse benchmark: {self.pages}, one process (pages/s per core = pages per CPU second)",
            f"  {'step':<11} {'pages':>6}  {'wall s':>8}  {'CPU s':>8}  {'pages/s per core':>16}"
            f"  {'ms/page':>8}",
        ]
        for name, pages, wall, cpu in self.rows:
            cpu = max(cpu, 1e-9)
            lines.append(
                f"  {name:<11} {pages:6d}  {wall:8.3f}  {cpu:8.3f}  {pages / cpu:16,.0f}"
                f"  {cpu / pages * 1000:8.3f}"
            )
        if self.differences is not None:
            lines.append(f"  pages the parsers disagree on: {len(self.differences)}")
            lines.extend(f"    {line}" for line in self.differences)
        return "\n".join(lines)


def _time(fn, pages: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Wall and CPU seconds of ``pages`` calls; CPU time is what one core spends,
    whatever else the machine runs meanwhile."""
    fn()  # warm up: imports, parser objects, caches of the interpreter
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(pages):
        fn()
    return time.perf_counter() - w0, time.process_time() - c0


def run_parse_benchmark(
    *, pages: int = 2000, bs4_pages: int = 100, size_kb: int = 30
) -> ParseBenchmark:
    """Parse the generated page ``pages`` times with lxml and ``bs4_pages`` with bs4.

    Also times charset decoding of the page's bytes (the step before parsing),
    libxml2 and lexbor building the tree alone (the floors of the lxml and
    lexbor paths), and the lexbor path. The
    parsers must agree on the page; a disagreement is an error, not a figure.
    """
    html = make_page(size_kb)
    body = html.encode()
    fast = parse_html(html, BENCH_BASE_URL, parser="lxml")
    slow = parse_html(html, BENCH_BASE_URL, parser="bs4")
    if fast != slow:
        raise SrcrawlError("lxml and bs4 disagree on the benchmark page")

    def source() -> bytes | None:
        return utf8_source(body, html, "utf-8")

    if parse_html(html, BENCH_BASE_URL, utf8=source()) != fast:
        raise SrcrawlError("the lxml path parses the page's bytes differently from its text")
    # libxml2 building the tree and nothing else: the floor of the lxml path,
    # to read the other figures against on a machine of any speed.
    tree_only = etree.HTMLParser(encoding="utf-8", remove_comments=True, huge_tree=True)
    lexbor = parse_html(html, BENCH_BASE_URL, "lexbor", utf8=source())
    if not same_meaning(lexbor, fast):
        raise SrcrawlError("lexbor and lxml disagree on the benchmark page")
    rows = [
        ("decode", pages, *_time(lambda: decode_html(body, "text/html"), pages)),
        ("libxml2", pages, *_time(lambda: etree.fromstring(body, tree_only), pages)),
        ("lexbor-tree", pages, *_time(lambda: LexborHTMLParser(body), pages)),
    ]
    # as a slave parses a UTF-8 page: from the fetched bytes; the fast paths take turns
    for parser in FAST_PARSERS:
        parse = lambda p=parser: parse_html(html, BENCH_BASE_URL, p, utf8=source())  # noqa: E731
        rows.append((parser, pages, *_time(parse, pages)))
    if bs4_pages > 0:
        slow_parse = lambda: parse_html(html, BENCH_BASE_URL, "bs4")  # noqa: E731
        rows.append(("bs4", bs4_pages, *_time(slow_parse, bs4_pages)))
    return ParseBenchmark(f"{len(body) / 1024:.1f} KiB page, {len(fast.links)} links", rows)


FAST_PARSERS = ("lxml", "lexbor")
"""The parse paths a slave may run; BeautifulSoup is the fallback and the reference."""


def same_meaning(page: ParsedPage, reference: ParsedPage) -> bool:
    """Same title, text, links and robots flags; anchors too once the reference has them."""
    if not reference.anchors:
        page = dataclasses.replace(page, anchors={})
    return page == reference


@dataclass
class _RealPage:
    name: str
    url: str
    html: str
    utf8: bytes | None
    size: int


def _read_pages(directory: Path) -> list[_RealPage]:
    """Every ``*.html`` under ``directory``, decoded as a slave decodes a fetched page."""
    pages = []
    for path in sorted(directory.rglob("*.html")):
        if not path.is_file():
            continue
        body = path.read_bytes()
        html, encoding = decode_html(body, "text/html")
        name = path.relative_to(directory).as_posix()
        url = "http://docs.test/" + quote(name)
        pages.append(_RealPage(name, url, html, utf8_source(body, html, encoding), len(body)))
    return pages


def _differences(pages: list[_RealPage], parsers: tuple[str, ...]) -> list[str]:
    """Pages the fast paths do not agree on, and on what."""
    out = []
    for page in pages:
        first, *others = (parse_html(page.html, page.url, p, utf8=page.utf8) for p in parsers)
        for other in others:
            if not same_meaning(other, first):
                fields = [
                    f
                    for f in ("title", "text", "links", "noindex", "nofollow")
                    if getattr(other, f) != getattr(first, f)
                ]
                out.append(
                    f"{page.name}: {other.parser} differs from {first.parser} in "
                    f"{', '.join(fields) or 'anchors'}"
                )
    return out


def run_dir_benchmark(
    directory: Path, *, rounds: int = 3, parsers: tuple[str, ...] = FAST_PARSERS
) -> ParseBenchmark:
    """Parse every ``*.html`` under ``directory`` with each of ``parsers``, ``rounds`` times.

    In each round every parser takes its turn over all the pages, so load on
    the machine falls on all of them alike. A page the parsers disagree on is
    listed in the result, not an error: real pages are what they are.
    """
    pages = _read_pages(directory)
    if not pages:
        raise SrcrawlError(f"no *.html files under {directory}")
    totals = {parser: [0.0, 0.0] for parser in parsers}
    for _ in range(rounds):
        for parser in parsers:

            def parse_all(parser: str = parser) -> None:
                for page in pages:
                    parse_html(page.html, page.url, parser, utf8=page.utf8)

            wall, cpu = _time(parse_all, 1)
            totals[parser][0] += wall
            totals[parser][1] += cpu
    links = sum(len(parse_html(p.html, p.url, utf8=p.utf8).links) for p in pages)
    size = sum(p.size for p in pages) / len(pages)
    rows = [(parser, len(pages) * rounds, wall, cpu) for parser, (wall, cpu) in totals.items()]
    return ParseBenchmark(
        f"{len(pages)} pages under {directory}, {size / 1024:.1f} KiB and "
        f"{links / len(pages):.0f} links a page on average, {rounds} rounds",
        rows,
        _differences(pages, parsers),
    )
