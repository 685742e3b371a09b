"""Snippets: a window of page text around the query terms, the terms marked.

The text is shown as the page has it (full-width punctuation, case); terms are
found in a folded copy of the same length (:func:`fold_aligned`), so a match
there is the same characters in the original."""

from __future__ import annotations

import bisect
import functools
import heapq
import re
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Protocol

from srcrawl.defaults import DEFAULT_SNIPPET_CHARS

MARK_OPEN, MARK_CLOSE = "«", "»"
"""How a query term is marked in a snippet."""

SNIPPET_SCAN_CHARS = 60_000
"""Text searched for the terms; a term found later is not shown (the text of most pages is
shorter; the scan of a longer one costs more than the search)."""
_MAX_MATCHES = 64
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_HAN_RUN = re.compile(f"[{_HAN}]+")
# a letter or digit that is not Chinese: what may not touch a non-Chinese term
_WORD_CHAR = re.compile(f"[^\\W_{_HAN}]")


# -- NFKC, fast for the common text -------------------------------------------------
# unicodedata.normalize("NFKC") takes ~0.1 ms a kilobyte of Chinese text, most of a
# snippet's cost. Text made only of characters that NFKC leaves alone or maps on their
# own (ASCII, CJK ideographs and punctuation, full-width forms) and none that combine,
# is folded character by character instead: no character of it has a combining class
# or composes with a neighbour, so NFKC of the whole is the concatenation of NFKC of
# each character (tests/test_search_cache.py checks every one against unicodedata).
_CHECKED_RANGES = ((0x0000, 0x007F), (0x3000, 0x303F))
"""ASCII, CJK symbols and punctuation: the characters NFKC keeps that are starters are
found when the table is built."""
_IDEOGRAPHS = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF))
"""CJK ideographs (extension A, the unified block): starters without a decomposition,
every one (taken whole, not checked at start-up: the test checks them)."""
_MAPPED_RANGES = ((0x3000, 0x303F), (0xFF00, 0xFFEF))
"""Where NFKC maps characters onto stable ones: the ideographic space and numerals,
full-width and half-width forms."""


@functools.cache
def _fold_table() -> tuple[re.Pattern[str], re.Pattern[str], dict[str, str]]:
    """(a pattern matching text made only of characters folded one by one, one finding
    those NFKC maps to others, their map)."""

    def stable(c: str) -> bool:
        return not unicodedata.combining(c) and unicodedata.normalize("NFKC", c) == c

    codes = [c for lo, hi in _CHECKED_RANGES for c in range(lo, hi + 1) if stable(chr(c))]

    def stable_code(code: int) -> bool:
        in_range = any(lo <= code <= hi for lo, hi in _CHECKED_RANGES + _IDEOGRAPHS)
        return in_range and stable(chr(code))

    table: dict[str, str] = {}
    for lo, hi in _MAPPED_RANGES:
        for code in range(lo, hi + 1):
            folded = unicodedata.normalize("NFKC", chr(code))
            if (
                folded != chr(code)
                and not unicodedata.combining(chr(code))
                and all(stable_code(ord(f)) for f in folded)
            ):
                table[chr(code)] = folded
    runs: list[list[int]] = []  # the codes as ranges [first, last], for a short pattern
    for code in sorted({*codes, *map(ord, table)}):
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    runs += [list(r) for r in _IDEOGRAPHS]
    ranges = "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in runs)
    mapped = "".join(re.escape(c) for c in table)
    return re.compile(f"[{ranges}]*"), re.compile(f"[{mapped}]"), table


def nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, without its cost for common text."""
    if text.isascii():
        return text
    foldable, mapped, table = _fold_table()
    if foldable.fullmatch(text):
        # str.translate would look every character up in a dict; only a few need it
        for c in set(mapped.findall(text)):
            text = text.replace(c, table[c])
        return text
    return unicodedata.normalize("NFKC", text)


@functools.cache
def _aligned_table() -> tuple[re.Pattern[str], dict[str, str]]:
    """A pattern finding the characters NFKC maps to one other character (of
    :func:`_fold_table`'s), and their map."""
    table = {c: f for c, f in _fold_table()[2].items() if len(f) == 1}
    return re.compile("[" + "".join(re.escape(c) for c in table) + "]"), table


_NEEDS_FOLD = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a\uff66-\uff9f\u3000]")
"""Characters a term can be written in that fold to others (full-width letters and digits,
half-width katakana, the ideographic space): text without them is matched as it is (a
term holds no punctuation, so full-width punctuation needs no folding to be passed)."""


def fold_aligned(text: str) -> str:
    """``text`` with each character that NFKC maps to one other character so mapped
    (full-width letters, digits and punctuation to ASCII): what terms are matched in,
    position for position with ``text``."""
    if text.isascii() or not _NEEDS_FOLD.search(text):
        return text
    mapped, table = _aligned_table()
    # str.translate would look every character up in a dict; only a few need it
    for c in set(mapped.findall(text)):
        text = text.replace(c, table[c])
    return text


_ASCII_WORD = "(?i:[a-z0-9])"
"""A letter or digit of a word stems are found in (in any case, as re.IGNORECASE takes it)."""

_OTHER_CASES = {"i": "İı", "k": "\u212a", "s": "ſ"}
"""What re.IGNORECASE takes for an ASCII letter besides its two cases (checked over all
of Unicode by tests/test_search_cache.py)."""


def _case_class(c: str) -> str | None:
    """Every character re.IGNORECASE takes for ``c`` (None: not known here)."""
    if c.isascii():
        low = c.lower()
        return "".join(dict.fromkeys(low + c.upper() + _OTHER_CASES.get(low, "")))
    return c if _HAN_RUN.fullmatch(c) else None  # Chinese has no case


def term_pattern(terms: Sequence[str]) -> re.Pattern[str] | None:
    """A case-insensitive pattern finding the terms anywhere (None without terms).

    Kept to plain alternatives (the per-query pattern must compile fast);
    :func:`find_terms` then keeps only whole-token matches of non-Chinese terms.
    """
    return _term_pattern(tuple(terms))


@functools.lru_cache(maxsize=256)  # one query's hits share it
def _term_pattern(terms: tuple[str, ...]) -> re.Pattern[str] | None:
    ordered = sorted(set(terms), key=len, reverse=True)
    if not ordered:
        return None
    firsts = [_case_class(t[0]) if t else None for t in ordered]
    if None in firsts:
        return re.compile("|".join(re.escape(t) for t in ordered), re.IGNORECASE)
    starts, branches = _first_class_alternatives(ordered, firsts)
    return re.compile(f"{starts}(?:{branches})")


def _first_class_alternatives(ordered: list[str], firsts: list[str | None]) -> tuple[str, str]:
    """``ordered`` as case-insensitive alternatives behind a case-sensitive class of their
    first characters (``firsts``: each one's cases), ``(class, alternatives)``: the same
    matches as the alternatives under IGNORECASE, found faster, as the class lets the
    regex engine skip to where a term can start (it cannot under IGNORECASE)."""
    starts = _char_class("".join(dict.fromkeys("".join(f or "" for f in firsts))))
    branches = "|".join(
        f"(?<={_char_class(f or '')})(?i:{re.escape(t[1:])})"
        for t, f in zip(ordered, firsts, strict=True)
    )
    return starts, branches


def _char_class(chars: str) -> str:
    return "[" + "".join(re.escape(c) for c in chars) + "]"


@functools.lru_cache(maxsize=256)  # one query's hits share it
def words_starting(stems: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern finding the ASCII words (letters and digits, in any case) that begin with
    one of ``stems`` (ASCII, non-empty): ``split`` finds ``Splitting`` and not ``resplit``.

    The same matches as ``(?<![a-z0-9])(?:stem|…)[a-z0-9]*`` under IGNORECASE, found
    faster: the test of the character before a word comes after its first character, so
    the engine skips to where a word can start (a lookbehind first would stop that).
    """
    ordered = sorted(set(stems), key=len, reverse=True)
    starts, branches = _first_class_alternatives(ordered, [_case_class(t[0]) for t in ordered])
    # after the first character, two back: the one before the word, then that first one
    # (a letter or digit: "." takes it)
    return re.compile(f"{starts}(?<!{_ASCII_WORD}.)(?:{branches}){_ASCII_WORD}*")


def find_terms(text: str, terms: Sequence[str], limit: int = _MAX_MATCHES) -> list[Span]:
    """Where the terms are in ``text`` (start, end), in order: Chinese terms anywhere,
    other terms only as whole tokens (``engine`` is not found inside ``engineer``).

    The matches of :func:`term_pattern` (case-insensitive, at each position the longest
    term, then on from its end). In a text of FIND_MIN_CHARS or more, ASCII terms are
    found with ``str.find`` in a lower-cased copy, faster than the regex engine steps
    through a long page of Latin script; Chinese terms, other terms and shorter texts
    by the pattern, which is faster there (docs/benchmarks-journal.md, "Snippets on real
    pages")."""
    plain = {t.lower() for t in terms if t}
    fast = len(text) >= FIND_MIN_CHARS and plain and all(t.isascii() for t in plain)
    low = _lowered(text) if fast else None  # (a Chinese query's page is not lower-cased)
    if low is not None:
        found = _found_in_lowered(low, plain)
    else:
        pattern = term_pattern(terms)
        found = ((m.start(), m.end()) for m in pattern.finditer(text)) if pattern else iter(())
    spans: list[Span] = []
    for start, end in found:
        if not _HAN_RUN.fullmatch(text, start, end) and (
            (start > 0 and _WORD_CHAR.match(text, start - 1))
            or (end < len(text) and _WORD_CHAR.match(text, end))
        ):
            continue
        spans.append((start, end))
        if len(spans) >= limit:
            break
    return spans


Span = tuple[int, int]
FIND_MIN_CHARS = 2_000
"""The text length from which ASCII terms are found with ``str.find`` (find_terms)."""
_ODD_CASES = str.maketrans({"İ": "i", "ı": "i", "ſ": "s", "\u212a": "k"})
"""The characters re.IGNORECASE takes for an ASCII letter whose lower case is another
(_OTHER_CASES), as that letter."""


def _lowered(text: str) -> str | None:
    """``text`` lower-cased position for position, with each character re.IGNORECASE
    takes for an ASCII letter as that letter; None if a position would move."""
    if text.isascii():
        return text.lower()
    if any(c in text for c in "İıſ\u212a"):
        text = text.translate(_ODD_CASES)
    low = text.lower()
    return low if len(low) == len(text) else None


def _found_in_lowered(low: str, terms: set[str]) -> Iterator[Span]:
    """The spans the pattern of ``terms`` (lower-cased, of ASCII characters)
    matches in ``low``: the nearest occurrence of any term, the longest there, then on
    from its end. Each term's next occurrence is kept in a heap and looked for again
    only once a match has passed it."""
    heap = [(at, -len(t), t) for t in terms if (at := low.find(t)) >= 0]
    heapq.heapify(heap)
    end = 0
    while heap:
        at, neg, t = heap[0]
        if at < end:  # passed over by the last match: its next one from there
            at = low.find(t, end)
            if at < 0:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (at, neg, t))
            continue
        end = at - neg
        yield at, end
        nxt = low.find(t, end)
        if nxt < 0:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt, neg, t))


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
) -> str:
    """About ``width`` characters of ``text`` holding as many distinct terms as it can.

    Whitespace is collapsed, the text otherwise as the page has it; each
    occurrence of a term inside the window is wrapped in « ». Without any
    occurrence, the start of the text. With ``own`` (indexer/boilerplate.py),
    occurrences in the host's repeated text (menus) are passed over, and the window
    starts no earlier than the run of the page's own text it is built on.
    """
    body = collapsed(text[:SNIPPET_SCAN_CHARS])
    folded = fold_aligned(body)
    matches = find_terms(folded, terms)
    if own is not None:
        matches = [m for m in matches if not own.covered(body, m[0])]
    if not matches:
        start = (own.run_start(body, 0) or 0) if own is not None else 0
        return (
            ("…" if start else "")
            + body[start : start + width]
            + ("…" if len(body) > start + width else "")
        )
    return _window(body, folded, matches, width, own)


def _window(body: str, folded: str, matches: list[Span], width: int, own: OwnText | None) -> str:
    """The window of ``width`` characters with the most distinct terms, them marked."""
    # the window starting a quarter width before each match: the distinct terms wholly in
    # it are a run of the matches (in order, never overlapping), found by bisection
    starts = [start for start, _end in matches]
    ends = [end for _start, end in matches]
    words = [folded[start:end].lower() for start, end in matches]  # one word however written
    best_start, best_count, best_i = 0, -1, 0
    for i, first in enumerate(starts):
        start = max(0, first - width // 4)
        lo, hi = bisect.bisect_left(starts, start, 0, i), bisect.bisect_right(ends, start + width)
        count = len(set(words[lo : max(i, hi)]))
        if count > best_count:
            best_start, best_count, best_i = start, count, i
    if own is not None:  # not from the menu before the page's own text
        best_start = max(best_start, own.run_start(body, starts[best_i]) or 0)
    start, end = best_start, min(len(body), best_start + width)
    parts = ["…"] if start > 0 else []
    pos = start
    for at, to in matches:
        if at >= start and to <= end:
            parts += [body[pos:at], MARK_OPEN, body[at:to], MARK_CLOSE]
            pos = to
    parts.append(body[pos:end])
    if end < len(body):
        parts.append("…")
    return "".join(parts)
