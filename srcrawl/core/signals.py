"""Stop signals: of long-running roles (master, slave), and of the commands that start them.

A command that starts local children (crawl, index, pagerank, demo,
bench) turns SIGINT and SIGTERM into :class:`Interrupted`, so its
``finally`` blocks stop the children it started and it exits 128 + the
signal number. Its children run in a process group of their own, so a
Ctrl-C in the terminal reaches only the command, which hands each child
one SIGTERM. Should the command itself be killed outright, each child is
sent SIGTERM by the kernel (the parent-death signal of Linux) and leaves
as if the command had stopped it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator

ENV_PARENT_PID = "SRCRAWL_PARENT_PID"
"""Set by a local run in its children's environment: the pid whose death ends the child."""

_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached a command; it exits with :attr:`exit_code`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code_of(e: KeyboardInterrupt) -> int:
    """130 for a Ctrl-C, 128 + the signal number for an :class:`Interrupted`."""
    return e.exit_code if isinstance(e, Interrupted) else 128 + signal.SIGINT


def install_stop_handlers(stopping: threading.Event) -> None:
    """First SIGTERM/SIGINT sets ``stopping`` (finish the batch in hand); a second exits at once.

    Leaving at once is safe: whatever the process held unacknowledged goes
    back to its queue when the heartbeat or lock lapses.
    """

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set():
            os._exit(128 + signum)
        stopping.set()

    for sig in _STOP_SIGNALS:
        signal.signal(sig, on_signal)


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """Within the block, the first SIGINT or SIGTERM raises :class:`Interrupted`.

    Set whatever the disposition was before (a shell starts a background
    job with SIGINT ignored), so the command always stops. Later signals
    are ignored: they would break off the cleanup the first one started.
    Outside the main thread (a test runner) nothing is changed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Interrupted(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def stop_gently(stopping: threading.Event) -> Iterator[threading.Event]:
    """Within the block, the first SIGINT or SIGTERM sets ``stopping``; a second raises
    :class:`Interrupted`.

    For a command that runs until it is stopped (``index --follow``,
    ``pagerank --every``): it ends the step in hand, then leaves cleanly
    with exit code 0, as a service manager (docker compose stop) expects.
    Outside the main thread nothing is changed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set():
            raise Interrupted(signum)
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a child that must not outlive this process (see :func:`die_with_parent`)."""
    return {**env, ENV_PARENT_PID: str(os.getpid())}


def die_with_parent() -> None:
    """If a local run started this process, have SIGTERM sent here when that run dies.

    The variable is removed so that this process's own children do not
    inherit it. If the parent is gone already (it died before this ran),
    exit now.
    """
    parent = os.environ.pop(ENV_PARENT_PID, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return  # not fatal: the run still stops its children when it is not killed outright
    if os.getppid() != int(parent):
        sys.exit(128 + signal.SIGTERM)
