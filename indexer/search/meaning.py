"""What a query means, beside the words it shares with a page: a small word-embedding
model's similarity of the two, added to the ranking's score.

A page and a query are each the mean of their tokens' vectors (WordLlama's
256-dimension model, whose weights ship inside its package: nothing is
downloaded). A page's vector is made when it is indexed (the index slave), from
its title and the start of its own text, and kept in the index as 256 bytes
(:data:`srcrawl.indexer.engine.MEANING`). A query of English words (no Chinese:
the model's words are English ones) then reorders the ranking's best
MEANING_POOL pages by ``score / best score + weight × cosine``.

The ranking's own score counts, not just its order: fused by reciprocal rank
(the ranks alone, as Fess fuses a lexical and a vector ranking), a page far
ahead by its words lost its place to one a little nearer in meaning, and every
weight lowered the mean MRR@10 of the corpora left out (docs/search.md, "Why
these weights"). Added to the score, a page that holds every word well stays
first, and among pages close by their words the one that means the query rises.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from srcrawl.indexer.engine import MEANING
from srcrawl.indexer.search.collect import Scored
from srcrawl.indexer.text import HAN

MEANING_POOL = 20
"""The ranked pages a query's meaning may reorder (the rest keep their places below)."""
NONE_FIRST = 4
"""The best pages that, none of them with a vector, leave the order as it is unread
further (an English word searched in pages in Chinese)."""
MEANING_CHARS = 1500
"""Characters of a page's own text its vector is made of (its title first)."""
SCALE = 127
"""A vector's components (of a unit vector: within ±1) kept as int8 of this scale."""
WORDS_KEPT = 200_000
"""Distinct words whose token ids a process keeps (then it starts again)."""
_WORD_IDS: dict[str, list[int]] = {}
_HAN = re.compile(f"[{HAN}]")


class MeaningUnavailable(RuntimeError):
    """The embedding model is not installed."""


def model() -> Any:
    """WordLlama's 256-dimension model from the files inside its package, loaded once
    (:func:`_loaded`); MeaningUnavailable where it is not installed."""
    got = _loaded()
    if isinstance(got, MeaningUnavailable):
        raise MeaningUnavailable(str(got))
    return got


@functools.cache
def _loaded() -> Any:
    """The model, or why it cannot be had: a failed import is kept too, or each index
    batch and each English search would try it again (``functools.cache`` keeps no
    exception). Its loader looks for the tokenizer in the wrong folder and would download
    it: it is pointed at the files in the package."""
    with _root_logging_kept():
        try:
            import wordllama
        except ImportError:  # a dependency, but a process may lack it
            return MeaningUnavailable("the meaning signal needs WordLlama: pip install wordllama")
        root = Path(wordllama.__file__).parent
        return wordllama.WordLlama.load(cache_dir=root, disable_download=True)


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """The root logger as it was, whatever an import does to it: WordLlama's modules call
    ``logging.basicConfig(level=INFO)`` when imported, which would print every library's
    INFO records on stderr (a line a page from the language model, in each index
    slave's log)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def available() -> bool:
    """Whether the model can be loaded. It is, if so, once, and so is its tokenizer of
    one word (:func:`_word_tokenizer`, 0.1 s to build): a server's first English query
    does not wait for them."""
    try:
        model()
        _word_tokenizer()
    except MeaningUnavailable:
        return False
    return True


def vectors(texts: Sequence[str]) -> np.ndarray:
    """The unit vectors of ``texts``, one a row: the mean of their tokens' vectors, as
    WordLlama's ``embed`` makes it of the text with its white space made single spaces
    and its words with Chinese in them left out.

    Its tokenizer (Llama 2's: each word starts a token of its own) is run once per
    distinct word, not once per text: a page's words are mostly words seen before, and
    the tokenizer was three quarters of the cost (0.42 ms a page of 1,500 characters,
    0.06 ms with the words known)."""
    emb = model().embedding
    out = np.zeros((len(texts), emb.shape[1]), np.float32)
    for row, text in enumerate(texts):
        # a word with Chinese in it left out: the model's words are English ones, and its
        # tokenizer spells such a word out a byte at a time
        ids = _token_ids([w for w in text.split() if not _HAN.search(w)])
        if ids:  # (the sum, once made a unit vector, is the mean's)
            v = emb.take(np.asarray(ids), axis=0).sum(axis=0)
            out[row] = v / (float(np.linalg.norm(v)) or 1.0)
    return out


def _token_ids(words: Sequence[str]) -> list[int]:
    """The model's token ids of ``words``, each word's kept (up to WORDS_KEPT words)."""
    ids: list[int] = []
    for word in words:
        known = _WORD_IDS.get(word)
        if known is None:
            if len(_WORD_IDS) >= WORDS_KEPT:
                _WORD_IDS.clear()
            known = _WORD_IDS[word] = _word_tokenizer().encode(word, add_special_tokens=False).ids
        ids.extend(known)
    return ids


@functools.cache
def _word_tokenizer() -> Any:
    """The model's tokenizer for one word at a time: WordLlama's own pads every input
    (for its batches), which costs a word's encoding four times as much."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(model().tokenizer.to_str())
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def applies(query: str) -> bool:
    """Whether a query's meaning is weighed: one in the model's language (none of its
    characters Chinese)."""
    return _HAN.search(query) is None


def page_text(title: str, text: str) -> str:
    """What of a page its vector is made of."""
    return f"{title} {text[:MEANING_CHARS]}"


def page_vectors(pages: Sequence[tuple[str, str]]) -> list[str]:
    """The kept vector (:func:`packed`) of each (title, own text) page; all '' when the
    model is not installed (the pages are searched by their words alone)."""
    if not pages or not available():
        return ["" for _ in pages]
    return [packed(v) for v in vectors([page_text(t, x) for t, x in pages])]


def packed(vector: np.ndarray) -> str:
    """A unit vector as the index keeps it: int8 components, base64 (the documents
    message is JSON)."""
    q = np.clip(np.rint(vector * SCALE), -SCALE, SCALE).astype(np.int8)
    return base64.b64encode(q.tobytes()).decode()


def unpacked(raw: bytes) -> np.ndarray:
    """The unit vector of a page's kept int8 components."""
    v = np.frombuffer(raw, np.int8).astype(np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def fused(
    found: list[Scored], query: str, searcher: tantivy.Searcher, weight: float
) -> list[Scored]:
    """``found`` (ranked) with its best MEANING_POOL pages reordered by ``score / best
    score + weight × cosine(query, page)``; a page without a vector counts the pool's
    least cosine. As it is when the weight is 0, the query is not in the model's
    language or fewer than two pages have a vector.

    A reordered page's score becomes ``score + weight × best score × (cosine − the
    pool's least)``: in the order shown and in the ranking's units, never below what its
    words scored, so no page after the pool scores above one in it."""
    pool = found[:MEANING_POOL]
    if weight <= 0 or len(pool) < 2 or not applies(query):
        return found
    kept: list[bytes | None] = []
    for s in pool:
        kept.append(_kept_vector(searcher, s))
        if len(kept) == NONE_FIRST and not any(kept):
            return found  # pages in Chinese, most likely all of them: no reading on
    have = [i for i, v in enumerate(kept) if v is not None]
    if len(have) < 2:
        return found
    try:
        q = vectors([query])[0]
    except MeaningUnavailable:  # an index of vectors, searched where the model is not
        return found
    # (one made by a model of another size counts as none)
    have = [i for i in have if len(kept[i] or b"") == q.size]
    if len(have) < 2:
        return found
    # the kept vectors as rows of one array, each made a unit vector by its norm
    rows = np.frombuffer(b"".join(kept[i] or b"" for i in have), np.int8)
    rows = rows.reshape(len(have), q.size).astype(np.float32)
    norms = np.linalg.norm(rows, axis=1)
    cos = np.full(len(pool), np.nan)
    cos[have] = rows @ q / np.where(norms > 0, norms, 1.0)
    least = float(np.nanmin(cos))
    cos[np.isnan(cos)] = least
    best = max(s.score for s in pool)
    for s, c in zip(pool, cos, strict=True):
        s.score += weight * best * (float(c) - least)
    return sorted(pool, key=lambda s: -s.score) + found[MEANING_POOL:]


def _kept_vector(searcher: tantivy.Searcher, s: Scored) -> bytes | None:
    """The page's kept vector (its document kept for its snippet, read once)."""
    if s.address is None:
        return None
    s.doc = searcher.doc(s.address)
    raw = s.doc.get_first(MEANING)
    return bytes(raw) if raw else None
