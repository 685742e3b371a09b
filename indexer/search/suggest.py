"""A "did you mean" for words no page holds, from the index's own terms.

Asked only when a word of the query matches no page at all (the searcher's
``missing``): the body field's terms that start with the word's first letter
are walked in the index (Tantivy, the most frequent SUGGEST_CANDIDATES of
them), and the one nearest in edit distance wins, the more frequent on a tie.
The index holds stems (``villag``): a stem is shown as a word by giving it back
the ending the stemmer took from the word typed (``vilage`` → ``villag`` +
``e``), when that word stems to it, else as the stem itself.
"""

from __future__ import annotations

import re

import tantivy

from srcrawl.indexer.engine import stem

SUGGEST_CANDIDATES = 5_000
"""Terms of a first letter compared with a missing word (the most frequent: a suggestion
is a word that pages use)."""
SUGGEST_FIELD = "body"
_ASCII_WORD = re.compile(r"[a-z][a-z0-9]{2,30}")


def most_distance(word: str) -> int:
    """How many edits a suggestion may be from ``word``: one for a short word, else two."""
    return 1 if len(word) <= 4 else 2


def edit_distance(a: str, b: str, most: int) -> int:
    """The Damerau-Levenshtein distance of ``a`` and ``b`` (adjacent swaps count one), or
    ``most + 1`` once it is sure to pass ``most``."""
    if abs(len(a) - len(b)) > most:
        return most + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        if min(row) > most:
            return most + 1
        prev2, prev = prev, row
    return prev[-1]


def suggest(searcher: tantivy.Searcher, word: str) -> str | None:
    """The word to search for instead of ``word`` (lower-case, no page holds it), or None."""
    if not _ASCII_WORD.fullmatch(word):
        return None  # (Chinese and identifiers: no suggestion)
    stemmed = stem(word)
    most = most_distance(stemmed)
    best: tuple[int, int, str] | None = None
    for term, count in searcher.terms_with_prefix(
        SUGGEST_FIELD, stemmed[0], limit=SUGGEST_CANDIDATES
    ):
        d = edit_distance(stemmed, term, most)
        if d <= most and (best is None or (d, -count) < best[:2]):
            best = (d, -count, term)
    if best is None:
        return None
    term = best[2]
    # the stem as a word: the ending the stemmer took from the word typed, given back
    ending = word[len(stemmed) :] if word.startswith(stemmed) else ""
    return term + ending if ending and stem(term + ending) == term else term
