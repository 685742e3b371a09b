"""What an index slave sends the master: pages as tokens, many documents a message.

A document is a page's fields as srcrawl's tokens joined by spaces (see
indexer/engine.py for why the text goes pre-tokenized), with the page's
fingerprint, the ``fetched_at`` of the text that was tokenized (the master
skips a document whose page was fetched again since), its host (``site:``),
and two digests of its body tokens: xxh64 for exact duplicates and a 64-bit
simhash [Charikar 2002; Manku et al. 2007] for near-duplicates, and the page's
own text as written (its first SNIPPET_TEXT_CHARS) and, when folding changes
it, folded in place, which the index stores for snippets, its language
(indexer/language.py) and its vector in the meaning model, base64
(indexer/search/meaning.py; '' without).

The payload is an orjson array of documents, each an array in
:data:`COLUMNS` order. The master trusts the format, not the sender: a
payload that is not well formed raises :class:`DocumentsFormatError`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

import numpy as np
import orjson
import xxhash

from srcrawl.core.errors import EnvelopeError
from srcrawl.indexer.engine import IndexDoc, signed64

COLUMNS = (
    "fp",
    "fetched_at",
    "host",
    "title",
    "body",
    "boiler",
    "anchor",
    "ident",
    "digest",
    "simhash",
    "text",
    "folded",
    "lang",
    "meaning",
)
_TYPES = (int, (int, float), str, str, str, str, str, str, int, int, str, str, str, str)
_OLDER = {len(COLUMNS) - 2: ["und", ""], len(COLUMNS) - 1: [""]}
"""The columns a slave older than the language or the vector leaves out: none named."""
MAX_VECTOR_BYTES = 4096


class DocumentsFormatError(EnvelopeError):
    """A documents payload that is not a list of well-formed documents."""


def text_digest(tokens: Sequence[str]) -> int:
    """xxh64 of the tokens (signed): pages with the same words in the same order."""
    return signed64(xxhash.xxh64_intdigest("\x1f".join(tokens).encode()))


_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it is a bijection of 64 bits
_digest = xxhash.xxh64_intdigest


def simhash(tokens: Sequence[str]) -> int:
    """The 64-bit simhash (signed) of the tokens' bigrams, each distinct bigram weighed by
    its count: a page that differs from another in a few words differs in a few bits.

    A bigram's hash mixes its two words' xxh64, so the cost is a hash a word (by ``map``,
    with no Python loop) and a few array operations, not a string a bigram. Every bigram
    votes once: a distinct one weighed by its count, without sorting them out.
    """
    if not tokens:
        return 0
    hashes = np.fromiter(map(_digest, map(str.encode, tokens)), np.uint64, len(tokens))
    if len(hashes) > 1:
        with np.errstate(over="ignore"):
            mixed = hashes[:-1] * _MIX + (hashes[1:] ^ (hashes[1:] >> np.uint64(29)))
            hashes = mixed * _MIX
            hashes ^= hashes >> np.uint64(32)
    # bit i of each bigram (little-endian bytes, bits in order): its vote for bit i
    bits = np.unpackbits(
        hashes.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little"
    )
    ones = bits.sum(axis=0, dtype=np.intp)  # the bigrams with bit i set
    return signed64(int(np.packbits(2 * ones > len(hashes), bitorder="little").view("<u8")[0]))


def hamming(a: int, b: int) -> int:
    """Bits in which two 64-bit values (signed or not) differ."""
    return ((a ^ b) & ((1 << 64) - 1)).bit_count()


def pack(docs: Sequence[IndexDoc]) -> bytes:
    return orjson.dumps([[getattr(d, c) for c in COLUMNS] for d in docs])


def unpack(payload: bytes) -> list[IndexDoc]:
    """The documents of a payload; raise DocumentsFormatError if it is malformed."""
    try:
        rows = orjson.loads(payload)
    except orjson.JSONDecodeError as e:
        raise DocumentsFormatError(f"documents payload is not JSON: {e}") from e
    if not isinstance(rows, list):
        raise DocumentsFormatError("documents payload is not a list")
    docs = []
    for row in rows:
        if isinstance(row, list) and len(row) in _OLDER:
            row.extend(_OLDER[len(row)])
        if not isinstance(row, list) or len(row) != len(COLUMNS):
            raise DocumentsFormatError(f"a document has not the {len(COLUMNS)} columns")
        for value, kind, name in zip(row, _TYPES, COLUMNS, strict=True):
            if not isinstance(value, kind) or isinstance(value, bool):
                raise DocumentsFormatError(f"a document's {name} is not a {kind}")
        if not all(-(2**63) <= row[i] < 2**63 for i in (0, 8, 9)):
            raise DocumentsFormatError("a document's fingerprint or digest is not 64-bit")
        _check_vector(row[-1])
        docs.append(IndexDoc(*row))
    return docs


def _check_vector(packed: str) -> None:
    """DocumentsFormatError unless ``packed`` is '' or base64 of at most MAX_VECTOR_BYTES."""
    if not packed:
        return
    try:
        raw = base64.b64decode(packed, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DocumentsFormatError(f"a document's vector is not base64: {e}") from e
    if len(raw) > MAX_VECTOR_BYTES:
        raise DocumentsFormatError(f"a document's vector is over {MAX_VECTOR_BYTES} bytes")
