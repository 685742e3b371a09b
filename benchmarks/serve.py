"""``srcrawl bench serve``: the portal's search latency and throughput under load,
beside the throughput of spawning ``srcrawl search`` once per query.

The index is the one ``bench search`` builds (generated pages in a scratch
SQLite file under ``$SRCRAWL_HOME/bench/``, built once, then reused). The
portal runs as ``srcrawl serve`` in its own process; the load client is this
process: asyncio, one keep-alive HTTP/1.1 connection per simulated client,
each sending its next query as soon as the last answer is read (closed loop).
Queries are two distinct words of one random page, English or Chinese.
Each round runs every (language, clients) cell for ``seconds`` and then
spawns ``srcrawl search`` for a few queries, so the two are measured side by
side under the same machine load.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from srcrawl.benchmarks.index import (
    BenchmarkError,
    _drop_job_keys,
    bench_config,
    build_index_once,
)
from srcrawl.config import Config
from srcrawl.indexer.slave import document_text
from srcrawl.indexer.tokenizer import Tokenizer
from srcrawl.local import popen_child, stop_children
from srcrawl.sql.store import Store

Progress = Callable[[str], None]
_EN = re.compile(r"^[a-z]+$")
_ZH = re.compile(r"^[\u4e00-\u9fff]+$")


def two_word_queries(store: Store, tok: Tokenizer, n: int, lang: str, seed: int) -> list[str]:
    """``n`` queries of two distinct ``lang`` ("en" or "zh") terms of one random page."""
    rng = random.Random(f"serve-{lang}-{seed}")
    wanted = _EN if lang == "en" else _ZH
    fps = [p.fp for p in store.iter_pages(batch=5000)]
    out: list[str] = []
    while len(out) < n:
        [(_fp, _at, _url, title, text)] = store.index_documents([rng.choice(fps)])
        terms = [
            t for t in dict.fromkeys(tok.tokens(document_text(title, text))) if wanted.match(t)
        ]
        if len(terms) >= 2:
            out.append(" ".join(rng.sample(terms, 2)))
    return out


# -- the load client ----------------------------------------------------------------
async def _client(
    host: str, port: int, paths: list[str], stop_at: float, ms: list[float], errors: list[int]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = random.randrange(len(paths))
    try:
        while time.perf_counter() < stop_at:
            path = paths[i % len(paths)]
            i += 1
            t0 = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            ms.append((time.perf_counter() - t0) * 1000)
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(1)
    finally:
        writer.close()


async def _load(
    url: str, paths: list[str], clients: int, seconds: float
) -> tuple[list[float], int]:
    parts = urllib.parse.urlsplit(url)
    ms: list[float] = []
    errors: list[int] = []
    stop_at = time.perf_counter() + seconds
    await asyncio.gather(
        *(_client(parts.hostname, parts.port, paths, stop_at, ms, errors) for _ in range(clients))
    )
    return ms, len(errors)


@dataclass
class Cell:
    """One measured (language, clients) run, or the spawn-per-query run (clients 0)."""

    lang: str
    clients: int
    ms: list[float]
    seconds: float
    errors: int = 0

    @property
    def per_s(self) -> float:
        return len(self.ms) / self.seconds if self.seconds else 0.0

    def quantile(self, q: int) -> float:
        if len(self.ms) < 2:
            return self.ms[0] if self.ms else float("nan")
        return statistics.quantiles(self.ms, n=100, method="inclusive")[q - 1]


@dataclass
class ServeBenchmark:
    pages: int
    build_s: float | None
    seconds: float
    cells: list[Cell] = field(default_factory=list)

    def render(self) -> str:
        built = f", index built in {self.build_s:.0f} s" if self.build_s is not None else ""
        lines = [
            f"serve benchmark: {self.pages:,} indexed pages{built}, "
            f"{self.seconds:g} s a cell, two-word queries",
            f"  {'queries':8} {'clients':>8} {'requests':>9} {'p50 ms':>8} {'p95 ms':>8} "
            f"{'req/s':>8} {'× spawn':>8} {'errors':>7}",
        ]
        for lang in ("en", "zh"):
            spawn = [c for c in self.cells if c.lang == lang and c.clients == 0]
            spawn_rate = statistics.median(c.per_s for c in spawn) if spawn else 0.0
            for clients in sorted({c.clients for c in self.cells if c.lang == lang}):
                for c in (c for c in self.cells if c.lang == lang and c.clients == clients):
                    who = "spawn" if clients == 0 else str(clients)
                    times = f"{c.per_s / spawn_rate:8.1f}" if spawn_rate and clients else " " * 8
                    lines.append(
                        f"  {lang:8} {who:>8} {len(c.ms):9} {c.quantile(50):8.1f} "
                        f"{c.quantile(95):8.1f} {c.per_s:8.1f} {times} {c.errors:7}"
                    )
        lines.append(
            "  spawn: `srcrawl search QUERY --top 10 --json` run once per query, one at a "
            "time; its latency is the whole process"
        )
        return "\n".join(lines)


# -- the server and the spawned searches ---------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def portal_process(bcfg: Config, threads: int, wait: float = 120.0) -> Iterator[str]:
    """``srcrawl serve`` on a free loopback port, started and healthy; yields its URL."""
    port = _free_port()
    proc = popen_child(
        [
            sys.executable,
            "-m",
            "srcrawl.cli",
            "serve",
            "--port",
            str(port),
            "--threads",
            str(threads),
        ],
        bcfg.child_env(),
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + wait
        while True:
            if proc.poll() is not None:
                raise BenchmarkError(f"srcrawl serve exited with {proc.returncode}")
            health = url + "healthz"
            with contextlib.suppress(OSError), urllib.request.urlopen(health, timeout=2) as r:
                if r.status == 200:
                    break
            if time.monotonic() > deadline:
                raise BenchmarkError(f"srcrawl serve not healthy after {wait:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        stop_children([proc])


def _spawned(bcfg: Config, lang: str, queries: Sequence[str]) -> Cell:
    env = bcfg.child_env()
    ms = []
    t0 = time.perf_counter()
    for q in queries:
        t = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "srcrawl.cli", "search", q, "--top", "10", "--json"],
            env=env,
            capture_output=True,
            check=False,
        )
        if run.returncode != 0:
            raise BenchmarkError(f"srcrawl search {q!r} failed: {run.stderr.decode()[-500:]}")
        ms.append((time.perf_counter() - t) * 1000)
    return Cell(lang, 0, ms, time.perf_counter() - t0)


def run_serve_benchmark(
    cfg: Config,
    *,
    pages: int = 50_000,
    clients: Sequence[int] = (1, 10, 50),
    seconds: float = 5.0,
    rounds: int = 1,
    spawns: int = 5,
    threads: int = 4,
    slaves: int = 2,
    seed: int = 1,
    say: Progress = print,
) -> ServeBenchmark:
    """Each round: per language, the portal at each client count, then the spawned searches."""
    bcfg = bench_config(cfg, pages, seed)
    try:
        build_s = build_index_once(bcfg, pages, seed, slaves, say)
        tok = Tokenizer()
        tok.warm_up()
        store = bcfg.store()
        queries = {lang: two_word_queries(store, tok, 200, lang, seed) for lang in ("en", "zh")}
        result = ServeBenchmark(pages, build_s, seconds)
        with portal_process(bcfg, threads) as url:
            say(f"portal at {url}")
            for r in range(rounds):
                for lang, qs in queries.items():
                    paths = ["/api/search?" + urllib.parse.urlencode({"q": q}) for q in qs]
                    asyncio.run(_load(url, paths, 2, 1.0))  # warm the server's threads
                    for n in clients if r % 2 == 0 else list(reversed(clients)):
                        say(f"round {r + 1}/{rounds}: {lang}, {n} client(s) …")
                        ms, errors = asyncio.run(_load(url, paths, n, seconds))
                        result.cells.append(Cell(lang, n, ms, seconds, errors))
                    say(f"round {r + 1}/{rounds}: {lang}, spawning srcrawl search {spawns}× …")
                    result.cells.append(_spawned(bcfg, lang, qs[:spawns]))
        return result
    finally:
        _drop_job_keys(bcfg)
        bcfg.close()
