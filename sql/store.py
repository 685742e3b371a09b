"""The store: one :class:`Store` over SQLite or MySQL/MariaDB, made of a part per concern.

==========================  ===============================================
``sql/base.py``             connection, transactions run again, batching
``sql/pages.py``            pages and links (the ``pages`` columns, once)
``sql/warc_pointers.py``    WARC files pages point into, texts kept there
``sql/index_marks.py``      what the index reads and marks on pages
``sql/ranks.py``            PageRank scores and their mean
``sql/jobs.py``             the state of each job's phases
``sql/migrations.py``       the schema file, and older schemas step by step
==========================  ===============================================

:class:`~srcrawl.sql.sqlite_store.SQLiteStore` and
:class:`~srcrawl.sql.mysql_store.MySQLStore` implement the connection plumbing and the
statements that differ by dialect; callers hold a :class:`Store` and call its methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from srcrawl.sql.index_marks import IndexMarks
from srcrawl.sql.jobs import Jobs
from srcrawl.sql.migrations import Migrations
from srcrawl.sql.pages import PagesAndLinks
from srcrawl.warc.read import WarcTexts
from srcrawl.warc.storage import WarcStorage

if TYPE_CHECKING:
    from srcrawl.sql.database_url import DatabaseURL


class Store(PagesAndLinks, IndexMarks, Jobs, Migrations):
    """One storage contract; :class:`SQLiteStore` and :class:`MySQLStore` implement it."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(db: DatabaseURL, warc_root: Path | WarcStorage | None = None) -> Store:
    """Open the store a :class:`~srcrawl.sql.database_url.DatabaseURL` names (no schema yet);
    page texts kept in WARC files are read under ``warc_root`` (a directory, or the
    storage of an object store)."""
    store: Store
    if db.kind == "sqlite":
        from srcrawl.sql.sqlite_store import SQLiteStore

        store = SQLiteStore(db.path, create_dirs=db.create_dirs)
    else:
        from srcrawl.sql.mysql_store import MySQLStore

        store = MySQLStore(db)
    store.warc_texts = WarcTexts(warc_root)
    return store
