"""Whether the job the portal serves can be searched at all, and if not, what to run.

A first run goes wrong quietly otherwise: ``srcrawl demo`` writes job ``demo`` into
its own store, so a bare ``srcrawl serve`` (job ``default``) or ``srcrawl --job demo
serve`` (the default store) searches an index or a store that is missing or empty,
and every query answers with nothing. The portal says so at start and on its pages,
naming the job, the index and the store, and the command that opens a job that has
an index.
"""

from __future__ import annotations

import time
from pathlib import Path

import tantivy

from srcrawl.core.defaults import DEFAULT_INDEX_DIR_NAME
from srcrawl.core.errors import SrcrawlError
from srcrawl.settings.config import Config

RECHECK_S = 5.0
"""How often a portal with a problem looks again (an index run may be under way)."""


def _index_docs(path: Path) -> int | None:
    """The documents of the index at ``path``; None when there is no index."""
    if not path.is_dir() or not tantivy.Index.exists(str(path)):
        return None
    try:
        return tantivy.Index.open(str(path)).searcher().num_docs
    except ValueError:  # opened by another format or mid-write: counted as there
        return 1


def serve_command(cfg: Config) -> str:
    """The ``srcrawl serve`` command that opens ``cfg``'s job and store."""
    store = "" if cfg.db.kind != "sqlite" else f" --db-url sqlite:///{cfg.db.path}"
    return f"srcrawl --job {cfg.job}{store} serve"


def _other_jobs(cfg: Config) -> list[str]:
    """``serve`` commands for the other jobs with an index under ``cfg``'s home."""
    from srcrawl.app.demo import DEMO_JOB, demo_config

    root = cfg.home / DEFAULT_INDEX_DIR_NAME
    if cfg.index_dir is not None or cfg.index_url is not None or not root.is_dir():
        return []
    commands = []
    for d in sorted(root.iterdir()):
        if d.name == cfg.job or not _index_docs(d):
            continue
        try:
            other = cfg.with_job(d.name)
        except SrcrawlError:  # a directory no job is named after
            continue
        # the demo keeps its own SQLite file (srcrawl/app/demo.py): the command must name it
        commands.append(serve_command(demo_config(other) if d.name == DEMO_JOB else other))
    return commands


def problems(cfg: Config) -> list[str]:
    """What keeps ``cfg``'s job from being searched, one sentence each (none: ready)."""
    out = []
    docs = _index_docs(cfg.index_path)
    if docs is None:
        out.append(
            f"job {cfg.job!r} has no index at {cfg.index_path}: run `srcrawl --job {cfg.job} "
            "index` after a crawl"
        )
    elif docs == 0:
        out.append(f"the index of job {cfg.job!r} at {cfg.index_path} is empty")
    try:
        pages = cfg.store().has_rows("pages")  # (one look-up: a count of a big store is not)
    except Exception as e:  # an unreachable store: said, not fatal to the portal
        out.append(f"the store {cfg.db.redacted()} cannot be read: {e}")
    else:
        if not pages:
            out.append(f"the store {cfg.db.redacted()} holds no pages")
    if out:
        others = _other_jobs(cfg)
        if others:
            out.append("jobs with an index: " + "; ".join(f"`{c}`" for c in others))
    return out


class Readiness:
    """:func:`problems` as the portal's pages show them: looked at again every RECHECK_S
    while there are any (none once the job is ready: a ready portal spends nothing on it)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.problems = problems(cfg)
        self._checked = time.monotonic()

    def current(self) -> list[str]:
        if self.problems and time.monotonic() - self._checked > RECHECK_S:
            self.problems = problems(self.cfg)
            self._checked = time.monotonic()
        return self.problems
