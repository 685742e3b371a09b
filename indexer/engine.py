"""The search index: one Tantivy directory per job [Redis engine §3.2].

Tantivy (the Rust engine, through its ``tantivy`` bindings) keeps the
postings with positions, skip lists and block-max WAND, merges segments in
the background and answers a query without reading whole postings lists. The
index master is its one writer; the CLI and every portal worker open the
same directory and see each commit after :meth:`IndexReader.refresh`. With the index
in an object store (``SRCRAWL_INDEX_DIR=s3://…``) the writer publishes each commit
(indexer/publisher.py) and readers open a local replica that follows them
(indexer/replica.py): the same directory to this module.

Fields (a document per page):

============  ==========================================================
``fp``        the URL fingerprint: indexed (a page's document is replaced or
              deleted by it) and a fast field (a hit's page)
``title``     title tokens, positions (phrases)
``body``      the page's own text, positions
``boiler``    text its host repeats on most pages (indexer/boilerplate.py),
              frequencies only, weighed low at query time
``anchor``    the anchor text of links to the page, positions
``ident``     identifiers whole (``pg_hba.conf``, ``pg_dump``); their parts
              are in the text fields
``site``      the host, its parent domains and the host without its port,
              untokenized (``site:``)
``digest``    a fast field: xxh64 of the body tokens (exact duplicates)
``simhash``   a fast field: 64-bit simhash of the body tokens (near-duplicates)
``text``      stored only: the page's own text as it was indexed (its first
              SNIPPET_TEXT_CHARS, UTF-8), which snippets are cut from;
              compressed in Tantivy's document store (LZ4 blocks)
``folded``    stored only, and only for a text with full-width letters or digits:
              the text folded in place (indexer/text.py's ``fold_aligned``), which
              snippets find the terms in (a search then never looks for them)
``lang``      the page's language (indexer/language.py), untokenized, a fast
              field (``lang:``, the language counts)
``host``      the page's host, untokenized, a fast field (the host counts)
``fetched``   when the page was fetched (Unix seconds), a fast field (``since:``,
              ``until:``, the month counts)
``exact``     the title's and the page's own words as written, not stemmed, those
              of ASCII letters and digits only (:data:`EXACT_WORDS`),
              frequencies only: a word the stemmer changes is also matched as
              typed (``difference`` is not ``different``)
============  ==========================================================

Why pre-tokenized text: the slaves segment with jieba (Chinese has no spaces,
and the tokenizer, stop words and user dictionary are srcrawl's, shared with
queries), so the text fields get their tokens joined by spaces and Tantivy
splits on whitespace only. Its English stemmer (Snowball) runs after that, as
an analyzer registered under :data:`STEMMED`: ``splitting`` and ``split`` are
one term; a Chinese token goes through unchanged. A custom analyzer is not
stored in the index, so every process that opens it registers it
(:func:`open_index`), and queries stem their words with the same analyzer.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tantivy

from srcrawl.core.defaults import DEFAULT_INDEX_WRITER_HEAP, DEFAULT_INDEX_WRITER_WAIT
from srcrawl.core.errors import SrcrawlError

if TYPE_CHECKING:
    from srcrawl.indexer.publisher import IndexPublisher

STEMMED = "srcrawl_stem"
"""The analyzer of the text fields: whitespace, then the English stemmer."""
EXACT_WORDS = "srcrawl_exact"
"""The analyzer of the words as written: whitespace, then only tokens of ASCII letters and
digits, those the stemmer can change (a Chinese word is the same either way: in Rust,
dropping it costs less than indexing it twice)."""
TEXT_FIELDS = ("title", "body", "boiler", "anchor")
WITH_POSITIONS = ("title", "body", "anchor")
STORED_TEXT = "text"
"""The stored field of a page's own text (snippets); an index built before it lacks it."""
STORED_FOLDED = "folded"
"""The stored field of that text folded in place, when folding changes it."""
EXACT = "exact"
"""The field of a page's words as written (not stemmed); an index built before it lacks it."""
MEANING = "meaning"
"""The stored field of a page's vector in the meaning model (indexer/search/meaning.py);
an index built before it lacks it."""
FACET_FIELDS = ("lang", "host", "fetched")
"""The fields a search filters and counts by; an index built before them lacks them."""


class IndexUnavailable(SrcrawlError):
    """The index directory cannot be opened (none yet, another format, no writer lock)."""


@functools.cache
def stemmer() -> tantivy.TextAnalyzer:
    """The text fields' analyzer, for documents (registered) and query words alike."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


@functools.cache
def exact_words() -> tantivy.TextAnalyzer:
    """The analyzer of the ``exact`` field (:data:`EXACT_WORDS`)."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
        .filter(tantivy.Filter.alphanum_only())
        .build()
    )


def stem(word: str) -> str:
    """The term a (tokenized, lower-cased) word is indexed as in the text fields."""
    out = stemmer().analyze(word)
    return out[0] if out else word


@functools.cache
def schema(*, facets: bool = True) -> tantivy.Schema:
    """The index's fields; without ``facets``, those of an index built before them."""
    b = tantivy.SchemaBuilder()
    b.add_integer_field("fp", stored=False, indexed=True, fast=True)
    for name in TEXT_FIELDS:
        option = "position" if name in WITH_POSITIONS else "freq"
        b.add_text_field(name, stored=False, tokenizer_name=STEMMED, index_option=option)
    b.add_text_field("ident", stored=False, tokenizer_name="whitespace", index_option="freq")
    b.add_text_field("site", stored=False, tokenizer_name="raw", index_option="basic")
    b.add_integer_field("digest", stored=False, indexed=False, fast=True)
    b.add_integer_field("simhash", stored=False, indexed=False, fast=True)
    # bytes: a text field is always indexed in tantivy-py, this one is only read back
    b.add_bytes_field(STORED_TEXT, stored=True, indexed=False, fast=False)
    b.add_bytes_field(STORED_FOLDED, stored=True, indexed=False, fast=False)
    if facets:
        for name in ("lang", "host"):
            b.add_text_field(name, fast=True, tokenizer_name="raw", index_option="basic")
        b.add_integer_field("fetched", stored=False, indexed=True, fast=True)
        # last: an index built before them has every other field's id (its queries and
        # its ranking leave them out)
        b.add_text_field(EXACT, stored=False, tokenizer_name=EXACT_WORDS, index_option="freq")
        b.add_bytes_field(MEANING, stored=True, indexed=False, fast=False)
    return b.build()


def has_facets(index: tantivy.Index) -> bool:
    """Whether the index has the language, host and fetch time of its pages (one built
    before them has not: it is searched without ``lang:``, ``since:``, ``until:`` and
    counts until it is rebuilt, ``srcrawl index --rebuild``)."""
    return has_field(index, "lang", "und")


def has_stored_text(index: tantivy.Index) -> bool:
    """Whether the index keeps each page's text (one built before it has its hits' text read
    from the store until it is rebuilt)."""
    return has_field(index, STORED_TEXT, b"")


def has_exact(index: tantivy.Index) -> bool:
    """Whether the index has its pages' words as written (one built before them is searched
    by its stemmed words alone until it is rebuilt)."""
    return has_field(index, EXACT, "")


def has_meaning(index: tantivy.Index) -> bool:
    """Whether the index keeps its pages' vectors (one built before them is ranked by its
    words alone until it is rebuilt)."""
    return has_field(index, MEANING, b"")


def built_before(index: tantivy.Index) -> list[str]:
    """What an index built by an older srcrawl lacks, in a user's words (empty: nothing):
    each is searched without until ``srcrawl index --rebuild`` builds it anew."""
    lacking = []
    if not has_stored_text(index):
        lacking.append("each page's text (snippets are read from the store)")
    if not has_facets(index):
        lacking.append("languages, hosts and fetch times (lang:, since:, until:, counts)")
    if not has_exact(index):
        lacking.append("words as typed (a word's other forms count as much)")
    if not has_meaning(index):
        lacking.append("pages' vectors (a query's meaning does not count)")
    return lacking


def has_field(index: tantivy.Index, name: str, value: object) -> bool:
    """Whether the index's schema has the field ``name`` (of ``value``'s type): the bindings
    list no fields, but refuse a query on one the schema lacks."""
    try:
        tantivy.Query.term_query(index.schema, name, value)
    except ValueError:
        return False
    return True


def open_index(path: Path, *, create: bool = False) -> tantivy.Index:
    """The index at ``path``, its analyzer registered; with ``create``, made if absent.

    Raises IndexUnavailable when there is none (and ``create`` is False) or it
    cannot be read.
    """
    try:
        if create and not (path.is_dir() and tantivy.Index.exists(str(path))):
            path.mkdir(parents=True, exist_ok=True)
            index = tantivy.Index(schema(), path=str(path), reuse=True)
        elif create:  # its own schema: one built before the stored text is written as it is
            index = tantivy.Index.open(str(path))
        else:
            if not path.is_dir() or not tantivy.Index.exists(str(path)):
                raise IndexUnavailable(f"no index at {path}: run `srcrawl index` first")
            index = tantivy.Index.open(str(path))
    except (ValueError, OSError) as e:
        hint = ""
        if "lock" in str(e).lower():
            # tantivy's reader takes .tantivy-meta.lock while it opens segments
            hint = " (a reader too takes a lock file in it: mount it writable)"
        raise IndexUnavailable(f"cannot open the index at {path}: {e}{hint}") from e
    index.register_tokenizer(STEMMED, stemmer())
    index.register_tokenizer(EXACT_WORDS, exact_words())
    return index


def site_values(host: str) -> list[str]:
    """What ``site:`` matches a page of ``host`` by: the host, without its port, and each
    parent domain of two labels or more (``docs.example.com``: also ``example.com``)."""
    host = host.lower()
    values = [host]
    bare = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if bare != host:
        values.append(bare)
    labels = bare.split(".")
    if not bare.replace(".", "").isdigit():  # not an IPv4 address
        values += [".".join(labels[i:]) for i in range(1, len(labels) - 1)]
    return list(dict.fromkeys(values))


def signed64(value: int) -> int:
    """An unsigned 64-bit value as the signed one Tantivy's i64 fields hold."""
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass
class IndexDoc:
    """One page as the index holds it: tokens space-joined per field."""

    fp: int
    fetched_at: float
    host: str
    title: str
    body: str
    boiler: str = ""
    anchor: str = ""
    ident: str = ""
    digest: int = 0  # signed 64-bit
    simhash: int = 0  # signed 64-bit
    text: str = ""  # the own text, as written (snippets), not tokens
    folded: str = ""  # that text folded in place, when that changes it
    lang: str = "und"  # ISO 639-1, or und (indexer/language.py)
    meaning: str = ""  # its vector, base64 (indexer/search/meaning.py), or none

    def document(
        self,
        stored_text: bool = True,
        facets: bool = True,
        exact: bool = True,
        meaning: bool = True,
    ) -> tantivy.Document:
        """The Tantivy document; without the stored text, the facet fields, the words as
        written or the vector for an index built before them (``stored_text``, ``facets``,
        ``exact``, ``meaning`` False)."""
        doc = tantivy.Document(
            fp=self.fp,
            title=self.title,
            body=self.body,
            boiler=self.boiler,
            anchor=self.anchor,
            ident=self.ident,
            site=site_values(self.host),
            digest=self.digest,
            simhash=self.simhash,
        )
        if self.text and stored_text:  # none: a hit's text is read from the store
            doc.add_bytes(STORED_TEXT, self.text.encode())
        if self.folded and stored_text:
            doc.add_bytes(STORED_FOLDED, self.folded.encode())
        if facets:
            doc.add_text("lang", self.lang)
            doc.add_text("host", self.host.lower())
            doc.add_integer("fetched", int(self.fetched_at))
            if exact:
                doc.add_text(EXACT, f"{self.title} {self.body}")
            if meaning and self.meaning:
                doc.add_bytes(MEANING, base64.b64decode(self.meaning))
        return doc


class IndexWriter:
    """The one writer of a job's index (the index master's, under its lease).

    Changes are queued in memory and applied at :meth:`commit`, which takes
    Tantivy's writer (a lock file in the directory) for that commit only and
    lets the segment merges it starts finish before giving the lock back. A
    master that stalls while it gathers results thus holds no lock its
    successor would wait for; one that stalls inside a commit is waited for
    (up to ``wait`` seconds), then the successor gives up.
    """

    def __init__(
        self,
        path: Path,
        *,
        heap: int = DEFAULT_INDEX_WRITER_HEAP,
        wait: float = DEFAULT_INDEX_WRITER_WAIT,
        publisher: IndexPublisher | None = None,
        fresh: bool = False,
    ) -> None:
        """The writer of the directory ``path``; with ``publisher``, each commit is published
        to an object store before :meth:`commit` returns, and the directory is opened by
        :meth:`start` (under the lease), which first makes it continue the published one.
        ``fresh`` (a rebuild's): :meth:`start` empties the directory and creates an index
        of the current schema in it; nothing is opened before."""
        self.path = path
        self.heap, self.wait = heap, wait
        self.renew_every = 1.0  # seconds between lease renewals while Tantivy works
        self.publisher = publisher
        self.fresh = fresh
        opened_later = publisher is not None or fresh
        self._index = None if opened_later else open_index(path, create=True)
        self._replace: dict[int, IndexDoc] = {}
        self._delete: set[int] = set()

    @property
    def index(self) -> tantivy.Index:
        if self._index is None:
            raise IndexUnavailable("the published index's writer is not started")
        return self._index

    @property
    def stores_text(self) -> bool:
        """Whether the index keeps each page's text. One built before the stored text keeps
        its schema and gets none: its hits' snippets are read from the store
        (indexer/search/hits.py) until it is rebuilt (``srcrawl index --rebuild``)."""
        return has_stored_text(self.index)

    def start(self, fence: Callable[[], None] | None = None) -> None:
        """With a publisher: fetch the published commit unless the directory continues it,
        open it, and publish what it holds that is not published (``fence``: the lease
        check). Fresh: what a run before left in the directory (a rebuild that did not end)
        is removed, and a new index made. Else nothing to do."""
        if self._index is not None:
            return
        if self.fresh:
            shutil.rmtree(self.path, ignore_errors=True)
            self._index = open_index(self.path, create=True)
            return
        self._run_renewing(self.publisher.restore, fence)
        self._index = open_index(self.path, create=True)
        self.publish(fence)

    def publish(self, fence: Callable[[], None] | None = None) -> None:
        """Publish the directory's commit unless it is the published one (with a publisher),
        the lease renewed meanwhile (``fence``: the check before the commit point)."""
        if self.publisher is not None:
            self._run_renewing(lambda: self.publisher.publish(fence), fence)

    def replace(self, docs: Sequence[IndexDoc]) -> None:
        """Queue ``docs``, each replacing its page's document (of a page queued twice, the
        last)."""
        for doc in docs:
            self._delete.discard(doc.fp)
            self._replace[doc.fp] = doc

    def delete(self, fps: Sequence[int]) -> None:
        """Queue the deletion of the pages ``fps`` (none of them indexed is fine)."""
        for fp in fps:
            self._replace.pop(fp, None)
            self._delete.add(fp)

    def _writer(self, renew: Callable[[], None] | None) -> tantivy.IndexWriter:
        """Tantivy's writer, waiting for its lock (renewing the lease meanwhile)."""
        deadline = time.monotonic() + self.wait
        while True:
            try:
                # one thread: the slaves tokenize; the writer only builds segments
                return self.index.writer(self.heap, 1)
            except ValueError as e:
                if time.monotonic() >= deadline:
                    raise IndexUnavailable(
                        f"the index at {self.path} has another writer: {e}"
                    ) from e
                if renew is not None:
                    renew()
                time.sleep(0.2)

    def commit(self, before: Callable[[], None] | None = None) -> None:
        """Apply what was queued in one commit, durable and searchable when this returns.

        ``before`` (the lease check) runs right before the commit: if it raises, nothing
        queued is committed. It also renews the lease while the writer lock is awaited and
        while Tantivy commits and merges (both in a thread of their own, which releases
        the GIL: a merge of large segments takes longer than a lease lives).
        """
        replace, delete = list(self._replace.values()), sorted(self._delete)
        self._replace, self._delete = {}, set()
        if not replace and not delete:
            return
        writer = self._writer(before)
        try:
            for fp in delete:
                writer.delete_documents_by_term("fp", fp)
            stores_text, facets = self.stores_text, has_facets(self.index)
            exact, meaning = has_exact(self.index), has_meaning(self.index)
            for doc in replace:
                writer.delete_documents_by_term("fp", doc.fp)
                writer.add_document(doc.document(stores_text, facets, exact, meaning))
            if before is not None:
                before()
        except BaseException:
            writer.rollback()
            writer.wait_merging_threads()
            raise
        self._finish(writer, before)

    def _finish(self, writer: tantivy.IndexWriter, renew: Callable[[], None] | None) -> None:
        """Commit, let the merges end and release the lock, then publish the commit (with a
        publisher), renewing the lease meanwhile; a lease lost meanwhile is raised once the
        commit is done (it stays committed, unpublished: a successor writes the same pages
        again)."""

        def work() -> None:
            try:
                writer.commit()
            except BaseException:
                writer.rollback()
                raise
            finally:
                writer.wait_merging_threads()  # the merges end, the lock is released

        self._run_renewing(work, renew)
        # before the pages are marked indexed: replicas can have what is marked
        self.publish(renew)

    def _run_renewing(self, work: Callable[[], object], renew: Callable[[], None] | None) -> None:
        """``work()`` in a thread of its own, the lease renewed meanwhile; its error raised,
        then a lease lost meanwhile (a publish waiting for the store then gives up)."""
        failed: list[BaseException] = []

        def run() -> None:
            try:
                work()
            except BaseException as e:
                failed.append(e)

        thread = threading.Thread(target=run, name="index-commit", daemon=True)
        thread.start()
        lost: BaseException | None = None
        while thread.is_alive():
            thread.join(timeout=self.renew_every)
            if thread.is_alive() and renew is not None and lost is None:
                try:
                    renew()
                except BaseException as e:
                    lost = e
                    if self.publisher is not None:
                        self.publisher.stopping.set()
        if failed:
            raise failed[0]
        if lost is not None:
            raise lost

    def close(self) -> None:
        """Drop what is queued and not committed."""
        self._replace, self._delete = {}, set()


class IndexReader:
    """A job's index opened for searching; cheap to share between threads.

    :meth:`searcher` reloads the index at most every ``refresh`` seconds, so a commit
    is seen within that time (file watching is not used: it is not available on every
    volume). Only those reloads change the searcher (Tantivy's reload policy is
    manual), so a commit's searcher has a memo of its own (:meth:`snapshot`): values
    computed from the searcher, kept until a reload finds another commit.

    A rebuilt index (``srcrawl index --rebuild``) takes the directory's place, or, in a
    replica, comes as a commit of another schema. A Tantivy index keeps the schema it was
    opened with and would read the new segments by it, so a reload that finds another
    directory or schema than the one opened opens the index again instead; until that
    succeeds (the instant between two renames) the index opened is searched as it was:
    its files stay readable while mapped, even once deleted.
    """

    def __init__(self, path: Path, *, refresh: float = 1.0) -> None:
        self.path = path
        self.refresh = refresh
        self._index: tantivy.Index | None = None
        self._lock = threading.Lock()
        self._loaded = 0.0
        self._memo: dict[str, float] = {}
        self._commit: bytes | None = None  # meta.json of the loaded commit, if known
        self._opened: tuple[int, int, str] | None = None  # the directory and schema, if known
        self._has_facets: bool | None = None
        self._has_exact: bool | None = None
        self._has_meaning: bool | None = None

    @property
    def index(self) -> tantivy.Index:
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._open()
        return self._index

    def _open(self) -> tantivy.Index:
        """Open the directory's index (with the lock held); IndexUnavailable if there is none."""
        before = self._meta()
        index = open_index(self.path)
        index.config_reader("Manual", 0)
        after = self._meta()
        self._loaded = time.monotonic()
        # the commit opened is known (as in _reload), so the first reload that finds no new
        # one keeps what the memo gathered since; not known, the next reload opens it again
        same = before == after
        self._commit = after if same else None
        self._opened = self._identity(after) if same else None
        self._memo, self._has_facets = {}, None
        self._has_exact = self._has_meaning = None
        self._index = index
        return index

    @property
    def has_facets(self) -> bool:
        """Whether the index has each page's language, host and fetch time (:func:`has_facets`)."""
        if self._has_facets is None:
            self._has_facets = has_facets(self.index)
        return self._has_facets

    @property
    def has_exact(self) -> bool:
        """Whether the index has its pages' words as written (:func:`has_exact`)."""
        if self._has_exact is None:
            self._has_exact = has_exact(self.index)
        return self._has_exact

    @property
    def has_meaning(self) -> bool:
        """Whether the index keeps its pages' vectors (:func:`has_meaning`)."""
        if self._has_meaning is None:
            self._has_meaning = has_meaning(self.index)
        return self._has_meaning

    def searcher(self) -> tantivy.Searcher:
        return self.snapshot()[0]

    def snapshot(self) -> tuple[tantivy.Searcher, dict[str, float]]:
        """A searcher and the memo of its commit."""
        index = self.index
        with self._lock:
            if time.monotonic() - self._loaded >= self.refresh:
                index = self._reload(index)
            return index.searcher(), self._memo

    def reload(self) -> None:
        """See the latest commit now."""
        index = self.index
        with self._lock:
            self._reload(index)

    def _reload(self, index: tantivy.Index) -> tantivy.Index:
        """Load the latest commit, or open the index again if it was replaced; the index."""
        # the commit is known when meta.json did not change while the reload read it
        before = self._meta()
        if self._identity(before) != self._opened:
            return self._reopen(index)
        try:
            index.reload()
        except ValueError:
            if self._identity(self._meta()) == self._opened:
                raise
            return self._reopen(index)  # replaced while it reloaded
        after = self._meta()
        self._loaded = time.monotonic()
        if self._identity(after) != self._opened:
            return self._reopen(index)  # what it loaded may be the new one's: not used
        commit = after if before == after else None
        if commit is None or commit != self._commit:
            self._memo = {}
        self._commit = commit
        return index

    def _reopen(self, index: tantivy.Index) -> tantivy.Index:
        """The index opened again; the one opened (still searchable) while there is none."""
        try:
            return self._open()
        except IndexUnavailable:
            self._loaded = time.monotonic()  # tried again at the next reload
            return index

    def _identity(self, meta: bytes | None) -> tuple[int, int, str] | None:
        """The directory (device, inode) and the schema of the commit ``meta``."""
        try:
            st = os.stat(self.path)
            schema_json = json.dumps(json.loads(meta or b"")["schema"], sort_keys=True)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return st.st_dev, st.st_ino, schema_json

    def _meta(self) -> bytes | None:
        try:
            return (self.path / "meta.json").read_bytes()
        except OSError:
            return None

    def num_docs(self) -> int:
        return self.searcher().num_docs

    def size_bytes(self) -> int:
        """Bytes of the index's files on disk."""
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())
