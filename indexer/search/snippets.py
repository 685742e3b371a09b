"""Snippets: a window of page text around the query terms, the terms marked.

The text is shown as the page has it (full-width punctuation, case); terms are
found (indexer/search/terms.py) in a folded copy of the same length
(indexer/text.py's ``fold_aligned``), so a match there is the same characters in
the original."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from srcrawl.core.defaults import DEFAULT_SNIPPET_CHARS, SNIPPET_TEXT_CHARS
from srcrawl.indexer.engine import stem
from srcrawl.indexer.search.terms import (
    Span,
    char_spans,
    find_han,
    find_terms,
    find_words,
    find_words_utf8,
    merged,
    words_starting,
)
from srcrawl.indexer.text import HAN_RUN, fold_aligned

MARK_OPEN, MARK_CLOSE = "«", "»"
"""How a query term is marked in a snippet written as plain text (``srcrawl search``,
the JSON API's ``snippet``)."""

SNIPPET_SCAN_CHARS = SNIPPET_TEXT_CHARS
"""Text searched for the terms (what the index stores of a page's text)."""


@dataclass(frozen=True)
class Snippet:
    """A fragment of a page's text and where the query terms are in it: ``marks`` are
    (start, end) offsets into ``text``, in order, never overlapping. Each reader renders
    them its own way (HTML ``<mark>``, « », bold on a terminal): the text itself holds no
    mark, so a page's own « » can never be taken for one."""

    text: str
    marks: tuple[Span, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.text)

    def pieces(self) -> Iterator[tuple[str, bool]]:
        """The text in order as (piece, whether it is a query term), empty pieces left out."""
        pos = 0
        for start, end in self.marks:
            if start > pos:
                yield self.text[pos:start], False
            yield self.text[start:end], True
            pos = end
        if pos < len(self.text):
            yield self.text[pos:], False

    def marked(self, open_mark: str = MARK_OPEN, close_mark: str = MARK_CLOSE) -> str:
        """The text with each query term between ``open_mark`` and ``close_mark``."""
        return "".join(f"{open_mark}{p}{close_mark}" if term else p for p, term in self.pieces())


class OwnText(Protocol):
    """Which positions of a page's whitespace-collapsed text are its own (not its host's
    menus and footers); see indexer/boilerplate.py."""

    def covered(self, body: str, pos: int) -> bool: ...

    def run_start(self, body: str, pos: int) -> int | None: ...


def collapsed(text: str) -> str:
    """``text`` with its whitespace runs made one space and none at the ends, as
    ``" ".join(text.split())`` gives it. A crawled page's text is stored so already
    (slave/parse.py): then it is returned as it is, found in C passes over it rather
    than by splitting it into its words."""
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text  # printable: no whitespace but the space (the others are separators)
    return " ".join(text.split())


def make_snippet(
    text: str,
    terms: Sequence[str],
    width: int = DEFAULT_SNIPPET_CHARS,
    own: OwnText | None = None,
) -> Snippet:
    """About ``width`` characters of ``text`` holding as many distinct terms as it can.

    Whitespace is collapsed, the text otherwise as the page has it; each
    occurrence of a term inside the window is marked. Without any occurrence, the
    start of the text. With ``own`` (indexer/boilerplate.py),
    occurrences in the host's repeated text (menus) are passed over, and the window
    starts no earlier than the run of the page's own text it is built on.
    """
    body = collapsed(text[:SNIPPET_SCAN_CHARS])
    folded = fold_aligned(body)
    return _snippet(body, folded, find_terms(folded, terms), width, own)


def page_snippet(
    text: str, folded: str, terms: list[str], width: int = DEFAULT_SNIPPET_CHARS
) -> Snippet:
    """:func:`make_snippet` of a page's own text as the index stores it (collapsed, the
    host's menus left out, and ``folded`` in place at index time), its terms' stem
    variants marked too (``splitting`` for ``split``, :func:`snippet_terms`). Words of
    ASCII terms are found in one pass that stops at the match limit
    (:func:`find_words`); other terms as make_snippet does."""
    body, folded = text[:SNIPPET_SCAN_CHARS], folded[:SNIPPET_SCAN_CHARS]
    stems = {stem(t) for t in terms if t.isascii()}
    matches = find_words(folded, terms, stems, cached_stem)
    if matches is None:
        matches = find_terms(folded, snippet_terms(body, terms))
    return _snippet(body, folded, matches, width, None)


def stored_snippet(
    text: bytes, folded: bytes | None, terms: list[str], width: int = DEFAULT_SNIPPET_CHARS
) -> Snippet:
    """:func:`page_snippet` of a page's own text as the index stores it, UTF-8 (and
    ``folded`` when the index keeps a folded copy): its Chinese terms found in the
    decoded text (:func:`find_han`), the others in the bytes (:func:`find_words_utf8`),
    only the text decoded; by page_snippet when they cannot be.

    (The two kinds never overlap: a Chinese term's span holds only Chinese, another
    term's none, so each is found apart and the two merged.)"""
    source = text if folded is None else folded
    plain = {t.lower() for t in terms if t}
    han = {t for t in plain if HAN_RUN.fullmatch(t)}
    others = [t for t in terms if t and t.lower() not in han]
    found = find_words_utf8(source, others, {stem(t) for t in others if t.isascii()}, cached_stem)
    body = text.decode()
    if found is None:
        return page_snippet(body, body if folded is None else folded.decode(), terms, width)
    spans, words = found
    matches = char_spans(source, spans)
    seen: Sequence[object] = words
    if han:
        chinese = find_han(body if folded is None else folded.decode(), han)
        matches, seen = merged((matches, words), chinese)
    start = _best_window(matches, seen, width)[0] if matches else 0
    return _fragment(body, start, min(len(body), start + width), matches)


def _snippet(
    body: str, folded: str, matches: list[Span], width: int, own: OwnText | None
) -> Snippet:
    """The window of ``body`` (``folded``: its folded copy) with the most of ``matches``."""
    if own is not None:
        matches = [m for m in matches if not own.covered(body, m[0])]
    if not matches:
        start = (own.run_start(body, 0) or 0) if own is not None else 0
    else:
        start = _window(body, folded, matches, width, own)
    return _fragment(body, start, min(len(body), start + width), matches)


@functools.lru_cache(maxsize=65_536)
def cached_stem(word: str) -> str:
    """:func:`stem`, kept: a page's words are mostly the words of other pages."""
    return stem(word)


def _window(body: str, folded: str, matches: list[Span], width: int, own: OwnText | None) -> int:
    """Where the window of ``width`` characters with the most distinct terms starts."""
    words = [folded[start:end].lower() for start, end in matches]  # one word however written
    best_start, best = _best_window(matches, words, width)
    if own is not None:  # not from the menu before the page's own text
        best_start = max(best_start, own.run_start(body, matches[best][0]) or 0)
    return best_start


def _best_window(matches: list[Span], words: Sequence[object], width: int) -> tuple[int, int]:
    """Where the window of ``width`` characters holding the most distinct ``words`` (each
    match's, lower-cased) starts, a quarter width before one of the matches, and which.

    The window before match ``i`` holds the matches from the first starting in it to the
    last ending in it (and at least those before ``i``); both ends only move on as ``i``
    does, so the words in it are counted in one pass, not a set built for each, and the
    pass ends at the first window holding every word (one, for a one-word query)."""
    starts = [start for start, _end in matches]
    ends = [end for _start, end in matches]
    n, lead = len(ends), width // 4
    most = len(set(words))  # a window with every word is the first best one
    counts: dict[object, int] = {}
    lo = hi = right = 0
    best_start, best_count, best_i = 0, -1, 0
    # (plain compares, not max(): this loop runs for each hit of every search)
    for i, first in enumerate(starts):
        start = first - lead if first > lead else 0
        stop = start + width
        while hi < n and ends[hi] <= stop:
            hi += 1
        upto = hi if hi > i else i
        while right < upto:  # a match now in the window
            word = words[right]
            counts[word] = counts.get(word, 0) + 1
            right += 1
        while lo < i and starts[lo] < start:  # a match the window left behind
            word = words[lo]
            left = counts[word] - 1
            if left:
                counts[word] = left
            else:
                del counts[word]
            lo += 1
        if len(counts) > best_count:
            best_start, best_count, best_i = start, len(counts), i
            if best_count == most:
                break
    return best_start, best_i


def _fragment(body: str, start: int, end: int, matches: list[Span]) -> Snippet:
    """``body[start:end]``, with "…" where it is cut, and the matches wholly inside it."""
    lead = "…" if start > 0 else ""
    shift = len(lead) - start
    marks = tuple((at + shift, to + shift) for at, to in matches if at >= start and to <= end)
    return Snippet(lead + body[start:end] + ("…" if end < len(body) else ""), marks)


def snippet_terms(text: str, terms: list[str]) -> list[str]:
    """``terms`` and the words of ``text`` that the index stems as one of them
    (``splitting`` for ``split``), so a snippet marks what matched."""
    stems = tuple(sorted({stem(t) for t in terms if t.isascii()}))
    if not stems:
        return terms
    words = {w.lower() for w in words_starting(stems).findall(text, 0, SNIPPET_SCAN_CHARS)}
    extra = [w for w in words if w not in terms and stem(w) in stems]
    return [*terms, *sorted(extra)]
