from __future__ import annotations

import pytest

from srcrawl.core.defaults import ENVELOPE_VERSION
from srcrawl.core.errors import EnvelopeError
from srcrawl.queues.envelope import decode, encode


def test_round_trip_with_fields_and_binary_payload() -> None:
    payload = bytes(range(256)) * 3  # contains b"\n" and NULs
    msg = decode(encode("postings", {"batch": 7, "note": "中文\nline"}, payload))
    assert msg.kind == "postings"
    assert msg.fields == {"batch": 7, "note": "中文\nline"}
    assert msg.payload == payload


def test_missing_optional_fields_default() -> None:
    msg = decode(b'{"v":1,"kind":"fetch","url":"http://127.0.0.1/"}')
    assert msg.get("depth", 0) == 0
    assert msg.payload == b""


@pytest.mark.parametrize(
    "raw",
    [b"", b"garbage", b"[1,2]", b'{"kind":"x"}', b'{"v":2,"kind":"x"}', b'{"v":1}', b"\xff\xfe"],
)
def test_foreign_messages_are_refused(raw: bytes) -> None:
    with pytest.raises(EnvelopeError):
        decode(raw)


def test_headers_are_compact_json_whatever_writes_them() -> None:
    import json

    fields = {
        "url": "http://h.test/中",
        "fp": 2**64 - 1,
        "links": ["a", "b"],
        "x": None,
        "f": 1.5,
        "ok": True,
    }
    want = json.dumps(
        {"v": ENVELOPE_VERSION, "kind": "k", **fields}, ensure_ascii=False, separators=(",", ":")
    ).encode()
    assert encode("k", fields) == want
    # past 64 bits orjson refuses to write: the standard library does, byte for byte
    big = {"fp": 2**64}
    assert encode("k", big) == b'{"v":%d,"kind":"k","fp":18446744073709551616}' % ENVELOPE_VERSION
    assert decode(encode("k", fields)).fields == fields
