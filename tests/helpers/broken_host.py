"""A host whose every answer, robots.txt included, is a 500: the tests of hosts that
never answer import its fixture."""

from __future__ import annotations

import http.server
import threading
from typing import ClassVar

import pytest


class Failing(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[str]] = []
    """The paths asked, in order (cleared for each test by the fixture)."""

    def do_GET(self) -> None:
        self.requests.append(self.path)
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def broken_host():
    """The origin URL of a host whose every answer is a 500."""
    Failing.requests.clear()  # counted per test
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
