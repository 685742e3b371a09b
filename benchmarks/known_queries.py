"""Known-item query files of real documentation corpora, and how an answer is judged.

A query file is UTF-8 text: header lines ``# key: value`` (``corpus``,
``package`` with its version, ``root``: the HTML tree's folder inside the
package, ``seed``: the page the crawl starts from), other ``#`` lines are
comments, and one query a line: ``query<TAB>answer``, the answer a page's path
under the root, or several equally right paths ``a|b`` when the corpus holds
true duplicates. The shipped files (``benchmarks/corpora/*.tsv``) were written
from the pages before any search was run on them, and are not edited after.

A hit's URL is judged by its path: ``http://127.0.0.1:P/ref/models/querysets.html``
is the page ``ref/models/querysets.html``; a folder's URL is its ``index.html``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import unquote, urlsplit

from srcrawl.benchmarks.index import BenchmarkError

BUILTIN = (
    "django-en",
    "debian-handbook-zh",
    "flask-en",
    "sphinx-en",
    "scrapy-en",
    "pytest-en",
    "debian-installer-zh",
    "securing-debian-zh",
    "gimp-en",
    "libreoffice-zh",
    "apache-en",
    "gnucash-en",
)
"""The shipped corpora: ``benchmarks/corpora/NAME.tsv``. Several projects' manuals in
each language, so that no ranking weight can be fitted to one of them."""

ALL = "all"
"""The ``--corpus`` name standing for every shipped corpus."""


def expand_corpora(names: Sequence[str]) -> list[str]:
    """``names`` with ``all`` replaced by every shipped corpus, each name once, in order."""
    out: list[str] = []
    for name in names:
        for one in BUILTIN if name == ALL else (name,):
            if one not in out:
                out.append(one)
    return out


@dataclass(frozen=True)
class KnownQuery:
    query: str
    answers: tuple[str, ...]  # paths under the corpus root, any of them right
    line: int  # in the query file, for error messages


@dataclass(frozen=True)
class QueryFile:
    path: Path
    header: dict[str, str]
    queries: list[KnownQuery]

    @property
    def name(self) -> str:
        return self.header.get("corpus") or self.path.stem

    @property
    def package(self) -> tuple[str, str] | None:
        """(name, version) of the Debian package holding the corpus, None for a directory."""
        words = self.header.get("package", "").split()
        return (words[0], words[1]) if len(words) >= 2 else None

    @property
    def seed(self) -> str:
        return self.header.get("seed", "index.html")


def builtin_query_file(name: str) -> Path:
    """The shipped query file of corpus ``name``."""
    ref = resources.files("srcrawl.benchmarks").joinpath("corpora", f"{name}.tsv")
    return Path(str(ref))


def read_query_file(path: Path) -> QueryFile:
    """The header and queries of ``path``; BenchmarkError naming the line of a bad one."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise BenchmarkError(f"query file {path}: cannot be read ({e})") from e
    header: dict[str, str] = {}
    queries = []
    for n, line in enumerate(lines, 1):
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep and not queries and key.strip().isidentifier():
                header.setdefault(key.strip(), value.strip())
            continue
        if not line.strip():
            continue
        query, sep, answers = line.partition("\t")
        paths = tuple(a.strip().lstrip("/") for a in answers.split("|") if a.strip())
        if not sep or not query.strip() or not paths:
            raise BenchmarkError(f"{path}:{n}: expected 'query<TAB>answer path', got {line[:80]!r}")
        queries.append(KnownQuery(query.strip(), paths, n))
    if not queries:
        raise BenchmarkError(f"query file {path}: no queries in it")
    return QueryFile(path, header, queries)


def check_answers(qf: QueryFile, root: Path) -> None:
    """BenchmarkError unless every answer is a file of the corpus at ``root``."""
    missing = [(q.line, a) for q in qf.queries for a in q.answers if not (root / a).is_file()]
    if missing:
        shown = ", ".join(f"line {n}: {a}" for n, a in missing[:5])
        raise BenchmarkError(
            f"{qf.path}: {len(missing)} answer(s) not in the corpus at {root} ({shown})"
        )


def corpus_path(url: str) -> str:
    """The corpus path a URL of the served tree stands for."""
    path = unquote(urlsplit(url).path).lstrip("/")
    return path + "index.html" if path == "" or path.endswith("/") else path


def rank_of_answer(answers: Sequence[str], urls: Sequence[str]) -> int | None:
    """1-based position of the first URL that is one of ``answers``, None when none is."""
    for i, url in enumerate(urls, 1):
        if corpus_path(url) in answers:
            return i
    return None
