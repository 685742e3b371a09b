"""The one progress line every long command writes on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Seconds between lines when stderr is not a terminal (a log file, CI).
PROGRESS_INTERVAL = 5.0


class ProgressLine:
    """One progress line on stderr: rewritten in place on a terminal, else every few seconds."""

    def __init__(self, stream: TextIO | None = None, interval: float = PROGRESS_INTERVAL) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval
        self._last = float("-inf")
        self._open = False

    def update(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + text + "\033[K")
            self._open = True
        elif force or now - self._last >= self.interval:
            self.stream.write(text + "\n")
            self._last = now
        else:
            return
        self.stream.flush()

    def say(self, text: str) -> None:
        """A line that stays (a step done, a note)."""
        self.done()
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        """End the rewritten line, if any."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
