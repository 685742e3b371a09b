"""Running the portal: uvicorn in the foreground (``srcrawl serve``) or in a thread."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn

from srcrawl.config import Config
from srcrawl.errors import SrcrawlError
from srcrawl.portal.app import ENV_ADMIN_TOKEN, Portal, create_app
from srcrawl.portal.search_pool import SearchPool

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_SEARCH_THREADS = 4


def build_portal(
    cfg: Config, *, threads: int = DEFAULT_SEARCH_THREADS, user_dict: str | None = None,
    admin_token: str | None = None,
) -> Portal:  # fmt: skip
    """The portal of ``cfg``'s job and store: the store's schema applied, the tokenizer loaded."""
    cfg.store()  # the schema is there before any search thread opens its own connection
    token = admin_token if admin_token is not None else os.environ.get(ENV_ADMIN_TOKEN) or None
    pool = SearchPool(cfg.db, threads=threads, user_dict=user_dict)
    return Portal(cfg=cfg, pool=pool, admin_token=token)


def _bound_socket(bind: str, port: int) -> socket.socket:
    """The listening socket, bound here so a port in use is one clear error."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without
    # it a keep-alive client waits 40 ms (Nagle against delayed ACK) for each answer
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, port))
    except OSError as e:
        sock.close()
        raise SrcrawlError(f"cannot listen on {bind}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"


def _server(portal: Portal, *, access_log: bool) -> uvicorn.Server:
    config = uvicorn.Config(create_app(portal), log_level="warning", access_log=access_log,
                            lifespan="on", timeout_graceful_shutdown=5)  # fmt: skip
    return uvicorn.Server(config)


def serve(portal: Portal, bind: str = DEFAULT_BIND, port: int = DEFAULT_PORT, *,
          announce: Callable[[str], None] = print, access_log: bool = False) -> None:  # fmt: skip
    """Serve until SIGINT/SIGTERM (uvicorn's handlers end it gracefully)."""
    sock = _bound_socket(bind, port)
    announce(f"srcrawl portal: search at {url_of(sock)} (Ctrl-C stops it)")
    _server(portal, access_log=access_log).run(sockets=[sock])


class _ThreadServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the main thread keeps its own handlers
        pass


@contextlib.contextmanager
def serving_in_thread(portal: Portal, bind: str = DEFAULT_BIND, port: int = 0,
                      wait: float = 30.0) -> Iterator[str]:  # fmt: skip
    """The portal served by a real uvicorn server in a thread; yields its URL."""
    sock = _bound_socket(bind, port)
    config = uvicorn.Config(create_app(portal), log_level="warning", access_log=False,
                            lifespan="on")  # fmt: skip
    server = _ThreadServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + wait
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise SrcrawlError("the portal did not start")
        time.sleep(0.01)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
