"""What a query means, beside the words it shares with a page: a small word-embedding
model, its ranks fused with the ranking's by reciprocal rank fusion.

A page and a query are each the mean of their tokens' vectors (WordLlama's
256-dimension model, whose weights ship inside its package: nothing is
downloaded); the pages the ranking found (the best MEANING_POOL of them) are
ranked again by cosine similarity to the query, and each page's two ranks fuse
as ``1/(K + rank) + weight/(K + rank by meaning)`` (Cormack et al.'s RRF, as Fess
and Elasticsearch fuse a lexical and a vector ranking). A page's vector is made
from its title and the start of its own text as the index stores it.

Measured leaving one corpus out and not used (docs/search.md, "Why these
weights"): its weight is 0 by default, and the model is only loaded when asked.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from srcrawl.indexer.engine import STORED_TEXT
from srcrawl.indexer.search.collect import Scored

MEANING_POOL = 50
"""The ranked pages a query's meaning may reorder (the rest keep their places below)."""
RRF_K = 60
"""Reciprocal rank fusion's constant: how little the first few ranks stand out."""
MEANING_CHARS = 1500
"""Characters of a page's own text its vector is made of (its title first)."""


class MeaningUnavailable(RuntimeError):
    """The embedding model is not installed."""


@functools.cache
def model() -> Any:
    """WordLlama's 256-dimension model from the files inside its package (its loader looks
    for the tokenizer in the wrong folder and would download it: it is pointed at them)."""
    try:
        import wordllama
    except ImportError as e:  # an optional dependency
        raise MeaningUnavailable(
            "the meaning signal needs WordLlama: pip install 'srcrawl[meaning]'"
        ) from e
    root = Path(wordllama.__file__).parent
    return wordllama.WordLlama.load(cache_dir=root, disable_download=True)


def vectors(texts: Sequence[str]) -> np.ndarray:
    """The unit vectors of ``texts``, one a row."""
    return model().embed(list(texts), norm=True)


def fused(
    found: list[Scored],
    query: str,
    titles: dict[int, str],
    searcher: tantivy.Searcher,
    weight: float,
) -> list[Scored]:
    """``found`` (ranked) reordered by its ranks fused with the ranks of its best
    MEANING_POOL pages by similarity to ``query``; ``titles``: fp → title."""
    pool = found[:MEANING_POOL]
    if weight <= 0 or len(pool) < 2:
        return found
    texts = [f"{titles.get(s.fp, '')}\n{_own_text(searcher, s)}" for s in pool]
    sims = vectors(texts) @ vectors([query])[0]
    by_meaning = np.empty(len(pool), dtype=np.int64)
    by_meaning[np.argsort(-sims, kind="stable")] = np.arange(1, len(pool) + 1)
    score = {
        s.fp: 1.0 / (RRF_K + rank) + weight / (RRF_K + int(by_meaning[rank - 1]))
        for rank, s in enumerate(pool, 1)
    }
    return sorted(pool, key=lambda s: -score[s.fp]) + found[MEANING_POOL:]


def _own_text(searcher: tantivy.Searcher, s: Scored) -> str:
    """The start of the page's own text as the index stores it ('' without it)."""
    if s.address is None:
        return ""
    stored = searcher.doc(s.address).get_first(STORED_TEXT)
    if not stored:
        return ""
    return bytes(stored[: 4 * MEANING_CHARS]).decode(errors="ignore")[:MEANING_CHARS]
