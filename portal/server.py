"""Running the portal: uvicorn in the foreground (``srcrawl serve``) or in a thread.

With more than one worker, uvicorn's supervisor starts that many processes on
one listening socket; each builds its own app (:func:`worker_app`) from the
configuration handed down in the environment, so the searches of one process
never wait for another's GIL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from srcrawl.core.errors import SrcrawlError
from srcrawl.indexer.published import IndexStoreError
from srcrawl.indexer.replica import IndexReplica, replica_of
from srcrawl.portal.admin_auth import AdminPassword
from srcrawl.portal.app import ENV_ADMIN_TOKEN, Portal, create_app
from srcrawl.portal.readiness import Readiness, problems, serve_command
from srcrawl.portal.search_pool import SearchPool
from srcrawl.settings.config import Config

log = logging.getLogger("srcrawl.portal")

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_SEARCH_THREADS = 4
"""Search threads a server process has with a MySQL/MariaDB store (see default_threads)."""
MAX_WORKERS = 8
ENV_THREADS = "SRCRAWL_PORTAL_THREADS"
ENV_USER_DICT = "SRCRAWL_PORTAL_USER_DICT"
WORKER_APP = "srcrawl.portal.server:worker_app"


def default_workers() -> int:
    """One worker process a core this process may run on (a search holds the GIL)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def default_threads(cfg: Config) -> int:
    """A server process's search threads for ``cfg``'s store. With SQLite none: each search
    runs in the event loop, its store reads being local file reads, and the hand-off to a
    thread costs more CPU a request than it spares (docs/benchmarks-journal.md, "… no search threads
    with SQLite"). With MySQL, DEFAULT_SEARCH_THREADS: a search waits on the
    server's round trips, which would hold up the process's other requests."""
    return 0 if cfg.db.kind == "sqlite" else DEFAULT_SEARCH_THREADS


def build_portal(
    cfg: Config,
    *,
    threads: int | None = None,
    user_dict: str | None = None,
    admin_token: str | None = None,
    admin_password: AdminPassword | None = None,
) -> Portal:
    """The portal of ``cfg``'s job and store: the store's schema applied, the tokenizer loaded.
    ``admin_password``: the admin area's (default: ``SRCRAWL_ADMIN_PASSWORD`` or its file)."""
    cfg.store()  # the schema is there before any search thread opens its own connection
    token = admin_token if admin_token is not None else os.environ.get(ENV_ADMIN_TOKEN) or None
    threads = default_threads(cfg) if threads is None else threads
    pool = SearchPool(
        cfg.db,
        cfg.index_path,
        threads=threads,
        user_dict=user_dict,
        warc_root=cfg.warc_source,
        replica=_replica(cfg),
    )
    password = admin_password if admin_password is not None else AdminPassword.from_env()
    return Portal(
        cfg=cfg,
        pool=pool,
        admin_token=token,
        admin_password=password,
        readiness=Readiness(cfg),
    )


def _replica(cfg: Config) -> IndexReplica | None:
    """With an index in an object store, its replica, synced once before the portal serves
    (an unreachable store is said, and waited out by the replica's thread)."""
    replica = replica_of(cfg)
    if replica is not None:
        try:
            replica.sync()
        except IndexStoreError as e:
            log.warning("the index replica cannot sync yet: %s", e)
    return replica


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
    config = uvicorn.Config(
        create_app(portal),
        log_level="warning",
        access_log=access_log,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def serve(
    portal: Portal,
    bind: str = DEFAULT_BIND,
    port: int = DEFAULT_PORT,
    *,
    announce: Callable[[str], None] = print,
    access_log: bool = False,
) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers end it gracefully)."""
    sock = _bound_socket(bind, port)
    announce(f"srcrawl portal: search at {url_of(sock)} (Ctrl-C stops it)")
    _announce_job(portal.cfg, portal.problems(), announce)
    _server(portal, access_log=access_log).run(sockets=[sock])


def _announce_job(cfg: Config, found: list[str], announce: Callable[[str], None]) -> None:
    """The job and store served, and what keeps them from being searched: a first run's
    wrong job or store is said at once, not found out query by query."""
    index = f"{cfg.index_url} (replica {cfg.index_path})" if cfg.index_url else cfg.index_path
    announce(f"  job {cfg.job!r}, index {index}, store {cfg.db.redacted()}")
    for line in found:
        announce(f"  warning: {line}")
    if not found:
        announce(f"  (this job again: `{serve_command(cfg)}`)")


def worker_app() -> FastAPI:
    """The app of one worker process, its portal built from the environment."""
    threads = os.environ.get(ENV_THREADS)
    user_dict = os.environ.get(ENV_USER_DICT) or None
    return create_app(
        build_portal(Config.load(), threads=int(threads) if threads else None, user_dict=user_dict)
    )


def serve_workers(
    cfg: Config,
    workers: int,
    bind: str = DEFAULT_BIND,
    port: int = DEFAULT_PORT,
    *,
    threads: int | None = None,
    user_dict: str | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve with ``workers`` processes on one socket until SIGINT/SIGTERM."""
    cfg.store()  # the schema is there before any worker opens the store
    sock = _bound_socket(bind, port)  # ours: uvicorn's own socket would lack TCP_NODELAY
    # the workers are spawned, not forked: what they need to build the portal is in the env
    os.environ.update(cfg.child_env())
    os.environ[ENV_THREADS] = str(default_threads(cfg) if threads is None else threads)
    os.environ[ENV_USER_DICT] = user_dict or ""
    config = uvicorn.Config(
        WORKER_APP,
        factory=True,
        workers=workers,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    announce(
        f"srcrawl portal: search at {url_of(sock)}, {workers} worker processes (Ctrl-C stops it)"
    )
    _announce_job(cfg, problems(cfg), announce)
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()


class _ThreadServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the main thread keeps its own handlers
        pass


@contextlib.contextmanager
def serving_in_thread(
    portal: Portal, bind: str = DEFAULT_BIND, port: int = 0, wait: float = 30.0
) -> Iterator[str]:
    """The portal served by a real uvicorn server in a thread; yields its URL."""
    sock = _bound_socket(bind, port)
    config = uvicorn.Config(
        create_app(portal), log_level="warning", access_log=False, lifespan="on"
    )
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
