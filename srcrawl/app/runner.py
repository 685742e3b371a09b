"""One phase of a job run on one machine: its slaves, its master, their logs, the progress line.

``srcrawl crawl``, ``srcrawl index`` and ``srcrawl pagerank`` each run their
phase through :class:`PhaseRun`: it starts ``n`` local slave processes of
the phase (:class:`~srcrawl.app.local.LocalSlaves`, each running the typed
:class:`~srcrawl.app.roles.SlaveRole` through ``python -m srcrawl.app.child`` or a
fork of this process), tells the master whether any of them is still alive
(a master whose slaves all died early fails instead of waiting forever),
keeps the progress line (:class:`~srcrawl.core.progress.ProgressLine`) and stops
every child when the run ends or is interrupted. The index and PageRank
masters run in this process; the crawl master runs as a child of its own
(:func:`run_local_crawl`), started again should it die before the crawl
completes.

Log layout: slave ``n`` (from 1) of a phase writes its stdout and stderr,
appended, to ``$SRCRAWL_HOME/logs/<job>/<phase>/slave-<n>.log``, e.g.
``.srcrawl/logs/default/crawl/slave-1.log``. The masters write to the
terminal of the command.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from srcrawl.app.local import ForkedChild, LocalSlaves, start_child, stop_children
from srcrawl.app.phases import PRELOAD
from srcrawl.app.roles import CrawlMasterRole
from srcrawl.core import embedded
from srcrawl.core.defaults import DEFAULT_FETCH_THREADS
from srcrawl.core.errors import SrcrawlError
from srcrawl.core.outage import master_waits_out
from srcrawl.core.progress import ProgressLine
from srcrawl.master.crawl_master import crawl_state
from srcrawl.master.crawl_run import progress
from srcrawl.settings.config import Config

log = logging.getLogger("srcrawl.crawl")

MASTER_RESTARTS = 5
"""Times a local crawl starts its master again before it gives up."""


def log_dir(cfg: Config, phase: str) -> Path:
    """Where the local slaves of ``phase`` write: ``$SRCRAWL_HOME/logs/<job>/<phase>/``."""
    return cfg.home / "logs" / cfg.job / phase


class PhaseRun:
    """``phase`` of the job on this machine, with ``slaves`` local slave processes.

    Within the block the slaves run (none when ``slaves`` is 0: they run
    elsewhere); on leaving it, by its end or a signal, each gets one SIGTERM
    and finishes its batch, and the progress line is closed. A phase whose
    slaves import much before their first task (the crawl's, see
    :data:`~srcrawl.app.phases.PRELOAD`) forks them from this process.
    """

    def __init__(
        self,
        cfg: Config,
        phase: str,
        slaves: int,
        *,
        threads: int = DEFAULT_FETCH_THREADS,
        parser: str = "lxml",
        line: ProgressLine | None = None,
    ) -> None:
        self.cfg = cfg
        self.phase = phase
        self.log_dir = log_dir(cfg, phase)
        self.preload = PRELOAD.get(phase, ())
        self.slaves = LocalSlaves(
            cfg,
            slaves,
            [phase],
            threads=threads,
            parser=parser,
            log_dir=self.log_dir,
            fork=bool(self.preload),
            preload=self.preload,
        )
        self.line = line if line is not None else ProgressLine()
        self.started = time.monotonic()
        # the phase's master in this process waits out Redis outages, as its slaves do
        _wait_for_redis(cfg)

    def __enter__(self) -> PhaseRun:
        self.started = time.monotonic()
        if self.slaves.n:
            self.slaves.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.slaves.stop()
        finally:
            self.line.done()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def alive(self) -> int:
        """Local slaves still running."""
        return self.slaves.alive()

    @property
    def local(self) -> PhaseRun | None:
        """This run, for a master to watch its slaves' liveness; None without local slaves."""
        return self if self.slaves.n else None

    def check_slaves(self) -> None:
        """SrcrawlError when every local slave has exited (nothing would do the work)."""
        if self.slaves.n and self.alive() == 0:
            raise SrcrawlError(f"every local {self.phase} slave exited; see {self.log_dir}")


class _CrawlMasterChild:
    """The crawl master as a forked child, started again should it die before the crawl
    completes (its state is all in Redis)."""

    def __init__(self, cfg: Config, preload: tuple[str, ...]) -> None:
        self.cfg = cfg
        self.env = cfg.child_env()
        self.preload = preload
        self.restarts = 0
        self.proc = self._start()

    def _start(self) -> ForkedChild | subprocess.Popen:
        return start_child(CrawlMasterRole(end_deferred=True), self.env, preload=self.preload)

    def finished(self) -> bool:
        """Has the master ended the crawl? Starts it again if it died before that."""
        code = self.proc.poll()
        if code is None:
            return False
        if code == 0 or crawl_state(self.cfg).get("state") == "complete":
            return True
        self.restarts += 1
        if self.restarts > MASTER_RESTARTS:
            raise SrcrawlError(f"the crawl master keeps failing (exit {code})")
        self.proc = self._start()
        return False

    def wait(self, timeout: float) -> None:
        """Up to ``timeout`` seconds; returns as soon as the master ends."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        stop_children([self.proc])


def _wait_for_redis(cfg: Config) -> None:
    """Have this process's Redis client wait out outages, restarting the embedded server."""
    restart = (lambda: embedded.restart(cfg.home)) if cfg.embedded else None
    master_waits_out(cfg.redis(), log, on_failure=restart)


def run_local_crawl(
    cfg: Config,
    *,
    slaves: int,
    threads: int = DEFAULT_FETCH_THREADS,
    parser: str = "lxml",
    report: Callable[[dict[str, int], float], None] | None = None,
    interval: float = 0.5,
) -> dict[str, int]:
    """Run the job's crawl with a master and ``slaves`` slave processes until it completes.

    The master is restarted if it dies, and so is the embedded Redis server
    (from its AOF), while the master and the slaves wait for it.
    Interrupted (SIGINT, SIGTERM), the run sends each child one SIGTERM,
    which finishes its batch. Raises SrcrawlError when every slave has
    exited before the crawl completed. ``report`` gets the crawl's counters
    (see :func:`~srcrawl.master.crawl_run.progress`) and the seconds so far,
    every ``interval`` and once at the end.
    """
    _wait_for_redis(cfg)
    with PhaseRun(cfg, "crawl", slaves, threads=threads, parser=parser) as run:
        master = _CrawlMasterChild(cfg, run.preload)
        try:
            while not master.finished():
                if crawl_state(cfg).get("state") != "complete":
                    run.check_slaves()  # nothing would ever fetch the frontier: fail
                if report:
                    report(progress(cfg), run.elapsed)
                master.wait(interval)
        finally:
            master.stop()
    final = progress(cfg)
    if report:
        report(final, run.elapsed)
    return final
