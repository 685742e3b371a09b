"""A search's instructions on a real corpus, counted by callgrind: srcrawl, Tantivy alone,
and another code.

The CPU time of a search (benchmarks/search_cpu.py) swings by a third between two runs
of the same code on a shared machine. An instruction count does not: callgrind counts
the same for the same binary, inputs and environment, whatever else the machine runs.
So a change of a tenth in a search's work shows here where the timed passes cannot
show it. Instructions are not time (Tantivy's Rust does more of them a nanosecond than
Python's interpreter), so the goals stay judged on the timed passes; this is the
steadier side-by-side of two codes.

Each code's pass runs in a child under ``valgrind --tool=callgrind`` with counting off
while it starts, loads the models and runs the first few queries, then on for one pass
over the queries (``callgrind_control -i on``, asked by the child itself), and off again.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srcrawl.benchmarks.index import BenchmarkError
from srcrawl.benchmarks.search_cpu import WARM_QUERIES, CodeJob
from srcrawl.benchmarks.startup import child_env
from srcrawl.core.defaults import DEFAULT_SEARCH_TOP

COUNT_TIMEOUT_S = 1800
"""Seconds a counted pass may take (callgrind runs Python 50 to 100 times slower)."""

CHILD = r"""
import json, os, pathlib, subprocess, sys
from srcrawl.indexer.search import QueryError, Searcher
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import open_store
db, index, warc, queries_file, warm, top, which = sys.argv[1:8]
queries = json.load(open(queries_file, encoding="utf-8"))
store = open_store(DatabaseURL(kind="sqlite", path=db), pathlib.Path(warc))
if which == "tantivy":
    from srcrawl.benchmarks.search_cpu import TantivyAlone
    alone = TantivyAlone(pathlib.Path(index))
    prepared = []
    for q in queries:
        try:
            prepared.append(alone.query(q))
        except QueryError:  # a query srcrawl refuses: nothing to search
            pass
    work = [lambda p=p: alone.search(p) for p in prepared]
else:
    searcher = Searcher(store, index)
    def search(q):
        try:
            searcher.search(q, top=int(top))
        except QueryError:
            pass
    work = [lambda q=q: search(q) for q in queries]
for w in work[: int(warm)]:
    w()
if which != "tantivy":
    try:  # the models loaded as a server loads them, at start (the portal)
        from srcrawl.indexer.search import meaning
        getattr(meaning, "available", lambda: None)()
    except ImportError:  # a code before it
        pass
    getattr(getattr(searcher, "tokenizer", None), "warm_up", lambda: None)()
def counting(state):
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True,
                   capture_output=True)
counting("on")
for w in work:
    w()
counting("off")
json.dump({"searches": len(work)}, sys.stdout)
"""

_COLLECTED = re.compile(r"Collected : (\d+)")


@dataclass
class SearchInstructions:
    """Instructions a search of each code counted (label -> instructions a search)."""

    per_search: dict[str, float] = field(default_factory=dict)

    def render(self) -> str:
        mine = self.per_search["srcrawl"]
        cells = [
            f"{label} {n / 1e6:.2f} M" + ("" if label == "srcrawl" else f" (×{mine / n:.2f})")
            for label, n in self.per_search.items()
        ]
        return "  instructions a search (callgrind, one pass): " + ", ".join(cells)

    def as_json(self) -> dict[str, Any]:
        return dict(self.per_search)


def valgrind_missing() -> str | None:
    """Why instructions cannot be counted here (None: they can)."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install valgrind)"
    return None


def count_instructions(
    queries: Sequence[str], this: CodeJob, base: CodeJob | None, scratch: Path
) -> SearchInstructions:
    """Instructions a search over one pass of ``queries``: srcrawl's, Tantivy alone's on
    srcrawl's index, and ``base``'s."""
    queries_file = scratch / "queries.json"
    queries_file.write_text(json.dumps(list(queries), ensure_ascii=False), encoding="utf-8")
    out = SearchInstructions()
    passes = [("srcrawl", this, "code"), ("tantivy", this, "tantivy")]
    if base is not None:
        passes.append((base.code.label, base, "code"))
    for label, job, which in passes:
        out.per_search[label] = _counted_pass(job, queries_file, which, scratch)
    return out


def _counted_pass(job: CodeJob, queries_file: Path, which: str, scratch: Path) -> float:
    """Instructions a search of one counted pass of ``job``'s code (``which``: its search,
    or Tantivy alone's)."""
    args = [str(job.db), str(job.index_dir), str(job.warc_dir), str(queries_file)]
    args += [str(WARM_QUERIES), str(DEFAULT_SEARCH_TOP), which]
    counts = scratch / f"callgrind.{job.code.label}.{which}.out"
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    command += [f"--callgrind-out-file={counts}", sys.executable, "-c", CHILD, *args]
    done = subprocess.run(
        command,
        cwd=job.db.parent,
        env=child_env(job.code, {}),
        capture_output=True,
        text=True,
        timeout=COUNT_TIMEOUT_S,
    )
    collected = _COLLECTED.findall(done.stderr)
    if done.returncode != 0 or not collected:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchmarkError(f"counting the {job.code.label} code's instructions failed: {last}")
    counts.unlink(missing_ok=True)
    searches = json.loads(done.stdout)["searches"]
    return int(collected[-1]) / max(1, searches)
