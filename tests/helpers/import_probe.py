"""Run ``srcrawl ARGS`` in a new process and learn which modules it imported."""

from __future__ import annotations

import subprocess
import sys

# Heavy libraries a command imports only if it needs them, and the command modules.
WATCHED = (
    "jieba",
    "rjieba",
    "redis",
    "pymysql",
    "lxml",
    "bs4",
    "pycurl",
    "scipy",
    "numpy",
    "pkg_resources",
    "srcrawl.master.commands",
    "srcrawl.indexer.commands",
    "srcrawl.pagerank.commands",
    "srcrawl.benchmarks.commands",
    "srcrawl.testweb.commands",
)

PROBE = """
import atexit, sys
watched = sys.argv[1].split(",")
atexit.register(lambda: print("imported:", *[m for m in watched if m in sys.modules],
                              file=sys.stderr))
sys.argv = ["srcrawl", *sys.argv[2:]]
from srcrawl.app.cli import main
main()
"""


def run_probed(args: list[str], env: dict[str, str], cwd: str | None = None):
    """The finished process and the watched modules it imported."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(WATCHED), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = [x for x in done.stderr.splitlines() if x.startswith("imported:")][-1]
    return done, set(line.split()[1:])
