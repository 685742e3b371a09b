"""Slaves as local processes, for the one-machine commands (crawl, index, pagerank).

Every child a local run starts is in a process group of its own and dies
with the run (see :mod:`srcrawl.signals`); :func:`end_children` stops
whatever is still running when the run ends.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from srcrawl.config import Config
from srcrawl.defaults import CHILD_STOP_TIMEOUT
from srcrawl.signals import child_env

_CHILDREN: list[subprocess.Popen | ForkedCommand] = []
"""Children started by this process that have not been seen to end."""


def track(child: subprocess.Popen | ForkedCommand) -> None:
    """Remember ``child`` so that :func:`end_children` stops it should the run end first."""
    _CHILDREN[:] = [c for c in _CHILDREN if c.poll() is None]
    _CHILDREN.append(child)


def popen_child(args: Sequence[str], env: dict[str, str], **kwargs: object) -> subprocess.Popen:
    """``subprocess.Popen`` of a child that leaves with this process (see :mod:`srcrawl.signals`).

    In a session of its own, so a Ctrl-C in the terminal reaches only this process.
    """
    proc = subprocess.Popen(args, env=child_env(env), start_new_session=True, **kwargs)  # type: ignore
    track(proc)
    return proc


def stop_children(
    children: Sequence[subprocess.Popen | ForkedCommand], timeout: float = CHILD_STOP_TIMEOUT
) -> None:
    """One SIGTERM each (finish the batch), then SIGKILL what is still there after ``timeout``."""
    for p in children:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in children:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def end_children(timeout: float = CHILD_STOP_TIMEOUT) -> None:
    """Stop every child this process started that is still running."""
    alive = [c for c in _CHILDREN if c.poll() is None]
    _CHILDREN.clear()
    stop_children(alive, timeout)


class ForkedCommand:
    """``srcrawl ARGS`` in a child forked from this process, with the Popen calls used here.

    A new interpreter spends ~0.5 s of CPU importing srcrawl, lxml, redis
    and click before it does anything; eight slaves and a master starting
    at once on two cores took several seconds of a crawl benchmark. A fork
    of a process that has imported them (see ``preload``) starts at once.
    ``output``: a file descriptor for the child's stdout and stderr
    (None: this process's).
    """

    def __init__(
        self,
        args: Sequence[str],
        env: dict[str, str],
        *,
        output: int | None = None,
        preload: Sequence[str] = (),
    ) -> None:
        for module in ("srcrawl.cli", *preload):
            importlib.import_module(module)
        self.args = list(args)
        self.returncode: int | None = None
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # or the child would write this process's pending output again
        env = child_env(env)
        pid = os.fork()
        if pid == 0:
            _run_child(self.args, env, output)  # never returns
        self.pid = pid
        track(self)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _run_child(args: list[str], env: dict[str, str], output: int | None) -> None:
    code = 1
    try:
        os.setpgid(0, 0)  # a Ctrl-C reaches the run, which stops its children one by one
        _CHILDREN.clear()  # the run's, not this child's
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        if output is not None:
            os.dup2(output, 1)
            os.dup2(output, 2)
        os.environ.clear()
        os.environ.update(env)
        # as a new interpreter starts (this process may have handlers of its own)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        from srcrawl.cli import cli

        try:
            cli.main(args=args, prog_name="srcrawl")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        # nothing of the parent's (atexit handlers, temporary directories) runs here
        os._exit(code)


class LocalSlaves:
    """``n`` ``srcrawl slave start`` processes sharing this process's Redis, store and job.

    Each is in a process group of its own and dies with this process; on
    :meth:`stop` each gets one SIGTERM and finishes its batch. With ``fork`` they are
    forked from this process (:class:`ForkedCommand`, after importing
    ``preload``) instead of started as new interpreters.
    """

    def __init__(
        self,
        cfg: Config,
        n: int,
        phases: Sequence[str],
        *,
        extra_args: Sequence[str] = (),
        log_dir: Path | None = None,
        fork: bool = False,
        preload: Sequence[str] = (),
    ) -> None:
        self.cfg = cfg
        self.n = n
        self.phases = list(phases)
        self.extra_args = list(extra_args)
        self.log_dir = log_dir
        self.fork = fork
        self.preload = list(preload)
        self.procs: list[subprocess.Popen | ForkedCommand] = []

    def start(self) -> LocalSlaves:
        env = self.cfg.child_env()
        args = ["slave", "start", "--phases", ",".join(self.phases), *self.extra_args]
        for i in range(self.n):
            if self.fork:
                path = os.devnull
                if self.log_dir is not None:
                    self.log_dir.mkdir(parents=True, exist_ok=True)
                    path = str(self.log_dir / f"slave-{i + 1}.log")
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    self.procs.append(ForkedCommand(args, env, output=fd, preload=self.preload))
                finally:
                    os.close(fd)
                continue
            out = subprocess.DEVNULL
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                out = open(self.log_dir / f"slave-{i + 1}.log", "ab")  # noqa: SIM115
            self.procs.append(
                popen_child(
                    [sys.executable, "-m", "srcrawl.cli", *args],
                    env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                )
            )
        return self

    def alive(self) -> int:
        return sum(p.poll() is None for p in self.procs)

    def stop(self, timeout: float = CHILD_STOP_TIMEOUT) -> None:
        """SIGTERM (finish the batch), then SIGKILL whatever is still there after ``timeout``."""
        stop_children(self.procs, timeout)
        self.procs.clear()

    def __enter__(self) -> LocalSlaves:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
