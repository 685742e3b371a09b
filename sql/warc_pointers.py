"""Where page bodies and texts are: pointers into WARC files, each file's name kept once
(``warc_files``, numbered), and the texts kept there read back for the index and snippets.

The records themselves are written and read by :mod:`srcrawl.warc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from srcrawl.core.errors import StoreError
from srcrawl.sql.base import StoreBase
from srcrawl.warc.read import WarcTexts

if TYPE_CHECKING:
    from srcrawl.sql.pages import Page

WARC_NAME = "(SELECT name FROM warc_files WHERE id = pages.warc_file_id)"
"""A pages row's WARC file by name (in a statement reading ``FROM pages``, not aliased):
a primary key lookup per row, so readers see names as they did when rows held them."""
TEXT_COLUMNS = f"text, {WARC_NAME}, warc_offset, warc_length, text_length"
"""What :meth:`WarcPointers._text` reads a page's text from."""


@dataclass(frozen=True)
class StoredPayload:
    """Where a stored page's body is (see :meth:`WarcPointers.stored_payloads`)."""

    digest: str
    warc_file: str
    warc_offset: int
    warc_length: int
    text_length: int | None = None
    """Bytes of the conversion record after the response record; None: no text there."""


class WarcPointers(StoreBase):
    """The WARC files pages point into, and the page texts read from them."""

    warc_texts: WarcTexts | None = None
    """Where page texts kept in WARC files are read (see :func:`~srcrawl.sql.store.open_store`)."""
    INSERT_WARC_FILE: str  # (name): numbers a WARC file unless it has its number already
    WARC_FILE_ID: str  # (name): the number of a WARC file, the latest committed one

    def __init__(self) -> None:
        super().__init__()
        self._warc_ids: dict[str, int] = {}
        """WARC file name -> its warc_files.id, of numbers committed (ids never change, and
        a slave writes thousands of rows into one file: one look-up per file, not per row)."""

    def _numbered(self, cur: Any, names: set[str | None]) -> tuple[dict[str, int], dict[str, int]]:
        """(name -> number of every known WARC file and of ``names``, the numbers of those
        new to :attr:`_warc_ids`, given in ``cur``'s transaction): one look-up per new file."""
        new = self._warc_file_ids(cur, names - self._warc_ids.keys())
        return (self._warc_ids | new if new else self._warc_ids), new

    def _warc_file_ids(self, cur: Any, names: set[str | None]) -> dict[str, int]:
        """name -> warc_files.id of ``names``, numbering the new ones in ``cur``'s transaction.

        INSERT-or-ignore, then a read of the latest committed row: two writers
        numbering one name at once both get the one number (MySQL's reader would
        otherwise see its transaction's snapshot, which may predate the other's insert).
        """
        ids: dict[str, int] = {}
        for name in names:
            if name is not None:
                self._execute(cur, self.INSERT_WARC_FILE, (name,))
                ids[name] = int(self._execute(cur, self.WARC_FILE_ID, (name,)).fetchone()[0])
        return ids

    def stored_payloads(self, fps: Sequence[int]) -> dict[int, StoredPayload]:
        """fp -> the stored WARC record and payload digest of the pages among ``fps`` that
        have one (a page fetched again with the same digest gets a revisit record)."""
        rows = self.run(
            lambda cur: self._select_in(
                cur,
                f"SELECT fp, payload_digest, {WARC_NAME}, warc_offset, warc_length, "
                "text_length FROM pages WHERE fp IN ({}) AND payload_digest IS NOT NULL "
                "AND warc_file_id IS NOT NULL",
                list(fps),
            ),
            read_only=True,
        )
        return {
            int(fp): StoredPayload(
                digest, wfile, int(off), int(length), None if tlen is None else int(tlen)
            )
            for fp, digest, wfile, off, length, tlen in rows
        }

    def warc_files(self) -> list[str]:
        """The WARC files the stored pages point into, by name."""
        sql = "SELECT name FROM warc_files WHERE id IN (SELECT warc_file_id FROM pages)"
        rows = self._query(sql + " ORDER BY name")
        return [r[0] for r in rows]

    def page_text(self, page: Page) -> str:
        """The extracted text of a stored page: its row's, or its WARC conversion record's."""
        return self._text(
            (page.text, page.warc_file, page.warc_offset, page.warc_length, page.text_length)
        )

    def _text(self, r: Sequence[Any]) -> str:
        """The page text of a row of :data:`TEXT_COLUMNS`: in the row, or in its WARC file."""
        text, wfile, woffset, wlength, tlength = r
        if tlength is None or wfile is None:
            return text
        if self.warc_texts is None:
            raise StoreError(f"page text in WARC file {wfile}, but no WARC directory is known")
        return self.warc_texts.read(wfile, int(woffset) + int(wlength), int(tlength))
