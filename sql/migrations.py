"""The schema: created from the schema file of the backend (``sqlite.sql``, ``mysql.sql``,
the single source of truth for the tables), and a store made by an older version brought
to :data:`SCHEMA_VERSION` by numbered steps (:data:`STEPS`).

Each step finds for itself whether a store needs it (a column, table or index missing
or left over), not by the version a store records: a store is migrated by every step it
needs whatever version it says, and a migration cut short (MySQL commits each DDL
statement on its own) is finished at the next start. The statements of a step that
differ by backend are the backend's (``ADD_FETCH_OUTCOME`` and the like).
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from srcrawl.sql.base import log
from srcrawl.sql.ranks import RANK_MEAN, Ranks

SCHEMA_VERSION = "8"
OLD_INDEX_TABLES = ("doclens", "postings", "terms")
"""The tables of the index schemas 1 to 7 kept in SQL."""
OLD_INDEX_META = (
    "index_docs",
    "index_length",
    "index_title_length",
    "index_anchor_length",
    "index_block",
)
RETIRED_INDEXES = (("links", "links_dst"),)
"""(table, index) pairs older schemas had and this one drops."""


def schema_statements(dialect: str) -> list[str]:
    """The statements of a schema file, split on ``;`` at the end of a line."""
    text = resources.files("srcrawl.sql").joinpath(f"{dialect}.sql").read_text("utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    statements, current = [], []
    for line in lines:
        current.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(current).strip().rstrip(";"))
            current = []
    if "".join(current).strip():
        statements.append("\n".join(current).strip())
    return [s for s in statements if s]


Columns = dict[str, set[str]]
"""The columns a store's pages and links had before the migration (empty: no such table)."""


@dataclass(frozen=True)
class Step:
    """What brings a store to schema ``version`` from the one before."""

    version: int
    change: str
    alter: Callable[[Migrations, Any, Columns], None] | None = None
    """Changes the old tables, before the schema file creates what is missing."""
    fill: Callable[[Migrations, Any, Columns], None] | None = None
    """Moves rows into what the schema file created."""


class Migrations(Ranks):
    """Creating the schema and migrating an older one (see the module docstring)."""

    ADD_FETCH_OUTCOME: tuple[str, ...]  # 3 -> 4: pages get error and body_state
    ADD_LINK_ANCHOR: str  # 4 -> 5: links get anchor (and MySQL links_to)
    ADD_WARC: tuple[tuple[str, str], ...]  # 5 -> 6: (a WARC pointer column, its ADD)
    ADD_REVISIT: tuple[str, ...]  # 5 -> 6: pages get the recrawl's columns
    MOVE_WARC_NAMES: tuple[str, ...]  # 6 -> 7: warc_file names into warc_files and ids

    def init_schema(self) -> None:
        """Create every table that is missing and migrate an older schema; safe to run any
        number of times, and by many processes at once (see :meth:`_schema_lock`)."""
        with self._schema_lock():
            self.run(self._create_schema)

    def _schema_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while the schema is created or migrated: one process does it while the
        others wait, then find it done. SQLite's write transaction is lock enough."""
        return contextlib.nullcontext()

    def _create_schema(self, cur: Any) -> None:
        # idempotent as a whole: MySQL commits each DDL statement on its own, so a run
        # cut short (or run again after a passing error) finishes what is left
        found = {"pages": self._columns(cur, "pages"), "links": self._columns(cur, "links")}
        for step in STEPS:
            if step.alter is not None:
                step.alter(self, cur, found)
        for statement in schema_statements(self.dialect):
            cur.execute(statement)
        for step in STEPS:
            if step.fill is not None:
                step.fill(self, cur, found)
        self._execute(cur, self.UPSERT_META, ("schema_version", SCHEMA_VERSION))

    @abstractmethod
    def _retire_indexes(self, cur: Any) -> None:
        """Drop the indexes of RETIRED_INDEXES that a store made by an older version has."""

    def schema_version(self) -> str | None:
        rows = self._query("SELECT v FROM meta WHERE k = ?", ("schema_version",))
        return rows[0][0] if rows else None


def _add_fetch_outcome(store: Migrations, cur: Any, found: Columns) -> None:
    if found["pages"] and "error" not in found["pages"]:
        for statement in store.ADD_FETCH_OUTCOME:
            store._execute(cur, statement)


def _add_link_anchor(store: Migrations, cur: Any, found: Columns) -> None:
    if found["links"] and "anchor" not in found["links"]:
        store._execute(cur, store.ADD_LINK_ANCHOR)


def _retire_indexes(store: Migrations, cur: Any, found: Columns) -> None:
    store._retire_indexes(cur)


def _add_warc_and_revisit(store: Migrations, cur: Any, found: Columns) -> None:
    # each pointer column that is missing, in its latest form: a store before 6 gets
    # warc_file_id at once (not the name column 6 had), an early 6 its text_length
    for column, statement in store.ADD_WARC if found["pages"] else ():
        if column not in found["pages"]:
            store._execute(cur, statement)
    if found["pages"] and "next_fetch" not in found["pages"]:
        for statement in store.ADD_REVISIT:
            store._execute(cur, statement)


def _number_warc_files(store: Migrations, cur: Any, found: Columns) -> None:
    if "warc_file" in found["pages"]:  # schema 6: each row named its WARC file
        for statement in store.MOVE_WARC_NAMES:
            store._execute(cur, statement)


def _drop_old_index(store: Migrations, cur: Any, found: Columns) -> None:
    """Drop the index tables of schema 7 and before (if the store still has one): the
    pages are marked unindexed, and the next ``srcrawl index`` builds the Tantivy index
    anew. The tables are dropped last, each DROP committed by MySQL on its own, so a
    migration cut short is done again at the next start."""
    if not any(store._columns(cur, table) for table in OLD_INDEX_TABLES):
        return
    log.warning(
        "the store holds an index in SQL tables, from before the index moved to Tantivy: "
        "the tables were dropped and every page marked unindexed; run `srcrawl index` "
        "to index them anew"
    )
    # Pages first, then the tables: MySQL commits before each DROP, so a crash in
    # between leaves pages marked unindexed and a table, which makes the next start
    # finish this.
    store._execute(cur, "UPDATE pages SET indexed_at = NULL")
    store._select_in(cur, "DELETE FROM meta WHERE k IN ({})", OLD_INDEX_META)
    for table in OLD_INDEX_TABLES:
        store._execute(cur, f"DROP TABLE IF EXISTS {table}")


def _keep_rank_mean(store: Migrations, cur: Any, found: Columns) -> None:
    # ranked before the mean was kept beside the scores
    if not store._execute(cur, "SELECT 1 FROM meta WHERE k = ?", (RANK_MEAN,)).fetchone():
        store._write_rank_mean(cur)


STEPS: tuple[Step, ...] = (
    Step(1, "a row per (term, page): the index in SQL"),
    Step(2, "postings packed per (term, merge block), terms numbered in a terms table"),
    Step(3, "terms known by their fingerprints, no terms table"),
    Step(
        4,
        "pages record a failed fetch's error and whether the body is complete",
        alter=_add_fetch_outcome,
    ),
    Step(
        5,
        "links carry their anchor text, indexed by dst (links_to; the older links_dst "
        "goes); the index holds title, body and anchor text as fields",
        alter=_add_link_anchor,
        fill=_retire_indexes,
    ),
    Step(
        6,
        "pages point into WARC files (warc_offset, warc_length) and keep the body's payload "
        "digest and the text's length there, the body itself no longer in SQL by default; "
        "and keep their validators (ETag, Last-Modified), a digest of what the index sees, "
        "their revisit interval and next fetch time (recrawl)",
        alter=_add_warc_and_revisit,
    ),
    Step(
        7,
        "pages name their WARC file by a number (warc_file_id), each name kept once in warc_files",
        fill=_number_warc_files,
    ),
    Step(
        8,
        "the index is a Tantivy directory, no postings or doclens tables (a store that has "
        "them is indexed anew once); the mean PageRank score kept beside the scores",
        alter=_drop_old_index,
        fill=_keep_rank_mean,
    ),
)
"""Schema versions 1 to :data:`SCHEMA_VERSION`, each with the step that brings a store to
it: every ``alter`` in order, then the schema file, then every ``fill`` in order."""
