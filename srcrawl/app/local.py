"""Child processes of a local run: started with a role, stopped with the run.

Every child is in a process group of its own and dies with the run (see
:mod:`srcrawl.core.signals`); :func:`end_children` stops whatever is still
running when the run ends. A child runs one role (:mod:`srcrawl.app.roles`):
as a new interpreter, ``python -m srcrawl.app.child`` with the role as JSON on
stdin; or forked from this process (:class:`ForkedChild`), which runs the
same entry point without starting an interpreter.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from srcrawl.app.roles import Role, SlaveRole, role_to_json
from srcrawl.core.defaults import CHILD_STOP_TIMEOUT, DEFAULT_FETCH_THREADS
from srcrawl.core.signals import child_env
from srcrawl.settings.config import Config

CHILD_MODULE = "srcrawl.app.child"
"""The entry module of every child (``python -m srcrawl.app.child``)."""

_CHILDREN: list[subprocess.Popen | ForkedChild] = []
"""Children started by this process that have not been seen to end."""


def track(child: subprocess.Popen | ForkedChild) -> None:
    """Remember ``child`` so that :func:`end_children` stops it should the run end first."""
    _CHILDREN[:] = [c for c in _CHILDREN if c.poll() is None]
    _CHILDREN.append(child)


def popen_child(args: Sequence[str], env: dict[str, str], **kwargs: object) -> subprocess.Popen:
    """``subprocess.Popen`` of a child that leaves with this process (see
    :mod:`srcrawl.core.signals`).

    In a session of its own, so a Ctrl-C in the terminal reaches only this process.
    """
    proc = subprocess.Popen(args, env=child_env(env), start_new_session=True, **kwargs)  # type: ignore
    track(proc)
    return proc


def spawn_child(
    role: Role, env: dict[str, str], *, output: int | IO | None = None
) -> subprocess.Popen:
    """``python -m srcrawl.app.child`` running ``role``; its stdout and stderr go to ``output``."""
    proc = popen_child(
        [sys.executable, "-m", CHILD_MODULE],
        env,
        stdin=subprocess.PIPE,
        stdout=output,
        stderr=output,
    )
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):  # it died at once: its exit code tells
        proc.stdin.write(role_to_json(role).encode())
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    return proc


def stop_children(
    children: Sequence[subprocess.Popen | ForkedChild], timeout: float = CHILD_STOP_TIMEOUT
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


class ForkedChild:
    """A child forked from this process that runs ``role``, with the Popen calls used here.

    A new interpreter spends ~0.5 s of CPU importing srcrawl, lxml and redis
    before it does anything; eight slaves and a master starting at once on
    two cores took several seconds of a crawl benchmark. A fork of a process
    that has imported them (see ``preload``) starts at once. ``output``: a
    file descriptor for the child's stdout and stderr (None: this process's).
    """

    def __init__(
        self,
        role: Role,
        env: dict[str, str],
        *,
        output: int | None = None,
        preload: Sequence[str] = (),
    ) -> None:
        # the entry module by name, as `python -m` would run it: this module
        # stays below the roles it starts
        entry = importlib.import_module(CHILD_MODULE)
        for module in preload:
            importlib.import_module(module)
        self.args = [CHILD_MODULE, role.kind]
        self.returncode: int | None = None
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # or the child would write this process's pending output again
        env = child_env(env)
        pid = os.fork()
        if pid == 0:
            _run_forked(lambda: entry.run_child(role), env, output)  # never returns
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


def fork_safe() -> bool:
    """Whether a child forked from this process can work. Not once this process has used
    the object store's client (obstore): its Tokio runtime's threads do not survive a
    fork, and a forked child's first request to the store hangs for ever."""
    return "obstore" not in sys.modules


def start_child(
    role: Role, env: dict[str, str], *, output: int | None = None, preload: Sequence[str] = ()
) -> ForkedChild | subprocess.Popen:
    """``role`` in a child forked from this process (:class:`ForkedChild`), or in a new
    interpreter where a fork would not work (:func:`fork_safe`)."""
    if fork_safe():
        return ForkedChild(role, env, output=output, preload=preload)
    return spawn_child(role, env, output=output)


def _run_forked(run: Callable[[], int], env: dict[str, str], output: int | None) -> None:
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
        code = run()
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        # nothing of the parent's (atexit handlers, temporary directories) runs here
        os._exit(code)


class LocalSlaves:
    """``n`` slave processes serving ``phases`` with this process's Redis, store and job.

    Each is in a process group of its own and dies with this process; on
    :meth:`stop` each gets one SIGTERM and finishes its batch. Slave ``i``
    writes to ``log_dir/slave-<i>.log`` (no log without ``log_dir``). With
    ``fork`` they are forked from this process (:class:`ForkedChild`, after
    importing ``preload``) instead of started as new interpreters.
    """

    def __init__(
        self,
        cfg: Config,
        n: int,
        phases: Sequence[str],
        *,
        threads: int = DEFAULT_FETCH_THREADS,
        parser: str = "lxml",
        log_dir: Path | None = None,
        fork: bool = False,
        preload: Sequence[str] = (),
    ) -> None:
        self.cfg = cfg
        self.n = n
        self.role = SlaveRole(phases=tuple(phases), threads=threads, parser=parser)
        self.log_dir = log_dir
        self.fork = fork
        self.preload = list(preload)
        self.procs: list[subprocess.Popen | ForkedChild] = []

    def start(self) -> LocalSlaves:
        env = self.cfg.child_env()
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.n):
            path = os.devnull if self.log_dir is None else str(self.log_dir / f"slave-{i + 1}.log")
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if self.fork:
                    child = start_child(self.role, env, output=fd, preload=self.preload)
                else:
                    child = spawn_child(self.role, env, output=fd)
            finally:
                os.close(fd)
            self.procs.append(child)
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
