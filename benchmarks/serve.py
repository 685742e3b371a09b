"""``srcrawl bench serve``: the portal's search latency and throughput under load,
beside the throughput of spawning ``srcrawl search`` once per query.

The index is the one ``bench search`` builds (generated pages in a scratch
SQLite file under ``$SRCRAWL_HOME/bench/``, built once, then reused). The
portal runs as ``srcrawl serve`` in its own process(es). The load client is
``wrk`` (a C client that leaves the cores to the server) when it is installed,
else this process (asyncio); either way one keep-alive HTTP/1.1 connection per
simulated client, each sending its next query as soon as the last answer is
read (closed loop). With a base tree, its ``srcrawl serve`` is measured
beside this tree's, cell after cell. Each cell also counts the CPU time the
server's processes took (Linux: from /proc), per request: a figure that other
work on the machine changes much less than the latency.
Queries are two distinct words of one random page, English or Chinese. With the
endpoint ``suggest``, the requests are ``/api/suggest`` of each keystroke of those
queries (``v``, ``va``, ``vac``, …), as the search box asks while they are typed.
Each round runs every (language, clients) cell for ``seconds`` and then
spawns ``srcrawl search`` for a few queries, so the two are measured side by
side under the same machine load.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from srcrawl.app.local import popen_child, stop_children
from srcrawl.benchmarks.index import (
    BenchmarkError,
    _drop_job_keys,
    bench_config,
    build_index_once,
)
from srcrawl.indexer.slave import document_text
from srcrawl.indexer.tokenizer import Tokenizer
from srcrawl.settings.config import Config
from srcrawl.sql.store import Store
from srcrawl.testweb.loadgen import timed_get

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


ENDPOINTS = ("search", "suggest")


def request_paths(endpoint: str, queries: Sequence[str]) -> list[str]:
    """The request paths of ``queries``: each a search, or each keystroke's completions."""
    if endpoint == "search":
        return ["/api/search?" + urllib.parse.urlencode({"q": q}) for q in queries]
    typed = [q[:k] for q in queries for k in range(1, len(q) + 1)]
    return ["/api/suggest?" + urllib.parse.urlencode({"q": t}) for t in typed]


# -- the load client ----------------------------------------------------------------
async def _client(
    host: str, port: int, paths: list[str], stop_at: float, ms: list[float], errors: list[int]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = random.randrange(len(paths))
    try:
        while time.perf_counter() < stop_at:
            ok, took = await timed_get(reader, writer, host, paths[i % len(paths)])
            i += 1
            ms.append(took)
            if not ok:
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
    """One measured (code, language, clients) run, or the spawn-per-query run (clients 0)."""

    lang: str
    clients: int
    requests: int
    p50: float
    p95: float
    seconds: float
    errors: int = 0
    code: str = "now"
    cpu_ms: float | None = None  # the server's CPU time per request

    @classmethod
    def of_times(
        cls,
        lang: str,
        clients: int,
        ms: list[float],
        seconds: float,
        errors: int = 0,
        code: str = "now",
    ) -> Cell:
        return cls(
            lang, clients, len(ms), _quantile(ms, 50), _quantile(ms, 95), seconds, errors, code
        )

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def _quantile(ms: list[float], q: int) -> float:
    if len(ms) < 2:
        return ms[0] if ms else float("nan")
    return statistics.quantiles(ms, n=100, method="inclusive")[q - 1]


# -- wrk, the load client in C --------------------------------------------------------
WRK_SCRIPT = """
local paths = {%s}
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function init(args)
  i = (id * 7919) %% #paths
end
function request()
  i = i %% #paths + 1
  return wrk.format("GET", paths[i])
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("srcrawl-wrk %%d %%d %%d %%.1f %%.1f\\n", summary.requests,
    e.connect + e.read + e.write + e.status + e.timeout, summary.duration,
    latency:percentile(50), latency:percentile(95)))
end
"""


def wrk_duration(seconds: float) -> str:
    """``seconds`` as wrk's ``-d``: wrk takes whole seconds (``0.5s`` is refused), so a
    fraction is rounded up; the cell's rate uses the duration wrk reports."""
    return f"{max(1, math.ceil(seconds))}s"


def wrk_load(
    url: str, paths: list[str], clients: int, seconds: float, lang: str, code: str = "now"
) -> Cell:
    """One cell driven by ``wrk`` (one thread: it needs far less than a core)."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "rotate.lua"
        script.write_text(WRK_SCRIPT % ",".join(f'"{p}"' for p in paths))
        run = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{clients}",
                f"-d{wrk_duration(seconds)}",
                "--timeout",
                "30s",
                "-s",
                str(script),
                url.rstrip("/"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    found = re.search(r"^srcrawl-wrk (\d+) (\d+) (\d+) ([\d.]+) ([\d.]+)$", run.stdout, re.M)
    if run.returncode != 0 or found is None:
        raise BenchmarkError(f"wrk failed: {(run.stderr or run.stdout)[-500:]}")
    requests, errors, micros = (int(found.group(k)) for k in (1, 2, 3))
    p50, p95 = (float(found.group(k)) / 1000 for k in (4, 5))
    return Cell(lang, clients, requests, p50, p95, micros / 1e6, errors, code)


def default_client() -> str:
    """``wrk`` when it is installed, else the Python client."""
    return "wrk" if shutil.which("wrk") else "python"


# -- the server and the spawned searches ---------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServeBenchmark:
    pages: int
    build: dict
    seconds: float
    client: str = "python"
    servers: dict[str, str] = field(default_factory=dict)  # code: its serve options
    endpoint: str = "search"
    cells: list[Cell] = field(default_factory=list)
    rss_mb: dict[str, dict[str, float]] = field(default_factory=dict)  # code: largest RSS
    in_process_ms: dict[str, float] = field(default_factory=dict)  # lang: CPU a search
    portal_ms: dict[str, float] = field(default_factory=dict)  # lang: the portal's own search

    def render(self) -> str:
        built = "" if self.build.get("reused") else f", index built in {self.build['wall_s']:.0f} s"
        lines = [
            f"serve benchmark: {self.pages:,} indexed pages{built}, "
            f"{self.seconds:g} s a cell, two-word queries"
            + (", each keystroke's /api/suggest" if self.endpoint == "suggest" else "")
            + f", load client {self.client}",
            *(f"  {code}: srcrawl serve {opts}" for code, opts in self.servers.items()),
            f"  {'code':5} {'queries':8} {'clients':>8} {'requests':>9} {'p50 ms':>8} "
            f"{'p95 ms':>8} {'req/s':>8} {'× spawn':>8} {'errors':>7} {'cpu ms':>7}",
        ]
        for lang in ("en", "zh"):
            spawn = [c for c in self.cells if c.lang == lang and c.clients == 0]
            spawn_rate = statistics.median(c.per_s for c in spawn) if spawn else 0.0
            for clients in sorted({c.clients for c in self.cells if c.lang == lang}):
                for c in (c for c in self.cells if c.lang == lang and c.clients == clients):
                    who = "spawn" if clients == 0 else str(clients)
                    times = f"{c.per_s / spawn_rate:8.1f}" if spawn_rate and clients else " " * 8
                    cpu = f"{c.cpu_ms:7.2f}" if c.cpu_ms is not None else ""
                    lines.append(
                        f"  {c.code:5} {lang:8} {who:>8} {c.requests:9} {c.p50:8.1f} "
                        f"{c.p95:8.1f} {c.per_s:8.1f} {times} {c.errors:7} {cpu}"
                    )
        if self.endpoint == "search":
            lines.append(
                "  spawn: `srcrawl search QUERY --top 10 --json` run once per query, one at a "
                "time; its latency is the whole process"
            )
        lines.append("  cpu ms: CPU time of the server's processes per request (user + system)")
        for lang, ms in self.in_process_ms.items():
            served = [
                c.cpu_ms for c in self.cells if c.lang == lang and c.code == "now" and c.cpu_ms
            ]
            ratio = f"; a request's server CPU {max(served) / ms:.2f}× it" if served and ms else ""
            lines.append(
                f"  in process, {lang}: {ms:.2f} ms CPU a search (the same queries, mean, "
                f"`Searcher.search` in this process){ratio}"
            )
            own = self.portal_ms.get(lang)
            if own:
                ratio = f"; a request's server CPU {max(served) / own:.2f}× it" if served else ""
                lines.append(
                    f"  in process, {lang}: {own:.2f} ms CPU the portal's own search (grouped "
                    f"by host, facets, its JSON){ratio}"
                )
        for code, mb in self.rss_mb.items():
            lines.append(
                f"  {code}: largest portal process after the load: RSS {mb['rss']:.0f} MB "
                f"(anonymous {mb['anon']:.0f} MB, mapped files {mb['file']:.0f} MB; "
                f"its share, PSS, {mb['pss']:.0f} MB)"
            )
        return "\n".join(lines)


def in_process_cpu(
    bcfg: Config, tok: Tokenizer, queries: dict[str, list[str]]
) -> tuple[dict[str, float], dict[str, float]]:
    """Each language's mean CPU ms of its queries in this process (after one untimed pass):
    a search as `srcrawl search` runs it, what a portal's request is judged against; and
    the portal's own search (its first page grouped by host from twice as many ranked
    pages, facets, near-identical hits folded) with its JSON, what a request adds HTTP to."""
    import orjson

    from srcrawl.indexer.search import Searcher
    from srcrawl.portal.search_pool import SearchPool

    searcher = Searcher(bcfg.store(), bcfg.index_path, tokenizer=tok)
    pool = SearchPool(bcfg.db, bcfg.index_path, threads=0)
    plain, portal = {}, {}
    try:
        for lang, qs in queries.items():
            plain[lang] = _cpu_ms(qs, lambda q: searcher.search(q, top=10))
            portal[lang] = _cpu_ms(qs, lambda q: orjson.dumps(pool.search(q, 1, 10).as_json()))
    finally:
        pool.close()
    return plain, portal


def _cpu_ms(queries: list[str], search: Callable[[str], object]) -> float:
    """Mean CPU ms of ``search`` over ``queries``, after one untimed pass."""
    for q in queries:
        search(q)
    t0 = time.thread_time()
    for q in queries:
        search(q)
    return (time.thread_time() - t0) * 1000 / len(queries)


def serve_options(threads: int, workers: int | None) -> list[str]:
    return ["--threads", str(threads)] + ([] if workers is None else ["--workers", str(workers)])


def _tree(pid: int) -> set[int]:
    """``pid`` and its descendants, from /proc (empty where there is none)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = stat.read_text()
            parent[int(stat.parent.name)] = int(raw[raw.rindex(")") + 2 :].split()[1])
    tree, grew = {pid} if pid in parent else set(), pid in parent
    while grew:
        more = {n for n, p in parent.items() if p in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def largest_rss_mb(pid: int) -> dict[str, float] | None:
    """The resident set (MB) of the largest process among ``pid`` and its descendants
    (uvicorn's workers): ``rss``, of which ``anon`` is its own memory and ``file`` mapped
    files (the index's, shared with the other workers and the page cache); None where
    there is no /proc."""
    found = []
    for n in _tree(pid):
        with contextlib.suppress(OSError, ValueError):
            fields = dict(
                line.split(":", 1) for line in Path(f"/proc/{n}/status").read_text().splitlines()
            )
            kb = {
                k: int(fields[v].split()[0])
                for k, v in (("rss", "VmRSS"), ("anon", "RssAnon"), ("file", "RssFile"))
            }
            kb["pss"] = _pss_kb(n)
            found.append({k: v / 1024 for k, v in kb.items()})
    return max(found, key=lambda f: f["rss"]) if found else None


def _pss_kb(pid: int) -> int:
    """The process's proportional share of its resident set: each page shared by n
    processes (the index's mapped files, by every worker) counted 1/n; 0 where unknown."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by process ``pid`` and its descendants
    (uvicorn's worker processes), from /proc; None where there is no /proc."""
    proc = Path("/proc")
    if not (proc / str(pid) / "stat").exists():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = stat.read_text()
            fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (name) "
            n = int(stat.parent.name)
            parent[n], cpu[n] = int(fields[1]), (int(fields[11]) + int(fields[12])) / tick
    tree, grew = {pid}, True
    while grew:
        more = {n for n, p in parent.items() if p in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(cpu.get(n, 0.0) for n in tree)


@dataclass
class Server:
    url: str
    pid: int


@contextlib.contextmanager
def portal_process(
    bcfg: Config, options: Sequence[str], tree: str | None = None, wait: float = 120.0
) -> Iterator[Server]:
    """``srcrawl serve`` (of ``tree``, else this code) on a free loopback port, started and
    healthy."""
    port = _free_port()
    env = bcfg.child_env()
    if tree is not None:
        env["PYTHONPATH"] = str(Path(tree).resolve())
    args = [sys.executable, "-m", "srcrawl.app.cli", "serve", "--port", str(port), *options]
    proc = popen_child(args, env, stdin=subprocess.DEVNULL, cwd=tree)
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
        yield Server(url, proc.pid)
    finally:
        stop_children([proc])


def _spawned(bcfg: Config, lang: str, queries: Sequence[str]) -> Cell:
    env = bcfg.child_env()
    ms = []
    t0 = time.perf_counter()
    for q in queries:
        t = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "srcrawl.app.cli", "search", q, "--top", "10", "--json"],
            env=env,
            capture_output=True,
            check=False,
        )
        if run.returncode != 0:
            raise BenchmarkError(f"srcrawl search {q!r} failed: {run.stderr.decode()[-500:]}")
        ms.append((time.perf_counter() - t) * 1000)
    return Cell.of_times(lang, 0, ms, time.perf_counter() - t0)


@dataclass
class _Load:
    """How each cell is driven: the client, the seconds, the client counts."""

    client: str
    seconds: float
    clients: Sequence[int]
    endpoint: str = "search"

    def cell(self, server: Server, paths: list[str], n: int, lang: str, code: str) -> Cell:
        cpu0 = tree_cpu_seconds(server.pid)
        if self.client == "wrk":
            cell = wrk_load(server.url, paths, n, self.seconds, lang, code)
        else:
            ms, errors = asyncio.run(_load(server.url, paths, n, self.seconds))
            cell = Cell.of_times(lang, n, ms, self.seconds, errors, code)
        cpu1 = tree_cpu_seconds(server.pid)
        if cpu0 is not None and cpu1 is not None and cell.requests:
            cell.cpu_ms = (cpu1 - cpu0) * 1000 / cell.requests
        return cell


def _round(
    r: int, load: _Load, servers: dict[str, Server], queries: dict[str, list[str]], say: Progress
) -> list[Cell]:
    """One round: per language and client count, each server in turn."""
    cells = []
    codes = list(servers) if r % 2 == 0 else list(reversed(servers))
    for lang, qs in queries.items():
        paths = request_paths(load.endpoint, qs)
        for server in servers.values():
            # warm the server's threads (and build each worker's completions)
            asyncio.run(_load(server.url, paths, 2, 1.0 if load.endpoint == "search" else 5.0))
        for n in load.clients if r % 2 == 0 else list(reversed(load.clients)):
            for code in codes:
                say(f"round {r + 1}: {code}, {lang}, {n} client(s) …")
                cells.append(load.cell(servers[code], paths, n, lang, code))
    return cells


def run_serve_benchmark(
    cfg: Config,
    *,
    pages: int = 50_000,
    clients: Sequence[int] = (1, 10, 50),
    seconds: float = 5.0,
    rounds: int = 1,
    spawns: int = 5,
    threads: int | None = None,
    workers: int | None = None,
    client: str | None = None,
    base: str | None = None,
    endpoint: str = "search",
    slaves: int = 2,
    seed: int = 1,
    say: Progress = print,
) -> ServeBenchmark:
    """Each round: per language and client count, the portal (and the base tree's, beside it);
    then per language the spawned searches."""
    from srcrawl.portal.server import default_threads, default_workers

    client = client or default_client()
    workers = workers or default_workers()  # named, so the report says what ran
    if client == "wrk" and not shutil.which("wrk"):
        raise BenchmarkError("wrk is not installed (Debian: apt-get install wrk)")
    bcfg = bench_config(cfg, pages, seed)
    try:
        build = build_index_once(bcfg, pages, seed, slaves, say)
        tok = Tokenizer()
        tok.warm_up()
        store = bcfg.store()
        queries = {lang: two_word_queries(store, tok, 200, lang, seed) for lang in ("en", "zh")}
        now_options = serve_options(default_threads(bcfg) if threads is None else threads, workers)
        servers = {"now": " ".join(now_options)}
        # the base may not know --workers, nor --threads 0: it runs as it would by default
        base_options = serve_options(threads, None) if threads else []
        if base is not None:
            servers["base"] = " ".join(base_options) or "(its defaults)"
        result = ServeBenchmark(pages, build, seconds, client, servers, endpoint=endpoint)
        load = _Load(client, seconds, clients, endpoint)
        with contextlib.ExitStack() as stack:
            running = {"now": stack.enter_context(portal_process(bcfg, now_options))}
            if base is not None:
                running["base"] = stack.enter_context(portal_process(bcfg, base_options, tree=base))
            say("portals at " + ", ".join(f"{c} {s.url}" for c, s in running.items()))
            for r in range(rounds):
                result.cells += _round(r, load, running, queries, say)
                for lang, qs in queries.items() if endpoint == "search" else ():
                    say(f"round {r + 1}: {lang}, spawning srcrawl search {spawns}× …")
                    result.cells.append(_spawned(bcfg, lang, qs[:spawns]))
            if endpoint == "search":
                result.in_process_ms, result.portal_ms = in_process_cpu(bcfg, tok, queries)
            for code, server in running.items():
                rss = largest_rss_mb(server.pid)
                if rss is not None:
                    result.rss_mb[code] = rss
        return result
    finally:
        _drop_job_keys(bcfg)
        bcfg.close()
