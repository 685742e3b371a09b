"""Packed postings and the index task messages (pure logic)."""

from __future__ import annotations

import struct

import pytest

from srcrawl.errors import EnvelopeError
from srcrawl.indexer.messages import decode_task, encode_task
from srcrawl.indexer.postings import (
    MAGIC,
    DocPostings,
    PostingsBatch,
    PostingsFormatError,
    pack,
    unpack,
)
from srcrawl.queues.envelope import decode, encode

DOCS = [
    DocPostings(-(2**63), 1.5, 5, ["北京", "hello", "привет"], [2, 2, 1]),
    DocPostings(0, 0.0, 0, [], []),
    DocPostings(2**63 - 1, 1_700_000_000.25, 3, ["hello", "世界"], [1, 2]),
]


def test_round_trip_keeps_every_field() -> None:
    assert unpack(pack(DOCS)) == DOCS
    assert unpack(pack([])) == []


def test_terms_shared_by_documents_are_stored_once() -> None:
    payload = pack(DOCS)
    assert payload.count(b"hello") == 1
    # header, 3 docs × 24 bytes, 5 postings × 8 bytes, the term table
    table = "\x00".join(["北京", "hello", "привет", "世界"]).encode()
    assert len(payload) == 20 + 3 * 24 + 5 * 8 + len(table)
    assert payload.startswith(MAGIC)


def test_postings_travel_as_binary_payload_of_an_envelope() -> None:
    raw = encode("postings", {"batch": 3, "docs": 3}, pack(DOCS))
    msg = decode(raw)
    assert msg.get("batch") == 3 and unpack(msg.payload) == DOCS
    assert b"hello" not in raw.partition(b"\n")[0]  # no term in the JSON header


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda p: p[:10], "shorter than its header"),
        (lambda p: b"XXXX" + p[4:], "unknown format"),
        (lambda p: p[:-1], "expected"),
        (lambda p: p + b"x", "expected"),
        (lambda p: p[:-3] + b"\xff\xfe\xfd", "not UTF-8"),
    ],
)
def test_malformed_payloads_are_rejected(mangle, message: str) -> None:
    with pytest.raises(PostingsFormatError, match=message):
        unpack(mangle(pack(DOCS)))


def _rewrite(payload: bytes, offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(payload)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def test_inconsistent_payloads_are_rejected() -> None:
    payload = pack([DocPostings(1, 1.0, 3, ["a", "b"], [1, 2])])
    term_idx_at = 20 + 24  # first posting's term index
    with pytest.raises(PostingsFormatError, match="past the term table"):
        unpack(_rewrite(payload, term_idx_at, "<I", 7))
    with pytest.raises(PostingsFormatError, match="twice"):
        unpack(_rewrite(payload, term_idx_at + 4, "<I", 0))
    with pytest.raises(PostingsFormatError, match="zero"):
        unpack(_rewrite(payload, term_idx_at + 8, "<I", 0))
    with pytest.raises(PostingsFormatError, match="counts disagree"):
        unpack(_rewrite(payload, 20 + 20, "<I", 1))  # the document's term count
    assert issubclass(PostingsFormatError, EnvelopeError)


def test_pack_refuses_documents_whose_terms_and_tfs_disagree() -> None:
    with pytest.raises(ValueError, match="2 terms but 1 tfs"):
        pack([DocPostings(1, 1.0, 1, ["a", "b"], [1])])


def test_index_tasks_round_trip_and_reject_anything_else() -> None:
    raw = encode_task(12, [1, -5, 2**63 - 1], "abc123")
    assert b"\n" not in raw  # header only, so a failed batch report can be split
    task = decode_task(raw)
    assert (task.batch, task.fps, task.dictionary) == (12, [1, -5, 2**63 - 1], "abc123")
    for bad in (
        encode("postings", {"batch": 1, "fps": []}),
        encode("index-batch", {"batch": "1", "fps": []}),
        encode("index-batch", {"batch": 1, "fps": ["1"]}),
        encode("index-batch", {"batch": 1, "fps": [2**64]}),
        b"junk",
    ):
        with pytest.raises(EnvelopeError):
            decode_task(bad)


def test_batches_concatenate_with_their_term_tables_end_to_end() -> None:
    a = PostingsBatch.of(DOCS[:2])
    b = PostingsBatch.of([DocPostings(7, 2.0, 3, ["世界", "hello"], [1, 2])])
    both = PostingsBatch.concat([a, b])
    assert both.docs() == [*DOCS[:2], DocPostings(7, 2.0, 3, ["世界", "hello"], [1, 2])]
    assert both.terms == ["北京", "hello", "привет", "世界", "hello"]
    assert len(both) == 3 and PostingsBatch.concat([]).docs() == []
