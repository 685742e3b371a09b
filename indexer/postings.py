"""Packed postings: what an index slave sends the master, many documents a message.

A term is known to the index by its fingerprint, the signed 64-bit xxh64 of
its UTF-8 bytes (as a page is by the fingerprint of its URL): slaves compute
it, the master writes it as ``term_id`` without a vocabulary to consult or
keep in memory, and a query looks its terms up the same way. Two terms with
one fingerprint would be one term of the index; with 64 bits that is
expected about once in 10^19 pairs.

A document has fields (:data:`FIELDS`): its body text (``tf``: occurrences
in the page's own text, ``boiler``: in text repeated over most pages of its
host, ``length``: both), its title and the anchor text of links to it.

Layout (little-endian), after a fixed header ``b"SRP3" n_docs n_terms
n_postings`` (three uint32):

=========================  =====================================================
``fp``       int64[d]      the page fingerprints
``fetched``  float64[d]    the ``fetched_at`` of the text that was tokenized
``length``   uint32[d,3]   field lengths (terms kept): body, title, anchor
``count``    uint32[d]     distinct terms of each document
``term``     uint32[p]     index into the message's term table, per posting
``tf``       uint32[p,4]   term frequency per posting: body own text,
                           body boilerplate, title, anchor
``table``    int64[t]      the term table: distinct term fingerprints
=========================  =====================================================

The master works on the columns as they are (:class:`PostingsBatch`), never
on one object per posting.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from srcrawl.errors import EnvelopeError

MAGIC = b"SRP3"
FIELDS = ("body", "title", "anchor")
"""The fields of a document, in the order of its lengths."""
TF_COLUMNS = ("tf", "boiler", "title", "anchor")
"""A posting's term frequencies, in order: body own text, body boilerplate, title, anchor."""
_HEADER = struct.Struct("<4sIII")


class PostingsFormatError(EnvelopeError):
    """A postings payload that is truncated, inconsistent or of another format."""


def term_fingerprint(term: str) -> int:
    """The id of ``term`` in the index: signed 64-bit xxh64 of its UTF-8 (SQL BIGINT)."""
    v = xxhash.xxh64_intdigest(term.encode())
    return v - (1 << 64) if v >= 1 << 63 else v


def term_fingerprints(terms: Iterable[str]) -> np.ndarray:
    """The fingerprints of ``terms``, as int64 (one C-level pass over the strings)."""
    digest = xxhash.xxh64_intdigest
    return np.fromiter((digest(t.encode()) for t in terms), np.uint64).view(np.int64)


@dataclass
class DocPostings:
    """The terms of one tokenized document.

    ``length`` and ``tfs`` are the body's; the other fields' go in
    ``field_lengths`` (title, anchor) and ``field_tfs`` (per term: boilerplate,
    title, anchor occurrences), zero when left out.
    """

    fp: int
    fetched_at: float
    length: int
    terms: list[str]
    tfs: list[int]
    field_lengths: tuple[int, int] = (0, 0)
    field_tfs: list[tuple[int, int, int]] | None = None

    def tf_rows(self) -> list[tuple[int, int, int, int]]:
        """(own, boilerplate, title, anchor) occurrences of each term."""
        if self.field_tfs is None:
            return [(tf, 0, 0, 0) for tf in self.tfs]
        return [(tf, *more) for tf, more in zip(self.tfs, self.field_tfs, strict=True)]


@dataclass
class PostingsBatch:
    """Documents in columns: per document ``fps fetched lengths counts``, per posting
    ``terms`` (term fingerprints) and ``tfs``; a document's postings are the next
    ``counts[i]`` ones, and within a document no term repeats. ``lengths`` has a
    column per field of :data:`FIELDS`, ``tfs`` one per :data:`TF_COLUMNS`."""

    fps: np.ndarray
    fetched: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray
    terms: np.ndarray
    tfs: np.ndarray

    def __len__(self) -> int:
        return len(self.fps)

    def postings(self) -> list[tuple[int, float, int, dict[int, int]]]:
        """(fp, fetched_at, body length, {term fingerprint: body tf}) per document (for
        inspection)."""
        terms, tfs = self.terms.tolist(), self.tfs[:, 0].tolist()
        out, start = [], 0
        for fp, at, length, n in zip(
            self.fps.tolist(), self.fetched.tolist(), self.lengths[:, 0].tolist(),
            self.counts.tolist(), strict=True,
        ):  # fmt: skip
            end = start + n
            out.append((fp, at, length, dict(zip(terms[start:end], tfs[start:end], strict=True))))
            start = end
        return out

    @classmethod
    def of(cls, docs: Sequence[DocPostings]) -> PostingsBatch:
        """The batch of ``docs`` (what packing and unpacking them gives)."""
        return unpack_batch(pack(docs))

    @classmethod
    def concat(cls, batches: Sequence[PostingsBatch]) -> PostingsBatch:
        """One batch of every document of ``batches``, in order."""

        def cat(name: str, dtype: str, width: int = 0) -> np.ndarray:
            parts = [getattr(b, name) for b in batches]
            if parts:
                return np.concatenate(parts).astype(dtype, copy=False)
            return np.zeros((0, width) if width else 0, dtype)

        return cls(
            fps=cat("fps", "<i8"),
            fetched=cat("fetched", "<f8"),
            lengths=cat("lengths", "<i8", len(FIELDS)),
            counts=cat("counts", "<i8"),
            terms=cat("terms", "<i8"),
            tfs=cat("tfs", "<i8", len(TF_COLUMNS)),
        )


def pack(docs: Sequence[DocPostings]) -> bytes:
    """Pack documents into one payload."""
    table: dict[str, int] = {}
    term_idx: list[int] = []
    tfs: list[tuple[int, int, int, int]] = []
    counts: list[int] = []
    for d in docs:
        if len(d.terms) != len(d.tfs):
            raise ValueError(f"document {d.fp}: {len(d.terms)} terms but {len(d.tfs)} tfs")
        setdefault = table.setdefault
        term_idx.extend([setdefault(t, len(table)) for t in d.terms])
        tfs.extend(d.tf_rows())
        counts.append(len(d.terms))
    fps = term_fingerprints(table)
    listed = fps.tolist()
    if len(set(listed)) < len(listed):
        # two terms share a fingerprint, so they are one term of the index:
        # one table entry, and a document holding both lists it once
        slots: dict[int, int] = {}
        slot = [slots.setdefault(f, len(slots)) for f in listed]
        term_idx, tfs, counts = _fold([slot[i] for i in term_idx], tfs, counts)
        fps = np.fromiter(slots, np.int64, len(slots))
    parts = [
        _HEADER.pack(MAGIC, len(docs), len(fps), len(term_idx)),
        np.fromiter((d.fp for d in docs), "<i8", len(docs)).tobytes(),
        np.fromiter((d.fetched_at for d in docs), "<f8", len(docs)).tobytes(),
        np.asarray([(d.length, *d.field_lengths) for d in docs], "<u4").tobytes(),
        np.asarray(counts, "<u4").tobytes(),
        np.asarray(term_idx, "<u4").tobytes(),
        np.asarray(tfs, "<u4").reshape(-1, len(TF_COLUMNS)).tobytes(),
        fps.astype("<i8").tobytes(),
    ]
    return b"".join(parts)


def _fold(
    term_idx: list[int], tfs: list[tuple[int, ...]], counts: list[int]
) -> tuple[list[int], list[tuple[int, ...]], list[int]]:
    """Per document, postings naming one table entry twice become one, tfs summed."""
    out_idx: list[int] = []
    out_tfs: list[tuple[int, ...]] = []
    out_counts: list[int] = []
    start = 0
    for n in counts:
        merged: dict[int, tuple[int, ...]] = {}
        for i, tf in zip(term_idx[start : start + n], tfs[start : start + n], strict=True):
            before = merged.get(i)
            if before is not None:
                tf = tuple(a + b for a, b in zip(before, tf, strict=True))
            merged[i] = tf
        out_idx.extend(merged)
        out_tfs.extend(merged.values())
        out_counts.append(len(merged))
        start += n
    return out_idx, out_tfs, out_counts


def unpack_batch(payload: bytes) -> PostingsBatch:
    """The documents of a payload; raise PostingsFormatError if it is malformed."""
    if len(payload) < _HEADER.size:
        raise PostingsFormatError("postings payload shorter than its header")
    magic, n_docs, n_terms, n_post = _HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise PostingsFormatError(f"postings payload of unknown format {magic!r}")
    expected = (
        _HEADER.size + n_docs * (20 + 4 * len(FIELDS)) + n_post * 4 * (1 + len(TF_COLUMNS))
        + n_terms * 8
    )
    if len(payload) != expected:
        raise PostingsFormatError(f"postings payload of {len(payload)} bytes, expected {expected}")
    off = _HEADER.size

    def take(dtype: str, n: int) -> np.ndarray:
        nonlocal off
        arr = np.frombuffer(payload, dtype, n, off)
        off += arr.nbytes
        return arr

    fps, fetched = take("<i8", n_docs), take("<f8", n_docs)
    lengths = take("<u4", n_docs * len(FIELDS)).astype(np.int64).reshape(-1, len(FIELDS))
    counts = take("<u4", n_docs).astype(np.int64)
    term_idx = take("<u4", n_post).astype(np.int64)
    tfs = take("<u4", n_post * len(TF_COLUMNS)).astype(np.int64).reshape(-1, len(TF_COLUMNS))
    table = take("<i8", n_terms)
    if int(counts.sum()) != n_post:
        raise PostingsFormatError("postings payload counts disagree")
    ordered = np.sort(table)  # (np.unique costs several times a sort here)
    if (ordered[1:] == ordered[:-1]).any():
        raise PostingsFormatError("postings term table lists a term twice")
    if n_post:
        if int(term_idx.max()) >= n_terms:
            raise PostingsFormatError("postings refer past the term table")
        if int(tfs.sum(axis=1).min()) == 0:
            raise PostingsFormatError("postings with a zero term frequency")
        # (document, term) pairs must be distinct: no document lists a term twice
        pairs = np.sort(np.repeat(np.arange(n_docs, dtype=np.int64), counts) * n_terms + term_idx)
        if (pairs[1:] == pairs[:-1]).any():
            raise PostingsFormatError("a document lists a term twice")
    return PostingsBatch(fps, fetched, lengths, counts, table[term_idx], tfs)
