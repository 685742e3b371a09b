"""``srcrawl bench freshness``: how fresh the store stays at a fixed crawl budget.

Two crawls run side by side, each an always-on master (``--keep-running``) and
one slave, each against its own copy of the same changing test web (one
seeded change schedule, see srcrawl/testweb/changes.py, drawn per host index
and path so both copies change the same pages at the same times): one with
the adaptive revisit schedule (or ``nutch``), one with a uniform revisit at
the interval that spends the same budget. The budget (fetches per second) is enforced by
politeness: every crawled host gets one request in flight and waits
``hosts / budget`` seconds between two, so neither crawl can fetch more.

Freshness is sampled twice a second once both first crawls are over: the
share of the web's pages whose stored version (its ETag names it, a 404/410
a page gone) is the one live at that moment. Bytes are the response bodies
the servers sent (their access logs); a 304 sends none, and what it saved is
the body of the version it confirmed.

With ``sitemap_every`` the measured crawl's web serves a sitemap per host whose
``<lastmod>`` is each page's live version (ChangeSchedule.sitemap), and its
master reads it again every that many seconds (``--sitemap-every``): a page whose
lastmod is newer than its last fetch is due at once. Those sitemap (and robots.txt)
requests go through the host's politeness like any other, so they are
paid out of the same budget; they are counted apart (``meta``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.testweb.changes import SITEMAP_PATH, ChangeSchedule, live_version, version_of_etag

Progress = Callable[[str], None]

POLICIES = ("adaptive", "uniform")
"""The policy measured and its baseline, by default (``--policy nutch`` measures Nutch's)."""
SAMPLE_EVERY = 0.5
WARMUP_FACTOR = 4.0
"""The first crawls may take this × the uniform interval before sampling starts anyway."""


@dataclass
class FreshnessRun:
    """One side of the comparison."""

    policy: str
    web: TestWeb
    cfg: Config
    procs: list[subprocess.Popen] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    fetches: int = 0
    meta: int = 0
    """robots.txt and sitemap requests of the sampling window (paid from the budget)."""
    not_modified: int = 0
    body_bytes: int = 0
    saved_bytes: int = 0

    @property
    def freshness(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else 0.0


@dataclass(frozen=True)
class FreshnessSetup:
    hosts: int
    pages: int
    budget: float
    duration: float
    seed: int
    sitemap_every: float = 0.0
    """Seconds between two reads of a host's sitemap by the measured crawl (0: none)."""

    @property
    def crawled_hosts(self) -> int:
        return self.hosts - 1  # host 0 holds the special pages (slow, traps): not crawled

    @property
    def delay(self) -> float:
        return self.crawled_hosts / self.budget

    @property
    def interval(self) -> float:
        """The uniform revisit that spends the budget: every page once per interval."""
        return self.crawled_hosts * (self.pages + 5) / self.budget


def measured_pages(run: FreshnessRun) -> list[str]:
    """The regular pages of the crawled hosts: the ones the schedule changes or not."""
    origins = tuple(h.origin + "/" for h in run.web.web.hosts[1:])
    return sorted(
        u for u, p in run.web.web.pages.items() if p.template == "regular" and u.startswith(origins)
    )


def sample(run: FreshnessRun, urls: list[str], now: float) -> float:
    """The share of ``urls`` whose stored version is the one live at ``now``."""
    rows = run.cfg.store()._query("SELECT url, status, etag FROM pages")
    stored = {u: (None if s in (404, 410) else version_of_etag(e)) for u, s, e in rows}
    fresh = sum(1 for u in urls if u in stored and stored[u] == live_version(run.web.web, u, now))
    return fresh / len(urls)


def _options(setup: FreshnessSetup, policy: str) -> list[str]:
    d = f"{setup.delay:g}"
    interval = setup.interval
    common = [
        "--depth",
        "8",
        "--delay",
        d,
        "--delay-factor",
        "0",
        "--max-delay",
        d,
        "--fetch-timeout",
        "5",
        "--revisit",
        f"{interval:g}s",
    ]
    if policy == "uniform":
        return [*common, "--revisit-policy", "uniform"]
    if setup.sitemap_every:
        common += ["--sitemap-every", f"{setup.sitemap_every:g}s"]
    return [
        *common,
        "--revisit-policy",
        policy,
        "--min-revisit",
        "1s",
        "--max-revisit",
        f"{interval * 6:g}s",
    ]


def _start(run: FreshnessRun, setup: FreshnessSetup, log: Path) -> None:
    env = run.cfg.child_env()
    cli = [sys.executable, "-m", "srcrawl.app.cli"]
    seeds = [h.root for h in run.web.web.hosts[1:]]
    out = open(log, "a")  # noqa: SIM115 - the children hold it
    master = [*cli, "master", "start", *seeds, *_options(setup, run.policy), "--keep-running"]
    for args in (master, [*cli, "slave", "start", "--phases", "crawl", "--threads", "8"]):
        run.procs.append(
            subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        )


def _stop(run: FreshnessRun) -> None:
    for proc in reversed(run.procs):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in run.procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _count_bytes(run: FreshnessRun, since: float, until: float) -> None:
    """Fetches, 304s and body bytes of the sampling window, from the access log."""
    last_body: dict[str, int] = {}
    for e in run.web.log_entries():
        url = e.get("url")
        if url is None:
            continue
        if url.endswith(("/robots.txt", SITEMAP_PATH)):
            run.meta += since <= e["start"] < until
            continue
        if e["status"] == 200:
            last_body[url] = e["bytes"]
        if not since <= e["start"] < until:
            continue
        run.fetches += 1
        run.body_bytes += e["bytes"]
        if e["status"] == 304:
            run.not_modified += 1
            run.saved_bytes += last_body.get(url, 0)


def _runs(
    cfg: Config, setup: FreshnessSetup, tmp: Path, start: float, policies: tuple[str, str]
) -> list[FreshnessRun]:
    gone_after = setup.interval * WARMUP_FACTOR + setup.duration
    schedule = ChangeSchedule(
        start=start,
        seed=setup.seed,
        changing=0.5,
        gone=0.05,
        periods=(4.0, 8.0, 16.0),
        gone_after=gone_after,
    )
    runs = []
    for policy in policies:
        web = TestWeb.generate(
            hosts=setup.hosts,
            pages=setup.pages,
            seed=setup.seed,
            changes=schedule,
            crawl_delay=setup.delay,
            robots_failures=0,
            access_log=tmp / f"{policy}.access.log",
        )
        # each copy has ports of its own: draw each page's changes from its host's index
        # and path, so both crawls face the same pages changing at the same times
        origins = tuple(h.origin for h in web.web.hosts)
        sitemap = policy != "uniform" and setup.sitemap_every > 0
        web.web.changes = replace(schedule, origins=origins, sitemap=sitemap)
        env = cfg.with_job(f"{cfg.job}-fresh-{policy}").child_env()
        env.pop("SRCRAWL_DB_URL_FILE", None)
        env["SRCRAWL_DB_URL"] = f"sqlite:///{tmp}/{policy}.db"  # a store of its own
        runs.append(FreshnessRun(policy, web, Config.load(env=env)))
    return runs


def run_freshness_benchmark(
    cfg: Config,
    *,
    hosts: int,
    pages: int,
    budget: float,
    duration: float,
    seed: int,
    say: Progress,
    policy: str = POLICIES[0],
    sitemap_every: float = 0.0,
) -> tuple[FreshnessSetup, list[FreshnessRun]]:
    """Both crawls side by side (see the module doc); their runs, measured."""
    setup = FreshnessSetup(hosts, pages, budget, duration, seed, sitemap_every)
    with tempfile.TemporaryDirectory(prefix="srcrawl-fresh-") as tmp_dir:
        tmp = Path(tmp_dir)
        runs = _runs(cfg, setup, tmp, time.time(), (policy, POLICIES[1]))
        try:
            for run in runs:
                run.web.start()
                run.cfg.store().init_schema()
                _start(run, setup, tmp / f"{run.policy}.log")
            since, until = _measure(runs, setup, say)
        finally:
            for run in runs:
                _stop(run)
                run.web.stop()
        for run in runs:
            _count_bytes(run, since, until)
            _drop(run.cfg)
    return setup, runs


def _measure(runs: list[FreshnessRun], setup: FreshnessSetup, say: Progress) -> tuple[float, float]:
    """Wait for both first crawls, then sample freshness for the duration; the window."""
    urls = {r.policy: measured_pages(r) for r in runs}  # each web has its own ports
    deadline = time.time() + setup.interval * WARMUP_FACTOR
    while time.time() < deadline:
        held = [len(r.cfg.store()._query("SELECT fp FROM pages")) for r in runs]
        say(f"first crawls: {held} pages stored")
        if all(_has_all(r, urls[r.policy]) for r in runs):
            break
        _check_alive(runs)
        time.sleep(1.0)
    since = time.time()
    while time.time() < since + setup.duration:
        now = time.time()
        for run in runs:
            run.samples.append(sample(run, urls[run.policy], now))
        _check_alive(runs)
        say(
            " ".join(f"{r.policy} {r.freshness:.1%}" for r in runs)
            + f" ({now - since:.0f}/{setup.duration:.0f} s)"
        )
        time.sleep(max(0.0, SAMPLE_EVERY - (time.time() - now)))
    return since, time.time()


def _has_all(run: FreshnessRun, urls: list[str]) -> bool:
    stored = {u for (u,) in run.cfg.store()._query("SELECT url FROM pages")}
    return set(urls) <= stored


def _check_alive(runs: list[FreshnessRun]) -> None:
    for run in runs:
        for proc in run.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a {run.policy} crawl process exited ({proc.returncode})")


def _drop(cfg: Config) -> None:
    from srcrawl.master.crawl_master import reset_crawl

    reset_crawl(cfg)
    cfg.close()


def render(setup: FreshnessSetup, runs: list[FreshnessRun]) -> str:
    """The side-by-side table and the two ratios the goals are stated in."""
    sitemaps = f", sitemaps read every {setup.sitemap_every:g} s" if setup.sitemap_every else ""
    lines = [
        f"{setup.crawled_hosts} hosts × {setup.pages} pages, budget {setup.budget:g} "
        f"fetches/s, uniform revisit {setup.interval:g} s, sampled {setup.duration:g} s" + sitemaps,
        f"{'policy':<9} {'freshness':>9} {'fetches':>8} {'meta':>5} {'304s':>6} "
        f"{'body bytes':>11} {'without 304':>12} {'saved':>6}",
    ]
    for r in runs:
        without = r.body_bytes + r.saved_bytes
        saved = r.saved_bytes / without if without else 0.0
        lines.append(
            f"{r.policy:<9} {r.freshness:>9.1%} {r.fetches:>8} {r.meta:>5} "
            f"{r.not_modified:>6} {r.body_bytes:>11} {without:>12} "
            f"{saved:>6.0%}"
        )
    adaptive, uniform = runs
    ratio = adaptive.freshness / uniform.freshness if uniform.freshness else float("inf")
    fewer = 1 - adaptive.body_bytes / uniform.body_bytes if uniform.body_bytes else 0.0
    lines.append(
        f"{adaptive.policy}/uniform freshness: {ratio:.2f}×; {adaptive.policy} body "
        f"bytes {fewer:.0%} fewer than uniform's"
    )
    return "\n".join(lines)
