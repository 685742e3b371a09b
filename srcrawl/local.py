"""Slaves as local processes, for the one-machine commands (crawl, index, pagerank)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from srcrawl.config import Config


class LocalSlaves:
    """``n`` ``srcrawl slave start`` processes sharing this process's Redis, store and job.

    They stay in this process group, so a Ctrl-C in the terminal reaches them
    too and each finishes its batch before leaving.
    """

    def __init__(
        self,
        cfg: Config,
        n: int,
        phases: Sequence[str],
        *,
        extra_args: Sequence[str] = (),
        log_dir: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.n = n
        self.phases = list(phases)
        self.extra_args = list(extra_args)
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []

    def start(self) -> LocalSlaves:
        env = self.cfg.child_env()
        cmd = [sys.executable, "-m", "srcrawl.cli", "slave", "start",
               "--phases", ",".join(self.phases), *self.extra_args]  # fmt: skip
        for i in range(self.n):
            out = subprocess.DEVNULL
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                out = open(self.log_dir / f"slave-{i + 1}.log", "ab")  # noqa: SIM115
            self.procs.append(
                subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            )
        return self

    def alive(self) -> int:
        return sum(p.poll() is None for p in self.procs)

    def stop(self, timeout: float = 20.0, *, signalled: bool = False) -> None:
        """SIGTERM (finish the batch), then SIGKILL whatever is still there.

        ``signalled``: they already got a stop signal (a Ctrl-C reaches the
        whole process group); a second one would make them leave mid-batch,
        so give them ``timeout`` to finish first.
        """
        if signalled:
            deadline = time.monotonic() + timeout
            for p in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    def __enter__(self) -> LocalSlaves:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
