"""Packed postings and the index task messages (pure logic)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash

from srcrawl.errors import EnvelopeError
from srcrawl.indexer.postings import (
    MAGIC,
    DocPostings,
    PostingsBatch,
    PostingsFormatError,
    pack,
    term_fingerprint,
    term_fingerprints,
    unpack_batch,
)
from srcrawl.indexer.protocol import IndexTask
from srcrawl.queues.envelope import decode, encode

DOCS = [
    DocPostings(-(2**63), 1.5, 5, ["北京", "hello", "привет"], [2, 2, 1]),
    DocPostings(0, 0.0, 0, [], []),
    DocPostings(2**63 - 1, 1_700_000_000.25, 3, ["hello", "世界"], [1, 2]),
]


def by_id(doc: DocPostings) -> tuple[int, float, int, dict[int, int]]:
    """What a document becomes in a batch: its terms known by their fingerprints."""
    ids = {term_fingerprint(t): tf for t, tf in zip(doc.terms, doc.tfs, strict=True)}
    return (doc.fp, doc.fetched_at, doc.length, ids)


def test_round_trip_keeps_every_field() -> None:
    assert unpack_batch(pack(DOCS)).postings() == [by_id(d) for d in DOCS]
    assert unpack_batch(pack([])).postings() == []


def test_term_fingerprints_are_signed_64_bit_xxh64_of_the_utf8() -> None:
    assert term_fingerprint("hello") == xxhash.xxh64_intdigest(b"hello") - 2**64 * (
        xxhash.xxh64_intdigest(b"hello") >= 2**63
    )
    words = ["北京", "hello", "", "привет"]
    assert term_fingerprints(words).tolist() == [term_fingerprint(w) for w in words]
    assert term_fingerprints([]).dtype == np.int64
    assert len({term_fingerprint(w) for w in ["a", "b", "A", "北", "北京"]}) == 5


def test_terms_shared_by_documents_are_stored_once() -> None:
    payload = pack(DOCS)
    # header, 3 docs × 24 bytes, 5 postings × 8 bytes, 4 distinct terms × 8 bytes
    assert len(payload) == 16 + 3 * 32 + 5 * 20 + 4 * 8
    assert payload.startswith(MAGIC)
    assert b"hello" not in payload  # terms travel as fingerprints only


def test_postings_travel_as_binary_payload_of_an_envelope() -> None:
    raw = encode("postings", {"batch": 3, "docs": 3}, pack(DOCS))
    msg = decode(raw)
    assert msg.get("batch") == 3
    assert unpack_batch(msg.payload).postings() == [by_id(d) for d in DOCS]


def test_terms_sharing_a_fingerprint_become_one_term(monkeypatch) -> None:
    # 64-bit fingerprints practically never collide; when two terms do, they
    # are one term of the index: a document holding both lists it once
    from srcrawl.indexer import postings

    real = postings.term_fingerprints
    monkeypatch.setattr(
        postings,
        "term_fingerprints",
        lambda terms: real(["same" if t in ("x", "y") else t for t in terms]),
    )
    batch = PostingsBatch.of(
        [
            DocPostings(1, 1.0, 6, ["x", "z", "y"], [2, 1, 3]),
            DocPostings(2, 1.0, 1, ["y"], [1]),
        ]
    )
    same, z = term_fingerprint("same"), term_fingerprint("z")
    assert batch.postings() == [(1, 1.0, 6, {same: 5, z: 1}), (2, 1.0, 1, {same: 1})]


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda p: p[:10], "shorter than its header"),
        (lambda p: b"XXXX" + p[4:], "unknown format"),
        (lambda p: b"SRP1" + p[4:], "unknown format"),
        (lambda p: p[:-1], "expected"),
        (lambda p: p + b"x", "expected"),
        (lambda p: p[:-8] + p[-16:-8], "lists a term twice"),
    ],
)
def test_malformed_payloads_are_rejected(mangle, message: str) -> None:
    with pytest.raises(PostingsFormatError, match=message):
        unpack_batch(mangle(pack(DOCS)))


def _rewrite(payload: bytes, offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(payload)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def test_inconsistent_payloads_are_rejected() -> None:
    payload = pack([DocPostings(1, 1.0, 3, ["a", "b"], [1, 2])])
    term_idx_at = 16 + 32  # first posting's term index
    with pytest.raises(PostingsFormatError, match="past the term table"):
        unpack_batch(_rewrite(payload, term_idx_at, "<I", 7))
    with pytest.raises(PostingsFormatError, match="twice"):
        unpack_batch(_rewrite(payload, term_idx_at + 4, "<I", 0))
    with pytest.raises(PostingsFormatError, match="zero"):
        unpack_batch(_rewrite(payload, term_idx_at + 8, "<I", 0))
    with pytest.raises(PostingsFormatError, match="counts disagree"):
        unpack_batch(_rewrite(payload, 16 + 28, "<I", 1))  # the document's term count
    assert issubclass(PostingsFormatError, EnvelopeError)


def test_pack_refuses_documents_whose_terms_and_tfs_disagree() -> None:
    with pytest.raises(ValueError, match="2 terms but 1 tfs"):
        pack([DocPostings(1, 1.0, 1, ["a", "b"], [1])])


def test_index_tasks_round_trip_and_reject_anything_else() -> None:
    raw = IndexTask(12, [1, -5, 2**63 - 1], "abc123").encode()
    assert b"\n" not in raw  # header only, so a failed batch report can be split
    task = IndexTask.decode(raw)
    assert (task.batch, task.fps, task.dictionary) == (12, [1, -5, 2**63 - 1], "abc123")
    for bad in (
        encode("postings", {"batch": 1, "fps": []}),
        encode("index-batch", {"batch": "1", "fps": []}),
        encode("index-batch", {"batch": 1, "fps": ["1"]}),
        encode("index-batch", {"batch": 1, "fps": [2**64]}),
        b"junk",
    ):
        with pytest.raises(EnvelopeError):
            IndexTask.decode(bad)


def test_batches_concatenate_in_order() -> None:
    extra = DocPostings(7, 2.0, 3, ["世界", "hello"], [1, 2])
    both = PostingsBatch.concat([PostingsBatch.of(DOCS[:2]), PostingsBatch.of([extra])])
    assert both.postings() == [by_id(d) for d in [*DOCS[:2], extra]]
    assert both.terms.dtype == np.int64 and len(both) == 3
    assert PostingsBatch.concat([]).postings() == []
