"""Where query terms are in a page's text, as fast as the snippets need it.

A Chinese term is found anywhere (Chinese is written without spaces), any
other term only as a whole token (``engine`` not inside ``engineer``), in any
case; the text searched is folded in place (indexer/text.py's
``fold_aligned``), so a span found is the same characters in the page's text.
The patterns are built so that the regex engine can skip to where a term may
start, and a long page of Latin script is searched with ``str.find`` instead
(tests/test_search_exact.py checks both against the plain patterns).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import operator
import re
from collections.abc import Callable, Collection, Iterator, Sequence

from srcrawl.indexer.text import HAN_RUN, OTHER_WORD_CHAR

Span = tuple[int, int]
"""Where a term is in a text: (start, end)."""

FIND_MIN_CHARS = 2_000
"""The text length from which ASCII terms are found with ``str.find`` (find_terms)."""
_MAX_MATCHES = 64
# a letter or digit that is not Chinese: what may not touch a non-Chinese term
_WORD_CHAR = re.compile(OTHER_WORD_CHAR)


_ASCII_WORD = "(?i:[a-z0-9])"
"""A letter or digit of a word stems are found in (in any case, as re.IGNORECASE takes it)."""

_OTHER_CASES = {"i": "İı", "k": "\u212a", "s": "ſ"}
"""What re.IGNORECASE takes for an ASCII letter besides its two cases (checked over all
of Unicode by tests/test_search_exact.py)."""


def _case_class(c: str) -> str | None:
    """Every character re.IGNORECASE takes for ``c`` (None: not known here)."""
    if c.isascii():
        low = c.lower()
        return "".join(dict.fromkeys(low + c.upper() + _OTHER_CASES.get(low, "")))
    return c if HAN_RUN.fullmatch(c) else None  # Chinese has no case


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
        if not HAN_RUN.fullmatch(text, start, end) and (
            (start > 0 and _WORD_CHAR.match(text, start - 1))
            or (end < len(text) and _WORD_CHAR.match(text, end))
        ):
            continue
        spans.append((start, end))
        if len(spans) >= limit:
            break
    return spans


_ASCII_RUN = re.compile("[a-z0-9]*")


def find_words(
    text: str,
    terms: Sequence[str],
    stems: Collection[str],
    stem: Callable[[str], str],
    limit: int = _MAX_MATCHES,
) -> list[Span] | None:
    """Where the terms and the words stemmed as one of ``stems`` (``Splitting`` for
    ``split``) are in ``text``, as whole tokens, in order; None unless every term is ASCII
    (and ``text`` lower-cases position for position).

    The spans of :func:`find_terms` given ``terms`` and the text's words of those stems
    (what snippets/snippet_terms gathers), found in one pass over a lower-cased copy: the
    next occurrence of a term or stem (``str.find``, the nearest first, the longest
    there), the run of letters and digits it starts, kept when that word is a term or
    stems as one and touches no other letter. It ends at ``limit`` matches, where the
    two scans it stands for went through the whole text."""
    plain = {t.lower() for t in terms if t}
    if not plain or not all(t.isascii() for t in plain):
        return None
    low = _lowered(text)
    if low is None:
        return None
    heap = [(at, -len(p), p) for p in _prefixes(plain | set(stems)) if (at := low.find(p)) >= 0]
    heapq.heapify(heap)
    spans: list[Span] = []
    end, size = 0, len(text)
    while heap and len(spans) < limit:
        at, neg, p = heap[0]
        if at >= end:
            stop = _ASCII_RUN.match(low, at - neg).end()
            word = low[at:stop]
            if (
                (word in plain or stem(word) in stems)
                and not (at > 0 and _WORD_CHAR.match(text, at - 1))
                and not (stop < size and _WORD_CHAR.match(text, stop))
            ):
                spans.append((at, stop))
                end = stop
        nxt = low.find(p, end if end > at else at + 1)
        if nxt < 0:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt, neg, p))
    return spans


def _prefixes(words: set[str]) -> list[str]:
    """``words`` without those another begins and ends in letters and digits after (a
    stem's occurrences hold its word's, ``failur`` those of ``failure``): the run of
    letters and digits from the shorter one's end takes in the longer one's rest, so
    the word found at the place is the same."""
    return [
        w
        for w in words
        if w
        and not any(
            o != w and w.startswith(o) and w[len(o) :].isalnum() and w.isascii() for o in words
        )
    ]


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


_ODD_UTF8 = (
    (b"\xc4", b"\xc4\xb0", b"\xc4\xb1"),
    (b"\xc5", b"\xc5\xbf"),
    (b"\xaa", b"\xe2\x84\xaa"),
)
"""The UTF-8 of the letters re.IGNORECASE takes for an ASCII one (_ODD_CASES: İ ı ſ K),
each behind a byte of it that English and Chinese text seldom holds."""


def _odd_letters(raw: bytes) -> bool:
    """Whether ``raw`` holds a letter of _ODD_UTF8: a rare byte of it looked for first (a
    one-byte ``in`` is a memchr, many times faster than a longer one)."""
    return any(rare in raw and any(odd in raw for odd in odds) for rare, *odds in _ODD_UTF8)


def find_words_utf8(
    raw: bytes,
    terms: Sequence[str],
    stems: Collection[str],
    stem: Callable[[str], str],
    limit: int = _MAX_MATCHES,
) -> tuple[list[Span], list[bytes]] | None:
    """:func:`find_words` (and, for Chinese terms, :func:`find_terms`) over a page's text
    as UTF-8, the way the index stores it: (byte spans, each span's lower-cased bytes),
    in order; None when a term is neither ASCII nor Chinese, or the text holds a letter
    re.IGNORECASE takes for an ASCII one (those two search the text instead).

    Neither decoded nor lower-cased as a string: ``bytes.lower`` changes ASCII letters
    only (ten times faster than ``str.lower`` on a page with one non-ASCII character),
    and a UTF-8 sequence is found only where a character starts. The words are found as
    find_words finds them, the nearest occurrence of a term or stem by ``bytes.find``
    (tests/test_search_exact.py compares the spans with those of the string scans)."""
    plain = {t.lower() for t in terms if t}
    words = tuple(sorted(t for t in plain if t.isascii()))
    han = tuple(sorted(t for t in plain if not t.isascii()))
    if not all(HAN_RUN.fullmatch(t) for t in han) or (words and _odd_letters(raw)):
        return None
    if not plain:
        return [], []
    low = raw.lower() if words else raw
    heap = _occurrences(low, (*_utf8_prefixes(words, tuple(sorted(stems))), *map(str.encode, han)))
    plain_bytes = {w.encode() for w in words}
    verdicts: dict[bytes, bool] = {}
    spans: list[Span] = []
    found: list[bytes] = []
    end, size = 0, len(raw)
    while heap and len(spans) < limit:
        at, neg, p = heap[0]
        if at >= end:
            if p[0] >= 0x80:  # a Chinese term: anywhere, the longest at a place
                stop = at - neg
            elif at > 0 and low[at - 1] in _ASCII_WORD_BYTES:
                stop = -1  # inside a word (``form`` in ``information``): no more to look at
            else:  # an ASCII word: a term, or stems as one, alone
                stop = _ASCII_BYTES.match(low, at - neg).end()  # type: ignore[union-attr]
                word = low[at:stop]
                kept = verdicts.get(word)
                if kept is None:  # a page repeats its words: each is stemmed once
                    kept = verdicts[word] = word in plain_bytes or stem(word.decode()) in stems
                if (
                    not kept
                    or (at > 0 and _word_char_before(raw, at))
                    or (stop < size and low[stop] >= 0x80 and _word_char_at(raw, stop))
                ):
                    stop = -1
            if stop >= 0:
                spans.append((at, stop))
                found.append(low[at:stop])
                end = stop
        nxt = low.find(p, end if end > at else at + 1)
        if nxt < 0:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt, neg, p))
    return spans, found


def find_han(
    text: str, terms: Collection[str], limit: int = _MAX_MATCHES
) -> tuple[list[Span], list[str]]:
    """Where the Chinese ``terms`` are in ``text`` (spans, and each span's term), in
    order: what :func:`find_terms` finds for them (anywhere, at each position the
    longest term, then on from its end), by :func:`_found_in_lowered`'s ``str.find``
    of each term's next occurrence, without the case folding and the whole-token test
    that other scripts need.

    A page's text is decoded once for it: finding the terms in the UTF-8 bytes and
    counting each span's characters back cost about twice as much on Chinese pages,
    and a pattern of the terms takes longer to compile (a query's terms are new to
    the process) than the finds take (docs/benchmarks-journal.md, "Chinese snippets
    found in the text")."""
    spans = list(itertools.islice(_found_in_lowered(text, {t for t in terms if t}), limit))
    return spans, [text[at:end] for at, end in spans]  # (Chinese has no case to lower)


def merged(
    a: tuple[list[Span], Sequence[object]],
    b: tuple[list[Span], Sequence[object]],
    limit: int = _MAX_MATCHES,
) -> tuple[list[Span], list[object]]:
    """Two scans' (spans, words) of terms that never overlap, in one order, the first
    ``limit`` of them (each scan stops at ``limit``: those of the other past its last
    are not among the first)."""
    if not a[0] or not b[0]:
        spans, words = a if a[0] else b
        return spans[:limit], list(words[:limit])
    pairs = [*zip(a[0], a[1], strict=True), *zip(b[0], b[1], strict=True)]
    both = sorted(pairs, key=operator.itemgetter(0))[:limit]
    return [span for span, _word in both], [word for _span, word in both]


_ASCII_BYTES = re.compile(b"[a-z0-9]*")
_ASCII_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")


def _occurrences(low: bytes, needles: Sequence[bytes]) -> list[tuple[int, int, bytes]]:
    """A heap of each needle's first occurrence in ``low``: (where, -length, needle)."""
    heap = [(at, -len(p), p) for p in needles if (at := low.find(p)) >= 0]
    heapq.heapify(heap)
    return heap


@functools.lru_cache(maxsize=256)  # one query's hits share it
def _utf8_prefixes(words: tuple[str, ...], stems: tuple[str, ...]) -> list[bytes]:
    return [p.encode() for p in _prefixes(set(words) | set(stems))]


def _word_char_before(raw: bytes, at: int) -> bool:
    """Whether the non-ASCII character ending at byte ``at`` is a letter or digit that
    is not Chinese (False after an ASCII character that is not one: lower-case letters
    and digits are checked before)."""
    if raw[at - 1] < 0x80:
        return False
    start = at - 1
    while start > 0 and raw[start] & 0xC0 == 0x80:  # back over continuation bytes
        start -= 1
    return _WORD_CHAR.match(raw[start:at].decode()) is not None


def _word_char_at(raw: bytes, at: int) -> bool:
    """Whether the (non-ASCII) character starting at byte ``at`` is a letter or digit
    that is not Chinese."""
    lead = raw[at]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return _WORD_CHAR.match(raw[at : at + size].decode()) is not None


def char_spans(raw: bytes, spans: list[Span]) -> list[Span]:
    """Byte spans of ``raw`` (each from a character's start to one's end) as character
    spans of its text."""
    if raw.isascii():
        return spans
    out: list[Span] = []
    byte = char = 0
    for at, stop in spans:
        char += len(raw[byte:at].decode())
        start = char
        # an ASCII word's bytes are its characters
        char += stop - at if raw[at] < 0x80 and raw[stop - 1] < 0x80 else len(raw[at:stop].decode())
        byte = stop
        out.append((start, char))
    return out
