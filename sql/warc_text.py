"""Page texts kept in the crawl's WARC files, read back for the index and the snippets.

With ``--body-store warc`` a crawl writes each page's extracted text as a WARC/1.1
``conversion`` record right after the page's response record, and the ``pages`` row
keeps only its length (``text_length``): the row holds what the index and the portal
look up by key, the text is one seek and one read away. This module reads those
records; the writer is :mod:`srcrawl.slave.warc`.
"""

from __future__ import annotations

import io
from pathlib import Path

from srcrawl.errors import StoreError


class WarcTexts:
    """Reads conversion records from WARC files named as the ``pages`` rows name them:
    relative to ``root`` (the WARC directory), or absolute."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def path(self, name: str) -> Path:
        p = Path(name)
        if p.is_absolute():
            return p
        if self.root is None:
            raise StoreError(f"page text in WARC file {name}, but no WARC directory is known")
        return self.root / p

    def read(self, name: str, offset: int, length: int) -> str:
        """The text of the conversion record of ``length`` bytes at ``offset`` of ``name``."""
        try:
            with open(self.path(name), "rb") as fh:
                fh.seek(offset)
                data = fh.read(length)
        except OSError as e:
            raise StoreError(f"cannot read page text from WARC file {name}: {e}") from e
        from fastwarc.warc import ArchiveIterator  # late: most commands never read a text

        for record in ArchiveIterator(io.BytesIO(data), parse_http=False):
            return record.reader.read().decode("utf-8", "replace")
        raise StoreError(f"no WARC record at {name}:{offset}")
