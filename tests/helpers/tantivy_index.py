"""Reading a real Tantivy index in tests: which pages hold which terms, and indexing
stored pages in this process (the slave's tokenizing, the master's writer)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import tantivy

from srcrawl.indexer.engine import (
    STEMMED,
    TEXT_FIELDS,
    WITH_POSITIONS,
    IndexReader,
    IndexWriter,
    schema,
    stem,
)
from srcrawl.indexer.slave import IndexHandler


def pages_with(index_dir: Path, term: str, fields: Iterable[str] = TEXT_FIELDS) -> set[int]:
    """The pages (fingerprints) whose live document holds ``term`` in any of ``fields``."""
    reader = IndexReader(index_dir)
    reader.reload()
    searcher = reader.searcher()
    s = schema()
    clauses = [
        (tantivy.Occur.Should, tantivy.Query.term_query(s, f, term if f == "ident" else stem(term)))
        for f in fields
    ]
    hits = searcher.search(tantivy.Query.boolean_query(clauses), 10_000).hits
    return set(searcher.fast_field_values("fp", [a for _s, a in hits]))


def index_terms(index_dir: Path, vocab: Iterable[str]) -> dict[str, set[int]]:
    """term -> the pages holding it, for the terms of ``vocab`` some page holds."""
    found = {t: pages_with(index_dir, t) for t in vocab}
    return {t: fps for t, fps in found.items() if fps}


def num_docs(index_dir: Path) -> int:
    reader = IndexReader(index_dir)
    reader.reload()
    return reader.num_docs()


def all_pages(index_dir: Path) -> list[int]:
    """Every live document's page, sorted (a page twice shows twice)."""
    reader = IndexReader(index_dir)
    reader.reload()
    searcher = reader.searcher()
    hits = searcher.search(tantivy.Query.all_query(), 100_000).hits
    return sorted(searcher.fast_field_values("fp", [a for _s, a in hits]))


def index_in_process(store, index_dir: Path, fps: list[int] | None = None) -> int:
    """Tokenize the stored pages ``fps`` (default: every unindexed one) as a slave does and
    write them as the master does; returns how many."""
    if fps is None:
        fps = store.unindexed_pages(None, 1_000_000)
    docs = IndexHandler(store).tokenize(fps)
    writer = IndexWriter(index_dir)
    try:
        writer.replace(docs)
        writer.commit()
    finally:
        writer.close()
    store.mark_indexed([(d.fp, d.fetched_at) for d in docs], time.time())
    return len(docs)


def _fields_before_stored_text() -> tantivy.SchemaBuilder:
    """The fields of an index built before the stored text, the facets and the words as
    typed: a frozen picture, which must not follow indexer/engine.py's."""
    b = tantivy.SchemaBuilder()
    b.add_integer_field("fp", stored=False, indexed=True, fast=True)
    for name in TEXT_FIELDS:
        option = "position" if name in WITH_POSITIONS else "freq"
        b.add_text_field(name, stored=False, tokenizer_name=STEMMED, index_option=option)
    b.add_text_field("ident", stored=False, tokenizer_name="whitespace", index_option="freq")
    b.add_text_field("site", stored=False, tokenizer_name="raw", index_option="basic")
    b.add_integer_field("digest", stored=False, indexed=False, fast=True)
    b.add_integer_field("simhash", stored=False, indexed=False, fast=True)
    return b


def schema_before_stored_text() -> tantivy.Schema:
    """The index's schema before it stored each page's text (and its facets)."""
    return _fields_before_stored_text().build()


def schema_before_exact() -> tantivy.Schema:
    """The index's schema before it held each page's words as written (``exact``): the
    stored text and the facets added, as they were (a frozen picture too)."""
    b = _fields_before_stored_text()
    b.add_bytes_field("text", stored=True, indexed=False, fast=False)
    b.add_bytes_field("folded", stored=True, indexed=False, fast=False)
    for name in ("lang", "host"):
        b.add_text_field(name, fast=True, tokenizer_name="raw", index_option="basic")
    b.add_integer_field("fetched", stored=False, indexed=True, fast=True)
    return b.build()
