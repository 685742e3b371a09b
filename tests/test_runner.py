"""A phase run on one machine: typed roles, the child entry point, slave logs and liveness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from srcrawl.app.roles import CrawlMasterRole, SlaveRole, role_from_json, role_to_json
from srcrawl.app.runner import PhaseRun
from srcrawl.core.errors import ConfigError, SrcrawlError
from srcrawl.settings.config import Config


def test_a_role_crosses_the_process_boundary_as_typed_json() -> None:
    slave = SlaveRole(phases=("crawl", "index"), threads=3, parser="bs4", burst=True)
    assert role_from_json(role_to_json(slave)) == slave
    master = CrawlMasterRole(keep_running=True)
    assert role_from_json(role_to_json(master)) == master
    for bad in (
        "",
        "[]",
        '{"role": "chef"}',
        '{"role": "slave", "phases": ["nap"]}',
        '{"role": "slave", "threads": 0}',
        '{"role": "slave", "colour": 1}',
    ):
        with pytest.raises(ConfigError):
            role_from_json(bad)


def test_the_child_entry_point_refuses_a_malformed_role_with_one_line(tmp_path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "srcrawl.app.child"],
        input='{"role": "chef"}',
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert r.returncode == 2
    assert r.stderr.startswith("srcrawl: not a role of a local run") and "Traceback" not in r.stderr


def _wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_phase_run_logs_each_slave_in_one_place_and_sees_them_die(
    redis_url, keys, tmp_path
) -> None:
    home = tmp_path / "home"
    cfg = Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_url,
            "SRCRAWL_JOB": keys.job,
            "SRCRAWL_HOME": str(home),
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        }
    )
    logs = home / "logs" / keys.job / "pagerank"
    with PhaseRun(cfg, "pagerank", 2) as run:
        assert run.local is run and run.log_dir == logs
        names = [logs / "slave-1.log", logs / "slave-2.log"]
        _wait_for(lambda: all(p.exists() and "serving pagerank" in p.read_text() for p in names))
        run.check_slaves()  # both alive: nothing to say
        for proc in run.slaves.procs:
            os.kill(proc.pid, signal.SIGKILL)
        _wait_for(lambda: run.alive() == 0)
        with pytest.raises(SrcrawlError, match=f"every local pagerank slave exited; see {logs}"):
            run.check_slaves()
    assert sorted(p.name for p in logs.iterdir()) == ["slave-1.log", "slave-2.log"]
    with PhaseRun(cfg, "pagerank", 0) as run:  # the slaves run elsewhere
        assert run.local is None
        run.check_slaves()
    cfg.close()
