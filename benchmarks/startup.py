"""How long a user waits for a command: ``srcrawl search`` run as a process, start-up
included, beside ``srcrawl --version`` (the floor: Python and the command line alone).

The benchmark generates a small corpus once (Chinese and English pages), then
indexes a copy of it with each code it compares (``srcrawl index`` of that
code, on the configured Redis), so every code searches an index it wrote
itself. Each round runs every command once per code, the codes in alternating
order, each as ``python -m srcrawl.app.cli …`` in a scratch directory with
``PYTHONPATH`` naming the code: wall time from process start to exit, as a
shell user sees it. One untimed run per command first fills the caches
(jieba's prefix dictionary, the page cache), as any second search finds them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import srcrawl
from srcrawl.benchmarks.index import BenchmarkError, _drop_job_keys
from srcrawl.benchmarks.scaling import machine_info
from srcrawl.indexer.tokenizer import load_stopwords
from srcrawl.lab.corpus import Corpus
from srcrawl.settings.config import Config
from srcrawl.sql.database_url import DatabaseURL
from srcrawl.sql.store import open_store

Progress = Callable[[str], None]
CHILD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Code:
    """One checkout of srcrawl to run: its label and the directory holding its ``srcrawl/``."""

    label: str
    root: Path


def this_code() -> Code:
    """The code this process runs (a checkout's root, or the installed package's parent)."""
    return Code("this", Path(srcrawl.__file__).resolve().parents[1])


def code_at(label: str, root: str | Path) -> Code:
    """Another checkout; raise BenchmarkError unless ``root`` holds a srcrawl package."""
    path = Path(root).resolve()
    if not (path / "srcrawl" / "__init__.py").is_file():
        raise BenchmarkError(f"{root}: no srcrawl/__init__.py there (give a checkout's root)")
    return Code(label, path)


def default_queries(seed: int) -> tuple[str, str]:
    """An English and a Chinese query of two words each that the corpus holds often."""
    corpus = Corpus(seed)
    stop = load_stopwords()
    zh = [w for w in corpus.zh if len(w) >= 2 and w not in stop][:2]
    return " ".join(corpus.en[:2]), " ".join(zh)


@dataclass
class StartupResult:
    """Wall seconds of each (command, code) over the rounds."""

    pages: int
    rounds: int
    commands: dict[str, list[str]]  # name → arguments after `srcrawl`
    codes: list[Code]
    walls: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def stats(self, command: str, code: str) -> dict[str, float]:
        walls = sorted(self.walls[(command, code)])
        p95 = walls[max(0, math.ceil(0.95 * len(walls)) - 1)]  # nearest rank
        return {"min": walls[0], "median": statistics.median(walls), "p95": p95}

    def render(self) -> str:
        head = (
            f"command start-up: {self.rounds} rounds, each command as a new process, "
            f"wall seconds; index of {self.pages} pages"
        )
        width = max(_columns(self._shown(c)) for c in self.commands) + 2
        lines = [head, f"  {'command'.ljust(width)}{'code':<8}{'min':>8}{'median':>8}{'p95':>8}"]
        for command in self.commands:
            for code in self.codes:
                s = self.stats(command, code.label)
                lines.append(
                    f"  {_pad(self._shown(command), width)}{code.label:<8}"
                    f"{s['min']:>8.3f}{s['median']:>8.3f}{s['p95']:>8.3f}"
                )
        return "\n".join(lines)

    def _shown(self, command: str) -> str:
        return "srcrawl " + " ".join(
            f'"{a}"' if " " in a or not a.isascii() else a for a in self.commands[command]
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "parameters": {"pages": self.pages, "rounds": self.rounds},
            "machine": machine_info(),
            "codes": {c.label: str(c.root) for c in self.codes},
            "rows": [
                {
                    "command": self._shown(command),
                    "code": code.label,
                    **self.stats(command, code.label),
                    "walls": self.walls[(command, code.label)],
                }
                for command in self.commands
                for code in self.codes
            ],
        }


def _columns(text: str) -> int:
    """Terminal columns of ``text``: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _columns(text))


def child_env(code: Code, extra: dict[str, str]) -> dict[str, str]:
    """The user's environment without srcrawl's settings, running ``code``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    env["PYTHONPATH"] = str(code.root)
    env.update(extra)
    return env


def search_child(
    code: Code, script: str, args: Sequence[str], cwd: Path, extra: dict[str, str]
) -> Any:
    """The JSON a searching ``script`` (``python -c``) prints, run with ``code`` and its
    ``args``; raise BenchmarkError with its last error line if it fails."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=child_env(code, extra),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchmarkError(f"searching with the {code.label} code failed: {last}")
    return json.loads(done.stdout)


def _run(code: Code, args: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds and stdout of ``srcrawl ARGS`` run with ``code``; raise if it fails."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchmarkError(f"srcrawl {' '.join(args)} ({code.label}) failed: {last}")
    return wall, done.stdout


def _pages_db(directory: Path, pages: int, seed: int, say: Progress) -> Path:
    """A SQLite file holding the generated pages and no index (made once)."""
    path = directory / f"pages-{pages}-{seed}.db"
    marker = path.with_suffix(".ready")
    if not marker.exists():
        say(f"generating {pages} pages (seed {seed}) into {path}")
        path.unlink(missing_ok=True)
        store = open_store(DatabaseURL(kind="sqlite", path=str(path)))
        try:
            store.init_schema()
            store.put_pages(Corpus(seed).pages(pages))
        finally:
            store.close()
        marker.write_text(json.dumps({"pages": pages, "seed": seed}))
    return path


def index_dir_of(db: Path) -> Path:
    """The index directory beside a benchmark's scratch store (a code that keeps its
    index in the store ignores it)."""
    return db.with_suffix(".tantivy")


def _index_copy(cfg: Config, code: Code, pages_db: Path, say: Progress) -> Path:
    """A copy of the pages indexed by ``code``'s own ``srcrawl index``."""
    db = pages_db.with_name(f"index-{code.label}.db")
    db.unlink(missing_ok=True)
    shutil.rmtree(index_dir_of(db), ignore_errors=True)
    shutil.copyfile(pages_db, db)
    job = f"bench-startup-{code.label}-{os.getpid()}"
    say(f"indexing {db.name} with the {code.label} code ({code.root})")
    env = child_env(
        code,
        {
            "SRCRAWL_REDIS_URL": cfg.resolved_redis_url(),
            "SRCRAWL_DB_URL": f"sqlite:///{db}",
            "SRCRAWL_JOB": job,
            "SRCRAWL_INDEX_DIR": str(index_dir_of(db)),
        },
    )
    try:
        _run(code, ["index", "--slaves", "1"], db.parent, env)
    finally:
        _drop_job_keys(cfg.with_job(job))
    return db


def run_startup_benchmark(
    cfg: Config,
    *,
    codes: Sequence[Code],
    rounds: int,
    pages: int,
    seed: int,
    queries: tuple[str, str] | None = None,
    say: Progress = print,
) -> StartupResult:
    """Time ``--version`` and an English and a Chinese search, per code, over ``rounds``."""
    english, chinese = queries or default_queries(seed)
    directory = cfg.home / "bench" / "startup"
    directory.mkdir(parents=True, exist_ok=True)
    pages_db = _pages_db(directory, pages, seed, say)
    envs = {}
    for c in codes:
        db = _index_copy(cfg, c, pages_db, say)
        home = directory / f"home-{c.label}"
        envs[c.label] = child_env(
            c,
            {
                "SRCRAWL_DB_URL": f"sqlite:///{db}",
                "SRCRAWL_HOME": str(home),
                "SRCRAWL_INDEX_DIR": str(index_dir_of(db)),
            },
        )
    commands = {
        "version": ["--version"],
        "search-en": ["search", english],
        "search-zh": ["search", chinese],
    }
    result = StartupResult(pages, rounds, commands, list(codes))
    for code in codes:  # untimed: fill the caches; a search that finds nothing is no benchmark
        for name, args in commands.items():
            _, out = _run(code, args, directory, envs[code.label])
            if name.startswith("search") and " 1. " not in out:
                raise BenchmarkError(f"srcrawl {' '.join(args)} ({code.label}) found nothing")
    for r in range(rounds):
        say(f"round {r + 1}/{rounds}")
        for code in codes if r % 2 == 0 else list(reversed(codes)):
            for name, args in commands.items():
                wall, _ = _run(code, args, directory, envs[code.label])
                result.walls.setdefault((name, code.label), []).append(wall)
    return result
