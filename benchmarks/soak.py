"""``srcrawl bench soak``: the always-on engine for a long while; does anything grow?

It runs what docker compose runs — ``master start --keep-running``, crawl
slaves, ``index --follow``, ``pagerank --every``, ``serve`` — against the
changing test web (pages change every few seconds, some disappear), with a
steady search load on the portal, each process in its own process group
with its own log, over a store, WARC directory and Redis job of its own.

Every ``--every`` seconds it samples each process's resident memory and open
files (with its children: ``index`` and ``pagerank`` run local slaves),
Redis's ``used_memory`` per URL scheduled, and the bytes of the store, the
WARC files and the index per stored page. What counts is the growth over
the second half of the run, once the first crawl is over and the engine
only revisits: the median of the last three samples against the median of
the first three of the second half. It counts the error lines in every log.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import median

import psutil
import requests

from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb
from srcrawl.testweb.changes import ChangeSchedule

Progress = Callable[[str], None]

ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL|Traceback)\b")
SEARCHES_PER_SECOND = 4.0
EDGE = 3
"""Samples whose median stands for the start and the end of the second half."""


@dataclass
class SoakSetup:
    duration: float
    every: float
    hosts: int = 6
    pages: int = 40
    seed: int = 7
    slaves: int = 2


@dataclass
class SoakRun:
    setup: SoakSetup
    samples: list[dict] = field(default_factory=list)
    errors: dict[str, list[str]] = field(default_factory=dict)
    searches: int = 0
    failed_searches: int = 0

    def series(self, name: str) -> list[float]:
        return [s[name] for s in self.samples if s.get(name) is not None]

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for s in self.samples:
            seen.update(dict.fromkeys(k for k in s if k != "t"))
        return list(seen)

    def growth(self) -> dict[str, float]:
        """Each series' growth over the second half (a share: 0.05 is 5 %)."""
        out = {}
        half = [s for s in self.samples if s["t"] >= self.setup.duration / 2]
        for name in self.names():
            values = [s[name] for s in half if s.get(name) is not None]
            if len(values) < 2 * EDGE:
                continue
            first, last = median(values[:EDGE]), median(values[-EDGE:])
            out[name] = (last - first) / first if first else 0.0
        return out


class _Engine:
    """The processes of the always-on engine, each with its own log."""

    def __init__(self, cfg: Config, tmp: Path, web: TestWeb, setup: SoakSetup) -> None:
        self.cfg, self.tmp, self.web, self.setup = cfg, tmp, web, setup
        self.procs: dict[str, subprocess.Popen] = {}
        self.port = _free_port()

    def start(self) -> None:
        env = self.cfg.child_env()
        seeds = [h.root for h in self.web.web.hosts[1:]]
        crawl = [
            "--depth",
            "10",
            "--delay",
            "0.5",
            "--delay-factor",
            "0",
            "--max-delay",
            "2",
            "--fetch-timeout",
            "5",
            "--revisit",
            "60s",
            "--min-revisit",
            "20s",
            "--max-revisit",
            "10m",
        ]
        commands = {
            "master": ["master", "start", *seeds, *crawl, "--keep-running"],
            **{
                f"slave{i}": ["slave", "start", "--phases", "crawl", "--fetches", "8"]
                for i in range(self.setup.slaves)
            },
            "index": ["index", "--follow", "--max-delay", "10s", "--slaves", "1"],
            "pagerank": ["pagerank", "--every", "60", "--slaves", "1"],
            "serve": ["serve", "--port", str(self.port), "--workers", "1", "--threads", "2"],
        }
        for name, args in commands.items():
            log = open(self.tmp / f"{name}.log", "a")  # noqa: SIM115 - the child holds it
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "srcrawl.app.cli", *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            if name == "master":
                time.sleep(2.0)  # the crawl's strategy is there before the others look

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.tmp / f"{name}.log").read_text()[-2000:]
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail}")

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def errors(self) -> dict[str, list[str]]:
        out = {}
        for name in self.procs:
            lines = (self.tmp / f"{name}.log").read_text(errors="replace").splitlines()
            found = [line for line in lines if ERROR_LINE.search(line)]
            if found:
                out[name] = found[:20]
        return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _process_sample(name: str, pid: int) -> dict[str, float]:
    rss = files = 0
    for p in _tree(pid):
        with contextlib.suppress(psutil.Error):
            rss += p.memory_info().rss
            files += p.num_fds()
    return {f"rss_mb:{name}": rss / 2**20, f"open_files:{name}": files}


def _dir_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.exists() else 0


def _index_bytes(cfg: Config) -> int | None:
    """The index's bytes: its directory when it has one, else its tables (SQLite's dbstat)."""
    index_dir = getattr(cfg, "index_dir", None)
    if index_dir is not None:
        return _dir_bytes(Path(index_dir))
    try:
        rows = cfg.store()._query(
            "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN "
            "(SELECT name FROM sqlite_master WHERE name LIKE 'postings%' OR name LIKE 'terms%'"
            " OR name LIKE 'doc%' OR name LIKE 'index%')"
        )
    except Exception:  # not SQLite, or no dbstat: the store's bytes say it
        return None
    return int(rows[0][0])


def sample(cfg: Config, engine: _Engine, t: float) -> dict[str, float]:
    """One sample of every process and of what the crawl keeps (see the module doc)."""
    out: dict[str, float] = {"t": t}
    for name, proc in engine.procs.items():
        out.update(_process_sample(name, proc.pid))
    client = cfg.redis()
    used = int(client.info("memory")["used_memory"])
    scheduled = int(client.hget(cfg.keys.stats("crawl"), "scheduled") or 0)
    store = cfg.store()
    pages = store.count("pages")
    out["redis_used_mb"] = used / 2**20
    out["scheduled"] = scheduled
    out["stored_pages"] = pages
    if scheduled:
        out["redis_bytes_per_scheduled"] = used / scheduled
    if pages:
        out["store_bytes_per_page"] = store.size_bytes() / pages
        warc = _dir_bytes(cfg.warc_root)
        out["warc_bytes_per_page"] = warc / pages
        # every fetch of a page (a revisit too) adds its records: the archive's own measure
        fetches = int(client.hget(cfg.keys.metrics, "fetch_seconds_count") or 0)
        if fetches:
            out["warc_bytes_per_fetch"] = warc / fetches
        index = _index_bytes(cfg)
        if index is not None:
            out["index_bytes_per_page"] = index / pages
    return out


def _search_load(url: str, words: list[str], stop: threading.Event, run: SoakRun) -> None:
    rng = random.Random(1)
    http = requests.Session()
    for _ in range(120):  # the portal's start-up is no failed search
        with contextlib.suppress(requests.RequestException):
            if http.get(f"{url}/healthz", timeout=5).ok:
                break
        if stop.wait(0.5):
            return
    while not stop.wait(1 / SEARCHES_PER_SECOND):
        q = " ".join(rng.sample(words, rng.choice((1, 2))))
        try:
            r = http.get(f"{url}/api/search", params={"q": q}, timeout=10)
            ok = r.status_code in (200, 400)
        except requests.RequestException:
            ok = False
        run.searches += 1
        run.failed_searches += not ok


def _words(web: TestWeb) -> list[str]:
    titles = " ".join(p.title for p in web.web.pages.values() if getattr(p, "title", ""))
    found = sorted({w for w in re.findall(r"[a-z]{5,}", titles.lower())})
    return found or ["search", "engine", "crawler"]


def run_soak(cfg: Config, setup: SoakSetup, say: Progress, keep: Path | None = None) -> SoakRun:
    """The engine for ``setup.duration`` seconds, sampled every ``setup.every``."""
    run = SoakRun(setup)
    with tempfile.TemporaryDirectory(prefix="srcrawl-soak-") as tmp_dir:
        tmp = keep or Path(tmp_dir)
        tmp.mkdir(parents=True, exist_ok=True)
        job_cfg = _soak_config(cfg, tmp)
        schedule = ChangeSchedule(
            start=time.time(),
            seed=setup.seed,
            changing=0.5,
            gone=0.05,
            periods=(30.0, 60.0, 120.0),
            gone_after=setup.duration,
        )
        web = TestWeb.generate(
            hosts=setup.hosts,
            pages=setup.pages,
            seed=setup.seed,
            changes=schedule,
            robots_failures=0,
        )
        web.web.changes = replace(schedule, origins=tuple(h.origin for h in web.web.hosts))
        web.start()
        engine = _Engine(job_cfg, tmp, web, setup)
        stop = threading.Event()
        try:
            job_cfg.store().init_schema()
            engine.start()
            load = threading.Thread(
                target=_search_load,
                daemon=True,
                args=(f"http://127.0.0.1:{engine.port}", _words(web), stop, run),
            )
            load.start()
            _sample_loop(job_cfg, engine, run, say)
        finally:
            stop.set()
            engine.stop()
            web.stop()
            run.errors = engine.errors()
            _drop(job_cfg)
    return run


def _sample_loop(cfg: Config, engine: _Engine, run: SoakRun, say: Progress) -> None:
    start = time.monotonic()
    while (t := time.monotonic() - start) < run.setup.duration:
        engine.check_alive()
        s = sample(cfg, engine, t)
        run.samples.append(s)
        say(
            f"soak {t:.0f}/{run.setup.duration:.0f} s: {int(s['stored_pages'])} pages, "
            f"redis {s['redis_used_mb']:.1f} MB, {run.searches} searches"
        )
        time.sleep(max(0.0, run.setup.every - (time.monotonic() - start - t)))
    run.samples.append(sample(cfg, engine, time.monotonic() - start))


def _soak_config(cfg: Config, tmp: Path) -> Config:
    env = cfg.with_job(f"{cfg.job}-soak").child_env()
    env.pop("SRCRAWL_DB_URL_FILE", None)
    env["SRCRAWL_DB_URL"] = f"sqlite:///{tmp}/soak.db"
    env["SRCRAWL_WARC_DIR"] = str(tmp / "warc")
    return Config.load(env=env)


def _drop(cfg: Config) -> None:
    from srcrawl.master.crawl_master import reset_crawl

    with contextlib.suppress(Exception):
        reset_crawl(cfg)
        cfg.redis().delete(cfg.keys.metrics, cfg.keys.guards)
    cfg.close()


def render(run: SoakRun, limit: float = 0.05) -> str:
    """Each series' growth over the second half, flagged above ``limit``."""
    growth = run.growth()
    last = run.samples[-1] if run.samples else {}
    lines = [
        f"soak {run.setup.duration:.0f} s, sampled every {run.setup.every:g} s: "
        f"{int(last.get('stored_pages', 0))} pages stored, {run.searches} searches "
        f"({run.failed_searches} failed)",
        f"{'series':<36} {'end':>12} {'growth, 2nd half':>17}",
    ]
    for name, g in growth.items():
        flag = "  GROWS" if g > limit else ""
        lines.append(f"{name:<36} {last.get(name, 0):>12.1f} {g:>+16.1%}{flag}")
    if run.errors:
        for name, found in run.errors.items():
            lines.append(f"error lines in {name}'s log: {len(found)}, first: {found[0][:150]}")
    else:
        lines.append("no error lines in any log")
    return "\n".join(lines)


def save(run: SoakRun, json_path: str | None, plot_path: str | None) -> None:
    if json_path:
        Path(json_path).write_text(
            json.dumps(
                {
                    "duration": run.setup.duration,
                    "every": run.setup.every,
                    "samples": run.samples,
                    "growth": run.growth(),
                    "errors": run.errors,
                    "searches": run.searches,
                    "failed_searches": run.failed_searches,
                },
                indent=1,
            )
        )
    if plot_path:
        plot(run, plot_path)


def plot(run: SoakRun, path: str) -> None:
    """Four panels over time: RSS, open files, Redis per scheduled URL, bytes per page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8), sharex=True)
    panels = [
        (axes[0][0], "rss_mb:", "resident memory (MB)"),
        (axes[0][1], "open_files:", "open files"),
        (axes[1][0], "redis_bytes_per_scheduled", "Redis used_memory per URL scheduled (B)"),
        (axes[1][1], "_bytes_per_", "bytes per stored page (WARC: also per fetch)"),
    ]
    for ax, key, title in panels:
        for name in run.names():
            if key not in name or (key == "_bytes_per_" and name.startswith("redis_")):
                continue
            # the first sample comes before the crawl has scheduled or stored much
            points = [(s["t"] / 60, s.get(name)) for s in run.samples[1:]]
            ax.plot([p[0] for p in points], [p[1] for p in points], label=name.split(":")[-1])
        ax.set_title(title)
        ax.axvline(run.setup.duration / 120, color="grey", linestyle=":", linewidth=1)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("minutes (dotted: start of the second half)")
    fig.suptitle(f"srcrawl bench soak: {run.setup.duration / 60:.0f} min")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
