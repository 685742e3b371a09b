"""The embedded Redis is started again when its server died, a zombie included: where no
init reaps orphans (a container without one), a killed redis-server stays a zombie, which
signal 0 still reaches."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from srcrawl.core import embedded


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]


def test_a_zombie_server_is_started_again(tmp_path) -> None:
    home = tmp_path / "home"
    # this process is the server's parent and does not reap it: a zombie once killed
    url, server = embedded.start_server(home, daemonize=False)
    assert server is not None
    try:
        (home / "redis.pid").write_text(f"{server.pid}\n")
        (home / "redis.url").write_text(url + "\n")
        server.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(server.pid) != "Z":
            assert time.monotonic() < deadline, "the killed server never became a zombie"
            time.sleep(0.01)
        assert embedded.restart(home) == url
        assert embedded.running_url(home) == url  # a new server answers on its port
        assert int((home / "redis.pid").read_text()) != server.pid
    finally:
        embedded.stop(home)
        server.wait(timeout=10)


def test_a_live_server_is_left_alone(tmp_path) -> None:
    home = tmp_path / "home"
    url = embedded.ensure_running(home)
    try:
        pid = int((home / "redis.pid").read_text())
        assert embedded.restart(home) == url
        assert int((home / "redis.pid").read_text()) == pid
    finally:
        embedded.stop(home)
