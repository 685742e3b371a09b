"""`srcrawl bench isolation`: does a slow host cost a good site anything?

A good site (Debian's python-django-doc HTML tree, fetched once as `bench search --corpus
django-en` does, or with ``synthetic`` a test web) is served on loopback and crawled
alone by the real ``srcrawl crawl`` (``--delay 0 --delay-factor 0``: the site is ours),
then once beside each kind of slow host (srcrawl/testweb/slow_host.py: a body dripped a
byte a second, header lines forever, a chunked body that never ends, 500 MB promised, a
robots.txt that never answers), each answer held open up to ``hold`` seconds. The good
site's time is that of its own access log: from its first request to its last response.
The figure is that time beside a slow host over the time alone just before it (the
good site is crawled alone again before each kind, so that a machine whose load changes
compares like with like; 1.0: the slow host cost nothing); the whole crawl's time is
given too (it ends only when the slow host's pages reached their deadlines).
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from srcrawl.app.local import popen_child, stop_children
from srcrawl.benchmarks.index import BenchmarkError, _drop_job_keys
from srcrawl.core.defaults import BENCH_CORPUS_DEPTH
from srcrawl.settings.config import Config
from srcrawl.testweb.slow_host import KINDS, slow_host

Progress = Callable[[str], None]
Span = tuple[float, float]
"""A request's start and end on time.monotonic()."""

GOAL = 1.2
"""Most the good site's time may grow beside a slow host."""


@dataclass
class Run:
    kind: str
    """``alone``, or the kind of slow host beside the good site."""
    good_s: float
    crawl_s: float
    good_requests: int
    exit_code: int


@dataclass
class Pair:
    """The good site alone, then beside one kind of slow host, ``rounds`` times."""

    kind: str
    alone: list[Run]
    beside: list[Run]

    @property
    def alone_s(self) -> float:
        return statistics.median(r.good_s for r in self.alone)

    @property
    def beside_s(self) -> float:
        return statistics.median(r.good_s for r in self.beside)

    @property
    def ratio(self) -> float:
        """The medians' ratio: a shared machine's load changes from one crawl to the next."""
        return self.beside_s / self.alone_s if self.alone_s > 0 else float("inf")


class _LoggedHandler(SimpleHTTPRequestHandler):
    spans: list[Span]

    def do_GET(self) -> None:
        start = time.monotonic()
        super().do_GET()
        self.spans.append((start, time.monotonic()))  # the body is sent by now

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _served_tree(tree: Path) -> Iterator[tuple[list[str], Callable[[], list[Span]]]]:
    """``tree`` on a static HTTP server of loopback that notes every request's span."""
    spans: list[Span] = []
    handler = functools.partial(
        type("Handler", (_LoggedHandler,), {"spans": spans}), directory=str(tree)
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="good-site", daemon=True)
    thread.start()
    try:
        yield [f"http://127.0.0.1:{server.server_address[1]}/"], lambda: list(spans)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def _served_testweb(
    home: Path, hosts: int, pages: int
) -> Iterator[tuple[list[str], Callable[[], list[Span]]]]:
    """A test web with no slow pages of its own, its access log read for the spans."""
    from srcrawl.testweb import TestWeb

    log = home / "access.jsonl"
    with TestWeb.generate(
        hosts=hosts, pages=pages, seed=7, access_log=log, flush_interval=0.1, slow_seconds=0
    ) as web:

        def spans() -> list[Span]:
            time.sleep(0.3)  # the log is flushed every 0.1 s
            return [(e["start_mono"], e["end_mono"]) for e in web.log_entries()]

        yield web.seed_urls, spans


def good_site(
    cfg: Config, synthetic: bool, say: Progress
) -> AbstractContextManager[tuple[list[str], Callable[[], list[Span]]]]:
    """The good site served: its seeds and what its access log holds so far."""
    home = cfg.home / "bench" / "isolation"
    home.mkdir(parents=True, exist_ok=True)
    if synthetic:
        return _served_testweb(home, hosts=1, pages=600)
    from srcrawl.benchmarks.known_queries import builtin_query_file, read_query_file
    from srcrawl.benchmarks.real_corpora import unpacked_package

    tree, version = unpacked_package(cfg, read_query_file(builtin_query_file("django-en")), say)
    say(f"good site: python-django-doc {version}, {sum(1 for _ in tree.rglob('*.html'))} pages")
    return _served_tree(tree)


def _job(cfg: Config, name: str) -> Config:
    from srcrawl.benchmarks.real_corpora import corpus_config

    return corpus_config(cfg, name, bench="isolation")


def _crawl(jcfg: Config, seeds: list[str], slaves: int, say: Progress) -> tuple[float, int]:
    """``srcrawl crawl SEEDS`` as its own process: (seconds, exit code). 3 (hosts whose
    robots.txt could not be had are left) is an ending like 0 here."""
    args = ["crawl", *seeds, "--depth", str(BENCH_CORPUS_DEPTH), "--slaves", str(slaves)]
    args += ["--delay", "0", "--delay-factor", "0"]
    say(f"$ srcrawl {' '.join(args)}")
    t0 = time.monotonic()
    proc = popen_child(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        jcfg.child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        proc.wait()
    finally:
        stop_children([proc])
    if proc.returncode not in (0, 3):
        raise BenchmarkError(f"`srcrawl crawl` failed (exit {proc.returncode}); see above")
    return time.monotonic() - t0, proc.returncode


def _run(
    cfg: Config,
    kind: str,
    seeds: list[str],
    spans: Callable[[], list[Span]],
    hold: float,
    slaves: int,
    say: Progress,
) -> Run:
    """One crawl of the good site, alone or beside a slow host of ``kind``."""
    jcfg = _job(cfg, kind)
    seen = len(spans())
    try:
        if kind == "alone":
            crawl_s, code = _crawl(jcfg, seeds, slaves, say)
        else:
            with slow_host(kind, hold=hold) as slow:
                crawl_s, code = _crawl(jcfg, [*seeds, slow.url], slaves, say)
    finally:
        _drop_job_keys(jcfg)
    mine = spans()[seen:]
    if not mine:
        raise BenchmarkError(f"{kind}: the good site had no request")
    good_s = max(e for _, e in mine) - min(s for s, _ in mine)
    say(f"{kind}: good site {good_s:.2f} s ({len(mine)} requests), crawl {crawl_s:.1f} s")
    return Run(kind, good_s, crawl_s, len(mine), code)


def run_isolation(
    cfg: Config,
    *,
    kinds: tuple[str, ...] = KINDS,
    synthetic: bool = False,
    hold: float = 120.0,
    slaves: int = 2,
    rounds: int = 1,
    say: Progress = lambda s: None,
) -> list[Pair]:
    """The good site alone then beside a slow host, ``rounds`` times for each of ``kinds``."""
    pairs: list[Pair] = []
    with good_site(cfg, synthetic, say) as (seeds, spans):
        for kind in kinds:
            pair = Pair(kind, [], [])
            for _ in range(rounds):
                pair.alone.append(_run(cfg, "alone", seeds, spans, hold, slaves, say))
                pair.beside.append(_run(cfg, kind, seeds, spans, hold, slaves, say))
            pairs.append(pair)
    return pairs


def render(pairs: list[Pair]) -> str:
    """One line a kind: the medians of the good site's time alone and beside, their
    ratio, the good site's requests, the whole crawl's time beside (median) and its exits."""
    lines = [
        f"{'beside':<10} {'rounds':>6} {'alone s':>8} {'beside s':>9} {'× alone':>8} "
        f"{'requests':>13} {'crawl s':>8} {'exit':>5}"
    ]
    for p in pairs:
        mark = "" if p.ratio <= GOAL else f"  over {GOAL}×"
        requests = f"{p.alone[0].good_requests} / {p.beside[0].good_requests}"
        crawl = statistics.median(r.crawl_s for r in p.beside)
        exits = ",".join(sorted({str(r.exit_code) for r in p.beside}))
        lines.append(
            f"{p.kind:<10} {len(p.beside):>6} {p.alone_s:>8.2f} {p.beside_s:>9.2f} "
            f"{p.ratio:>8.2f} {requests:>13} {crawl:>8.1f} {exits:>5}{mark}"
        )
    return "\n".join(lines)


def as_json(pairs: list[Pair]) -> dict[str, Any]:
    def run(r: Run) -> dict[str, Any]:
        return {
            "good_site_s": round(r.good_s, 3),
            "good_requests": r.good_requests,
            "crawl_s": round(r.crawl_s, 2),
            "exit_code": r.exit_code,
        }

    return {
        "goal": GOAL,
        "kinds": [
            {
                "beside": p.kind,
                "alone": [run(r) for r in p.alone],
                "with": [run(r) for r in p.beside],
                "ratio_of_medians": round(p.ratio, 3),
            }
            for p in pairs
        ],
    }
