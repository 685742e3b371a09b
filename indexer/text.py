"""Text as the index and the search see it: what is Chinese, and how text is folded.

One place for both, so that the tokenizer (the terms of pages and queries) and
the snippets (where those terms are in a page's text) agree on them:

- :data:`HAN`, the Chinese characters: runs of them are segmented by jieba,
  and a Chinese term is found anywhere in a text, not only as a whole token;
- :func:`fold`, NFKC and lower case: the form of every term;
- :func:`fold_aligned`, the same folding as far as it keeps each character in
  its place, so a term found in the folded copy of a page's text is the same
  characters in the text as the page has it (a snippet shows those).
"""

from __future__ import annotations

import functools
import re
import unicodedata

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
"""The Chinese characters, as the body of a regex class: the unified ideographs and their
extensions A to F, the compatibility ideographs."""

HAN_RUN = re.compile(f"[{HAN}]+")
"""A run of Chinese characters (``fullmatch``: a text of nothing else)."""

OTHER_WORD_CHAR = f"[^\\W_{HAN}]"
"""A regex class: a letter or digit that is not Chinese (a run of them is one token).
Compiled where it is used: the class is large (tens of milliseconds)."""


def fold(text: str) -> str:
    """NFKC-folded (full-width to half-width, compatibility ideographs to unified ones),
    lower-cased text: the form every term is in."""
    return unicodedata.normalize("NFKC", text).lower()


# -- folding that keeps positions ---------------------------------------------------
# A character NFKC maps onto one other, stable character is so mapped (full-width
# letters, digits and punctuation, the ideographic space); any other is left.
# tests/test_search_exact.py checks the map against unicodedata over all of Unicode.
_STABLE_RANGES = ((0x0000, 0x007F), (0x3000, 0x303F), (0x3400, 0x4DBF), (0x4E00, 0x9FFF))
"""What a mapped character may fold onto: ASCII, CJK symbols and punctuation, CJK
ideographs (extension A, the unified block), each still only if NFKC keeps it."""
_MAPPED_RANGES = ((0x3000, 0x303F), (0xFF00, 0xFFEF))
"""Where NFKC maps characters onto stable ones: the ideographic space and numerals,
full-width and half-width forms."""


@functools.cache
def _aligned_table() -> tuple[re.Pattern[str], dict[str, str]]:
    """A pattern finding the characters NFKC maps to one stable character, and their map
    (built on first use: a few thousand normalizations)."""

    def stable(code: int) -> bool:
        c = chr(code)
        return (
            any(lo <= code <= hi for lo, hi in _STABLE_RANGES)
            and not unicodedata.combining(c)
            and unicodedata.normalize("NFKC", c) == c
        )

    def onto(c: str) -> str | None:
        folded = unicodedata.normalize("NFKC", c)
        if len(folded) != 1 or folded == c or unicodedata.combining(c):
            return None
        return folded if stable(ord(folded)) else None

    chars = (chr(code) for lo, hi in _MAPPED_RANGES for code in range(lo, hi + 1))
    table = {c: folded for c in chars if (folded := onto(c)) is not None}
    return re.compile("[" + "".join(re.escape(c) for c in table) + "]"), table


_NEEDS_FOLD = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a\uff66-\uff9f\u3000]")
"""Characters a term can be written in that fold to others (full-width letters and digits,
half-width katakana, the ideographic space): text without them is matched as it is (a
term holds no punctuation, so full-width punctuation needs no folding to be passed)."""


def fold_aligned(text: str) -> str:
    """``text`` with each character that NFKC maps to one other character so mapped
    (full-width letters, digits and punctuation to ASCII): what terms are matched in,
    position for position with ``text``. Case is left: the term patterns ignore it."""
    if text.isascii() or not _NEEDS_FOLD.search(text):
        return text
    mapped, table = _aligned_table()
    # str.translate would look every character up in a dict; only a few need it
    for c in set(mapped.findall(text)):
        text = text.replace(c, table[c])
    return text
