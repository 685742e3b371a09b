"""Running a role: the entry point of every process a local run starts.

``python -m srcrawl.app.child`` reads its role (:mod:`srcrawl.app.roles`) as one JSON
object on stdin and runs it; a forked child calls :func:`run_child` with the
value. ``srcrawl slave start`` and ``srcrawl master start`` run the same
roles through :func:`serve` and :func:`run_crawl_master`. Exit codes are the
command line's: 0 done, 2 an expected failure (one ``srcrawl: …`` line on
stderr), 128 + the signal number when a signal ended it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from srcrawl.app.phases import build_handlers
from srcrawl.app.roles import CrawlMasterRole, Role, SlaveRole, role_from_json
from srcrawl.core.defaults import DEFAULT_HEARTBEAT_INTERVAL
from srcrawl.core.errors import SrcrawlError
from srcrawl.core.signals import die_with_parent, exit_code_of
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.master.crawl_master import CrawlMaster
    from srcrawl.master.partitioned import PartitionedMaster

EXIT_FAILURE = 2
"""An expected failure, as the command line ends one."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def serve(cfg: Config, role: SlaveRole, *, announce: Callable[[str], None] = _stderr) -> None:
    """Serve the role's phases until stopped (the first SIGTERM finishes the batch)."""
    from srcrawl.slave.runtime import Slave

    worker = Slave.from_config(
        cfg,
        build_handlers(cfg, role),
        heartbeat_ttl=role.heartbeat_ttl,
        heartbeat_interval=min(DEFAULT_HEARTBEAT_INTERVAL, role.heartbeat_ttl / 3),
    )
    worker.install_signal_handlers()
    announce(f"{worker.id} serving {','.join(role.phases)}")
    worker.run(burst=role.burst)


def run_crawl_master(
    cfg: Config, role: CrawlMasterRole
) -> tuple[bool, CrawlMaster | PartitionedMaster]:
    """Run the job's crawl master until the crawl completes or it is stopped.

    Returns whether the crawl completed, and the master (for its counters). A
    partitioned crawl's master process runs its fair share of the partitions
    (master/partitioned.py).
    """
    from srcrawl.master.crawl_master import CrawlMaster
    from srcrawl.master.partitioned import PartitionedMaster

    master = CrawlMaster.from_config(cfg, wait_for_work=role.keep_running)
    if master.partitions > 1:
        crew = PartitionedMaster(cfg, master.partitions, keep_running=role.keep_running)
        crew.install_signal_handlers()
        return crew.run(), crew
    master.install_signal_handlers()
    return master.run(keep_running=role.keep_running, end_deferred=role.end_deferred), master


def run_role(cfg: Config, role: Role) -> None:
    if isinstance(role, SlaveRole):
        serve(cfg, role)
    else:
        run_crawl_master(cfg, role)


def run_child(role: Role) -> int:
    """Run ``role`` in this process, a child of a local run; its exit code."""
    die_with_parent()  # leave with the run, even one killed outright
    try:
        cfg = Config.load()
        try:
            cfg.check()
            run_role(cfg, role)
        finally:
            cfg.close()
    except SrcrawlError as e:
        _stderr(f"srcrawl: {e}")
        return EXIT_FAILURE
    except KeyboardInterrupt as e:
        return exit_code_of(e)
    return 0


def main() -> None:
    try:
        role = role_from_json(sys.stdin.read())
    except SrcrawlError as e:
        _stderr(f"srcrawl: {e}")
        sys.exit(EXIT_FAILURE)
    sys.exit(run_child(role))


if __name__ == "__main__":
    main()
