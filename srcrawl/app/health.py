"""`srcrawl health ROLE`: is the service of this host (container) doing its job?

What a container's healthcheck runs, every few seconds, so each check is cheap
(a few Redis reads, one store query, one file created and removed) and says
what the running process itself found, not only that a server answers:

- ``slave``: a slave process of this host beats (its heartbeat names the host),
  its last attempt to store results did not fail (the heartbeat carries the
  error until a flush succeeds; an error older than ``STORE_ERROR_FRESH`` with no
  write since, an idle slave's, is left to this check's own store probe), and this
  process, as the same user, can write the WARC directory (when the crawl writes
  WARC files) and read the store.
- ``master``, ``indexer``, ``ranker``: a process of this host holds the phase's
  lease (``queues/lease.py``: the holder id names the host and pid, and the pid
  runs), or says that it waits for it (a standby, a master waiting for its
  first seeds, a ranker between runs: ``keys.lease_waiting_key``).
- ``portal``: ``/healthz`` answers 200 (Redis and the store answer the portal).
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from srcrawl.core.defaults import STORE_ERROR_FRESH
from srcrawl.core.errors import SrcrawlError
from srcrawl.core.keys import lease_waiting_key
from srcrawl.queues import crawl_strategy as strategies
from srcrawl.queues.lease import holder_lives_here
from srcrawl.queues.workers import workers
from srcrawl.settings.config import Config

ROLES = ("slave", "master", "indexer", "ranker", "portal")
PHASE_OF = {"master": "crawl", "indexer": "index", "ranker": "pagerank"}
DEFAULT_HEALTHZ_URL = "http://127.0.0.1:8080/healthz"


class Unhealthy(Exception):
    """Why the service is not doing its job (one line)."""


def check(cfg: Config, role: str, *, url: str = DEFAULT_HEALTHZ_URL) -> str:
    """One line saying what the ``role`` service of this host is doing; Unhealthy if it
    is not doing its job (or a server it needs does not answer)."""
    if role == "portal":
        return _portal(url)
    if cfg.embedded:
        raise Unhealthy("no Redis is configured (SRCRAWL_REDIS_URL): nothing to check")
    try:
        if role == "slave":
            return _slave(cfg)
        return _phase_master(cfg, PHASE_OF[role])
    except SrcrawlError as e:  # Redis or the store unreachable: named as it is
        raise Unhealthy(str(e)) from None


def _slave(cfg: Config) -> str:
    host = socket.gethostname()
    mine = [
        w
        for w in workers(cfg.redis(), cfg.keys)
        if w.alive
        and w.stats.get("host") == host
        and holder_lives_here(f"{host}:{w.stats.get('pid')}:")
    ]
    if not mine:
        raise Unhealthy(f"no slave of job {cfg.job!r} on {host} beats (none runs, or it hangs)")
    now = time.time()
    for w in mine:
        failed = recent_store_error(w.stats, now)
        if failed:
            raise Unhealthy(f"{w.id} cannot store what it fetched: {failed}")
    strategy = strategies.load(cfg.redis(), cfg.keys)
    if strategy is None or strategy.body_store == "warc":  # a crawl's default is WARC
        _probe_directory(cfg.warc_volume / cfg.job)
        if cfg.warc_url is not None:  # the spool's objects go there
            _probe_objects(cfg.warc_url)
    _probe_store(cfg)
    where = f"{cfg.warc_volume} is writable"
    if cfg.warc_url is not None:
        where += f", {cfg.warc_url} answers"
    return f"{len(mine)} slave(s) on {host} beat and store; {where}"


def _probe_objects(url: str) -> None:
    """The object store the WARC files go to answers a listing (a slave holds its rows
    while it does not: nothing it fetches is stored meanwhile)."""
    from srcrawl.warc.objects import probe
    from srcrawl.warc.storage import WarcError

    try:
        probe(url)
    except WarcError as e:
        raise Unhealthy(str(e)) from None


def recent_store_error(stats: dict, now: float) -> str | None:
    """The store error a slave's heartbeat carries, unless it is older than
    ``STORE_ERROR_FRESH`` (no write since: the slave is idle, not failing)."""
    failed = stats.get("store_error")
    if not failed:
        return None
    try:
        at = float(stats["store_error_at"])
    except (KeyError, TypeError, ValueError):
        at = now  # when is unknown: counted as fresh, the safe side
    return str(failed) if now - at < STORE_ERROR_FRESH else None


def _probe_directory(path: Path) -> None:
    """Create (as the slave would) and remove a file in ``path``: what the mode bits,
    the owner, a read-only mount or a full disk say, for this user; not ``os.access``,
    which answers yes to root on a read-only mount."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".health-") as fh:
            fh.write(b"ok")
            fh.flush()
    except OSError as e:
        raise Unhealthy(f"cannot write WARC files in {path}: {e.strerror or e}") from None


def _probe_store(cfg: Config) -> None:
    from srcrawl.sql.store import open_store  # late: only the slave's check reads it

    try:
        store = open_store(cfg.db, cfg.warc_root)
    except SrcrawlError as e:
        raise Unhealthy(f"cannot reach the store: {e}") from None
    try:
        store.has_rows("meta")  # the schema is there and readable
    except SrcrawlError as e:
        raise Unhealthy(f"cannot read the store: {e}") from None
    finally:
        store.close()


def _phase_master(cfg: Config, phase: str) -> str:
    client, host = cfg.redis(), socket.gethostname()
    leases = [cfg.keys.master_lease(phase)]
    strategy = strategies.load(client, cfg.keys) if phase == "crawl" else None
    if strategy is not None and strategy.partitions > 1:
        leases = [k.master_lease(phase) for k in cfg.keys.partitions(strategy.partitions)]
    holders = [h.decode() if h else None for h in client.mget(leases)]
    held = [k for k, h in zip(leases, holders, strict=True) if h and holder_lives_here(h)]
    if held:
        return f"{phase} master on {host} holds {', '.join(held)}"
    # a process waits for the phase as the job's lease key names it, partitioned or not
    phase_lease = cfg.keys.master_lease(phase)
    waiting = client.get(lease_waiting_key(phase_lease, host))
    if waiting is not None and holder_lives_here(waiting.decode()):
        now = ", ".join(sorted({h.rsplit(":", 2)[0] for h in holders if h})) or "nobody"
        return f"{phase} master on {host} waits for {phase_lease} (held by {now})"
    others = ", ".join(sorted({h for h in holders if h})) or "nobody"
    raise Unhealthy(
        f"no {phase} master on {host} holds or waits for {phase_lease} (held by {others})"
    )


def _portal(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return f"{url} answers {r.status}"
    except urllib.error.HTTPError as e:
        try:
            reason = json.loads(e.read() or b"{}").get("error") or e.reason
        except ValueError:
            reason = e.reason
        raise Unhealthy(f"{url} answers {e.code}: {reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise Unhealthy(f"{url} does not answer: {getattr(e, 'reason', e)}") from None
