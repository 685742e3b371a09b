"""Snippets: a window of page text around the query terms, the terms marked."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from srcrawl.defaults import DEFAULT_SNIPPET_CHARS

MARK_OPEN, MARK_CLOSE = "«", "»"
"""How a query term is marked in a snippet."""

_SCAN_CHARS = 200_000  # text searched for the terms; a term found later is not shown
_MAX_MATCHES = 64
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_HAN_ONLY = re.compile(f"^[{_HAN}]+$")
# a letter or digit that is not Chinese: what may not touch a non-Chinese term
_WORD_CHAR = re.compile(f"[^\\W_{_HAN}]")


def term_pattern(terms: Sequence[str]) -> re.Pattern[str] | None:
    """A case-insensitive pattern finding the terms anywhere (None without terms).

    Kept to plain alternatives (the per-query pattern must compile fast);
    :func:`find_terms` then keeps only whole-token matches of non-Chinese terms.
    """
    alternatives = [re.escape(t) for t in sorted(set(terms), key=len, reverse=True)]
    return re.compile("|".join(alternatives), re.IGNORECASE) if alternatives else None


def find_terms(text: str, terms: Sequence[str], limit: int = _MAX_MATCHES) -> list[re.Match[str]]:
    """Occurrences of the terms in ``text``, in order: Chinese terms anywhere, other
    terms only as whole tokens (``engine`` is not found inside ``engineer``)."""
    pattern = term_pattern(terms)
    if pattern is None:
        return []
    found: list[re.Match[str]] = []
    for m in pattern.finditer(text):
        if not _HAN_ONLY.match(m.group(0)):
            start, end = m.start(), m.end()
            if (start > 0 and _WORD_CHAR.match(text, start - 1)) or (
                end < len(text) and _WORD_CHAR.match(text, end)
            ):
                continue
        found.append(m)
        if len(found) >= limit:
            break
    return found


def make_snippet(text: str, terms: Sequence[str], width: int = DEFAULT_SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` holding as many distinct terms as it can.

    Whitespace is collapsed and the text NFKC-folded; each occurrence of a
    term inside the window is wrapped in « ». Without any occurrence, the
    start of the text.
    """
    body = " ".join(unicodedata.normalize("NFKC", text[:_SCAN_CHARS]).split())
    matches = find_terms(body, terms)
    if not matches:
        return body[:width] + ("…" if len(body) > width else "")
    best_start, best_count = 0, -1
    for i, m in enumerate(matches):
        start = max(0, m.start() - width // 4)
        end = start + width
        found = {x.group(0).lower() for x in matches[i:] if x.end() <= end}
        found.update(x.group(0).lower() for x in matches[:i] if x.start() >= start)
        if len(found) > best_count:
            best_start, best_count = start, len(found)
    start, end = best_start, min(len(body), best_start + width)
    parts = ["…"] if start > 0 else []
    pos = start
    for m in matches:
        if m.start() >= start and m.end() <= end:
            parts += [body[pos : m.start()], MARK_OPEN, m.group(0), MARK_CLOSE]
            pos = m.end()
    parts.append(body[pos:end])
    if end < len(body):
        parts.append("…")
    return "".join(parts)
