"""The message format shared by every queue: a small versioned JSON envelope.

A message is ``JSON header`` or ``JSON header + b"\\n" + packed payload``.
The header is ``{"v": 1, "kind": ..., ...fields}``; JSON never contains a raw
newline, so the first newline always ends it. Bulk data travels as the
payload, many records a message, never in the header: rank vectors and edge
lists packed binary, an index batch's documents (mostly tokens) as one orjson
array. Headers are written and read with orjson:
the same bytes as the standard library's compact ``json.dumps`` (UTF-8,
no spaces), at a twentieth of its CPU; every task and outcome of a crawl
passes through here twice. orjson reads an integer past 64 bits as a float
(srcrawl writes none: fingerprints are 64-bit), which the readers of the
fields then refuse as the wrong type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from srcrawl.core.defaults import ENVELOPE_VERSION
from srcrawl.core.errors import EnvelopeError


@dataclass(frozen=True)
class Message:
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    payload: bytes = b""

    def get(self, name: str, default: Any = None) -> Any:
        """A header field; optional fields missing from older writers take ``default``."""
        return self.fields.get(name, default)


def encode(kind: str, fields: dict[str, Any] | None = None, payload: bytes = b"") -> bytes:
    """Encode one message."""
    header = {"v": ENVELOPE_VERSION, "kind": kind}
    if fields:
        header.update(fields)
    try:
        raw = orjson.dumps(header, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an integer past 64 bits: the standard library writes it
        raw = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    return raw + b"\n" + payload if payload else raw


def decode(raw: bytes | str) -> Message:
    """Decode one message; raise EnvelopeError if it is not one we understand."""
    if isinstance(raw, str):
        raw = raw.encode()
    head, sep, payload = raw.partition(b"\n")
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError as e:
        raise EnvelopeError(f"not a srcrawl message: {raw[:60]!r}") from e
    if not isinstance(header, dict) or "kind" not in header:
        raise EnvelopeError(f"not a srcrawl message: {raw[:60]!r}")
    version = header.pop("v", None)
    if version != ENVELOPE_VERSION:
        raise EnvelopeError(f"message version {version!r} is not {ENVELOPE_VERSION}")
    kind = header.pop("kind")
    return Message(kind=str(kind), fields=header, payload=payload if sep else b"")
