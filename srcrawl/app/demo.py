"""``srcrawl demo``: the whole engine on a synthetic web, in under a minute.

It serves the test web on loopback, then runs the same commands a user runs
— crawl with 4 slaves, index, PageRank, search — each as its own process
writing to this one's terminal, so each step's progress shows as it runs.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from srcrawl.app.local import popen_child, stop_children
from srcrawl.core.defaults import DEFAULT_SQLITE_NAME, DEFAULT_TESTWEB_LOG_FLUSH
from srcrawl.core.errors import SrcrawlError
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.testweb.accesslog import idle_stretches

DEMO_JOB = "demo"


def demo_config(cfg: Config) -> Config:
    """The demo's own job, and its own SQLite file when the store is the embedded default."""
    from dataclasses import replace

    from srcrawl.settings.config import DatabaseURL

    demo = cfg.with_job(DEMO_JOB)
    if demo.db.kind == "sqlite" and Path(demo.db.path) == cfg.home / DEFAULT_SQLITE_NAME:
        demo = replace(
            demo,
            db=DatabaseURL(kind="sqlite", path=str(cfg.home / "demo.db"), create_dirs=True),
            _cache={},
        )
    return demo


def run_demo(
    cfg: Config,
    *,
    slaves: int = 4,
    hosts: int = 4,
    pages: int = 60,
    echo: Callable[[str], None] = print,
    serve: bool = False,
) -> None:
    """The demo's steps; with ``serve``, then the search portal on its store until Ctrl-C."""
    cfg = demo_config(cfg)
    step = _Steps(cfg, echo)
    t_start = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="srcrawl-demo-") as tmp,
        TestWeb.generate(
            hosts=hosts,
            pages=pages,
            seed=1,
            slow_seconds=2,
            access_log=Path(tmp) / "access.jsonl",
            large_bytes=1_000_000,
            robots_failures=1,
        ) as web,
    ):
        echo(
            f"synthetic web: {hosts} hosts × {pages} pages on loopback: " + ", ".join(web.seed_urls)
        )
        step("crawl", _crawl_args(web, slaves))
        echo(idle_note(web))
        crawled = {p.url for p in cfg.store().iter_pages()}
        step("index", ["index", "--slaves", str(min(slaves, 2))])
        step("pagerank", ["pagerank", "--iterations", "30", "--slaves", str(min(slaves, 2))])
        queries = [q for q, _ in web.web.known_items(within=crawled, lang="en")[:1]]
        queries += [q for q, _ in web.web.known_items(within=crawled, lang="zh")[:1]]
        for q in queries:
            step("search", ["search", q, "--top", "3"])
    from srcrawl.portal.readiness import serve_command

    store = "" if cfg.db.kind != "sqlite" else f" --db-url sqlite:///{cfg.db.path}"
    query = queries[0] if queries else "..."
    # the demo's job and store are not the defaults: a bare `srcrawl serve` would open
    # another (empty) job, so the commands printed name both
    echo(
        f"\ndemo done in {time.monotonic() - t_start:.1f} s; the job is {cfg.job!r}, "
        f"its store {cfg.db.redacted()}. Look at the result with:\n"
        f"  srcrawl --job {cfg.job}{store} status\n"
        f"  srcrawl --job {cfg.job}{store} search {shlex.quote(query)}\n"
        f"  {serve_command(cfg)}   (the search portal)"
    )
    if cfg.embedded:
        echo("The embedded Redis keeps running for them; `srcrawl down` stops it.")
    if serve:
        serve_demo_portal(cfg, echo, serve_command(cfg))


class _Steps:
    """Runs each demo step as its own `srcrawl` process writing to this terminal."""

    def __init__(self, cfg: Config, echo: Callable[[str], None]) -> None:
        self.env = cfg.child_env()
        self.cli = [sys.executable, "-m", "srcrawl.app.cli"]
        self.echo = echo

    def __call__(self, title: str, args: list[str]) -> None:
        self.echo(f"\n$ srcrawl {' '.join(args)}")
        t0 = time.monotonic()
        proc = popen_child([*self.cli, *args], self.env, stdin=subprocess.DEVNULL)
        try:
            code = proc.wait()
        finally:
            stop_children([proc])  # interrupted: the step stops (and stops its own children)
        if code != 0:
            raise SrcrawlError(f"{title} failed (exit {code}); its error is above")
        self.echo(f"  ({title}: {time.monotonic() - t0:.1f} s)")


def _crawl_args(web: TestWeb, slaves: int) -> list[str]:
    """The demo's crawl: our own site, so a short delay instead of the polite default."""
    return [
        "crawl",
        *web.seed_urls,
        "--depth",
        "3",
        "--slaves",
        str(slaves),
        "--delay",
        "0.02",
        "--delay-factor",
        "0",
        "--max-delay",
        "1",
        "--fetch-timeout",
        "1",
        "--robots-defer",
        "0.2",
    ]


def idle_note(web: TestWeb) -> str:
    """How long the web had no request in flight during the crawl (its access log)."""
    time.sleep(DEFAULT_TESTWEB_LOG_FLUSH + 0.2)  # the log's last lines are written
    idle = idle_stretches(web.log_entries())
    longest = f", the longest {idle[0]:.1f} s" if idle else ""
    return f"  (the web had nothing in flight for {sum(idle):.1f} s of it{longest})"


def serve_demo_portal(
    cfg: Config, echo: Callable[[str], None], command: str, port: int = 8080
) -> None:
    """The search portal on the demo's store, on ``port`` or, if taken, any free port."""
    from srcrawl.portal.server import build_portal
    from srcrawl.portal.server import serve as serve_portal

    portal = build_portal(cfg)
    echo(f"\nthe demo's search portal (later: `{command}`):")
    try:
        serve_portal(portal, "127.0.0.1", port, announce=echo)
    except SrcrawlError:  # the port is taken: any free one
        serve_portal(portal, "127.0.0.1", 0, announce=echo)
