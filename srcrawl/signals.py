"""Stop signals of long-running roles (master, slave)."""

from __future__ import annotations

import os
import signal
import threading


def install_stop_handlers(stopping: threading.Event) -> None:
    """First SIGTERM/SIGINT sets ``stopping`` (finish the batch in hand); a second exits at once.

    Leaving at once is safe: whatever the process held unacknowledged goes
    back to its queue when the heartbeat or lock lapses.
    """

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set():
            os._exit(128 + signum)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
