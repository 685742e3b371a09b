"""Packed postings: what an index slave sends the master, many documents a message.

Layout (little-endian), after a fixed header ``b"SRP1" n_docs n_terms
n_postings terms_bytes`` (four uint32):

=========================  =====================================================
``fp``       int64[d]      the page fingerprints
``fetched``  float64[d]    the ``fetched_at`` of the text that was tokenized
``length``   uint32[d]     document lengths (terms kept)
``count``    uint32[d]     distinct terms of each document
``term``     uint32[p]     index into the message's term table, per posting
``tf``       uint32[p]     term frequency, per posting
terms        bytes         the term table: UTF-8 terms joined by NUL
=========================  =====================================================

A term is never empty and never holds a NUL (the tokenizer keeps letters and
digits only), so the table needs no escaping. The master works on the
columns as they are (:class:`PostingsBatch`), never on one object per posting.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from srcrawl.errors import EnvelopeError

MAGIC = b"SRP1"
_HEADER = struct.Struct("<4sIIII")


class PostingsFormatError(EnvelopeError):
    """A postings payload that is truncated, inconsistent or of another format."""


@dataclass
class DocPostings:
    """The terms of one tokenized document."""

    fp: int
    fetched_at: float
    length: int
    terms: list[str]
    tfs: list[int]


@dataclass
class PostingsBatch:
    """Documents in columns: per document ``fps fetched lengths counts``, per posting
    ``term_idx`` (into ``terms``) and ``tfs``; a document's postings are the next
    ``counts[i]`` ones, and within a document no term repeats (no two of its
    postings name the same term, even through two entries of ``terms``)."""

    fps: np.ndarray
    fetched: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray
    term_idx: np.ndarray
    tfs: np.ndarray
    terms: list[str]

    def __len__(self) -> int:
        return len(self.fps)

    def docs(self) -> list[DocPostings]:
        """One object per document (for inspection; the master keeps the columns)."""
        names = [self.terms[i] for i in self.term_idx.tolist()]
        tfs = self.tfs.tolist()
        out, start = [], 0
        for fp, at, length, n in zip(
            self.fps.tolist(), self.fetched.tolist(), self.lengths.tolist(),
            self.counts.tolist(), strict=True,
        ):  # fmt: skip
            end = start + n
            out.append(DocPostings(fp, at, length, names[start:end], tfs[start:end]))
            start = end
        return out

    @classmethod
    def of(cls, docs: Sequence[DocPostings]) -> PostingsBatch:
        """The batch of ``docs`` (what packing and unpacking them gives)."""
        return unpack_batch(pack(docs))

    @classmethod
    def concat(cls, batches: Sequence[PostingsBatch]) -> PostingsBatch:
        """One batch of every document of ``batches``, in order.

        The term tables are laid end to end, not merged: a term shared by two
        batches appears twice (the store maps every entry to its term id in
        one pass, cheaper than deduplicating strings here).
        """
        offsets = np.cumsum([0] + [len(b.terms) for b in batches])

        def cat(name: str, dtype: str) -> np.ndarray:
            parts = [getattr(b, name) for b in batches]
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        term_idx = [
            np.asarray(b.term_idx, np.int64) + off
            for b, off in zip(batches, offsets.tolist(), strict=False)
        ]
        return cls(
            fps=cat("fps", "<i8"),
            fetched=cat("fetched", "<f8"),
            lengths=cat("lengths", "<i8"),
            counts=cat("counts", "<i8"),
            term_idx=np.concatenate(term_idx).astype(np.int64)
            if term_idx
            else np.zeros(0, np.int64),
            tfs=cat("tfs", "<i8"),
            terms=list(chain.from_iterable(b.terms for b in batches)),
        )


def pack(docs: Sequence[DocPostings]) -> bytes:
    """Pack documents into one payload."""
    table: dict[str, int] = {}
    term_idx: list[int] = []
    tfs: list[int] = []
    for d in docs:
        if len(d.terms) != len(d.tfs):
            raise ValueError(f"document {d.fp}: {len(d.terms)} terms but {len(d.tfs)} tfs")
        setdefault = table.setdefault
        term_idx.extend([setdefault(t, len(table)) for t in d.terms])
        tfs.extend(d.tfs)
    names = "\x00".join(table).encode("utf-8")
    parts = [
        _HEADER.pack(MAGIC, len(docs), len(table), len(term_idx), len(names)),
        np.fromiter((d.fp for d in docs), "<i8", len(docs)).tobytes(),
        np.fromiter((d.fetched_at for d in docs), "<f8", len(docs)).tobytes(),
        np.fromiter((d.length for d in docs), "<u4", len(docs)).tobytes(),
        np.fromiter((len(d.terms) for d in docs), "<u4", len(docs)).tobytes(),
        np.asarray(term_idx, "<u4").tobytes(),
        np.asarray(tfs, "<u4").tobytes(),
        names,
    ]
    return b"".join(parts)


def unpack_batch(payload: bytes) -> PostingsBatch:
    """The documents of a payload; raise PostingsFormatError if it is malformed."""
    if len(payload) < _HEADER.size:
        raise PostingsFormatError("postings payload shorter than its header")
    magic, n_docs, n_terms, n_post, n_bytes = _HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise PostingsFormatError(f"postings payload of unknown format {magic!r}")
    expected = _HEADER.size + n_docs * 24 + n_post * 8 + n_bytes
    if len(payload) != expected:
        raise PostingsFormatError(f"postings payload of {len(payload)} bytes, expected {expected}")
    off = _HEADER.size

    def take(dtype: str, n: int) -> np.ndarray:
        nonlocal off
        arr = np.frombuffer(payload, dtype, n, off)
        off += arr.nbytes
        return arr

    fps, fetched = take("<i8", n_docs), take("<f8", n_docs)
    lengths, counts = take("<u4", n_docs).astype(np.int64), take("<u4", n_docs).astype(np.int64)
    term_idx, tfs = take("<u4", n_post).astype(np.int64), take("<u4", n_post).astype(np.int64)
    try:
        table = payload[off:].decode("utf-8").split("\x00") if n_terms else []
    except UnicodeDecodeError as e:
        raise PostingsFormatError("postings term table is not UTF-8") from e
    if len(table) != n_terms or int(counts.sum()) != n_post:
        raise PostingsFormatError("postings payload counts disagree")
    if not all(table):
        raise PostingsFormatError("postings term table holds an empty term")
    if n_post:
        if int(term_idx.max()) >= n_terms:
            raise PostingsFormatError("postings refer past the term table")
        if int(tfs.min()) == 0:
            raise PostingsFormatError("postings with a zero term frequency")
        # (document, term) pairs must be distinct: no document lists a term twice
        pairs = np.sort(np.repeat(np.arange(n_docs, dtype=np.int64), counts) * n_terms + term_idx)
        if (pairs[1:] == pairs[:-1]).any():
            raise PostingsFormatError("a document lists a term twice")
    return PostingsBatch(fps, fetched, lengths, counts, term_idx, tfs, table)


def unpack(payload: bytes) -> list[DocPostings]:
    """The documents of a payload, one object each."""
    return unpack_batch(payload).docs()
