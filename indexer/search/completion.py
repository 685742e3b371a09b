"""Completions of what is being typed in a search box, from the words of page titles.

Built once per commit of the index (the portal keeps one, portal/suggest.py) and
then only bisected: a keystroke never walks the index. Two sorted lists:

- words, as titles write them (lower-cased, NFKC-folded, Chinese segmented by
  jieba like every text): the index holds stems (``villag``), no word to show, so
  the words shown are the titles' own; each is weighed by the pages that hold it
  (the body field's document frequency of its stem: ``village`` counts the pages
  with ``villages`` too), or by the titles that hold it when more;
- whole titles (each counted by the pages that carry it), for a query typed as a
  title begins.

The index's most frequent Chinese terms join the words (a Chinese term is not
stemmed: it is a word as pages write it); its other terms are stems and do not.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable

import tantivy

from srcrawl.indexer.engine import stem
from srcrawl.indexer.text import HAN_RUN, fold
from srcrawl.indexer.tokenizer import Tokenizer

COMPLETIONS_SHOWN = 8
MAX_PREFIX_CHARS = 64
"""Characters of a prefix looked at: the rest is left out (a search box, not a text)."""
FREQUENT_CHINESE_TERMS = 20_000
"""The body field's most frequent terms walked for Chinese words at each build."""
MAX_TITLE_CHARS = 80
"""Titles longer than this are not offered whole (their words still are)."""
_WORD_FIELD = "body"
_CACHED_PREFIXES = 4_096
_LAST_WORD = re.compile(r"[^\W_]+$")
_SPACES = re.compile(r"\s+")
_MAX_HAN_SUFFIX = 8


class _Sorted:
    """Keys in order, each with what is shown and its weight: the entries of a prefix are
    a slice, found by bisection."""

    def __init__(self, weighed: dict[str, tuple[str, int]]) -> None:
        self.keys = sorted(weighed)
        self.shown = [weighed[k][0] for k in self.keys]
        self.weights = [weighed[k][1] for k in self.keys]

    def best(self, prefix: str, limit: int) -> list[tuple[int, str]]:
        """(weight, shown) of the ``limit`` heaviest entries starting with ``prefix``,
        heaviest first, then in key order."""
        lo = bisect_left(self.keys, prefix)
        hi = bisect_left(self.keys, prefix + "\U0010ffff", lo)
        found = heapq.nsmallest(limit, range(lo, hi), key=lambda i: (-self.weights[i], i))
        return [(self.weights[i], self.shown[i]) for i in found]


class Completions:
    """Words and titles to complete a query with; build with :func:`build`."""

    def __init__(self, words: dict[str, int], titles: Counter[str]) -> None:
        self.words = _Sorted({w: (w, n) for w, n in words.items()})
        by_key: dict[str, tuple[str, int]] = {}
        # titles that differ in case or spacing only are one: shown as most pages spell
        # it (met first, most_common), counted for all
        for title, n in titles.most_common():
            shown, total = by_key.get(_key(title), (title, 0))
            by_key[_key(title)] = (shown, total + n)
        self.titles = _Sorted(by_key)
        self._cache: dict[tuple[str, int], list[str]] = {}

    def __len__(self) -> int:
        return len(self.words.keys) + len(self.titles.keys)

    def complete(self, typed: str, limit: int = COMPLETIONS_SHOWN) -> list[str]:
        """Up to ``limit`` queries completing ``typed``: its last word completed (the
        words before it kept as typed), and titles that start as it does. Titles come
        first once more than one word is typed (a title is being typed); each list is
        ranked by the pages that hold the word or carry the title."""
        typed = typed[:MAX_PREFIX_CHARS].lstrip()
        if not typed.strip():
            return []
        found = self._cache.get((typed, limit))
        if found is None:
            if len(self._cache) >= _CACHED_PREFIXES:
                self._cache.clear()
            found = self._cache[typed, limit] = self._complete(typed, limit)
        return found

    def _complete(self, typed: str, limit: int) -> list[str]:
        words = self._word_completions(typed, limit)
        # a space typed last is kept: "vac " is a word ended, not a title's start
        prefix = _SPACES.sub(" ", fold(typed))
        titles = [t for _n, t in self.titles.best(prefix, limit)] if len(typed) > 1 else []
        ordered = titles + words if " " in typed.strip() else words + titles
        out: dict[str, str] = {}
        for completion in ordered:
            key = _key(completion)
            if key != _key(typed) and key not in out:
                out[key] = completion
        return list(out.values())[:limit]

    def _word_completions(self, typed: str, limit: int) -> list[str]:
        m = _LAST_WORD.search(typed)
        if m is None or ":" in typed[: m.start()].rsplit(" ", 1)[-1]:
            return []  # typed ends with a space or a sign, or is an operator's value (site:)
        word = fold(m.group())
        starts = [m.start()]
        if HAN_RUN.fullmatch(word):
            # Chinese is typed without spaces: the last word is a tail of the run, the
            # longest that some word starts with
            run = len(word)
            starts = [m.start() + run - n for n in range(min(run, _MAX_HAN_SUFFIX), 0, -1)]
        for start in starts:
            tail = fold(typed[start:])
            best = self.words.best(tail, limit)
            if best:
                return [typed[:start] + w for _n, w in best]
        return []


def _key(text: str) -> str:
    return _SPACES.sub(" ", fold(text)).strip()


def build(searcher: tantivy.Searcher, titles: Iterable[str], tokenizer: Tokenizer) -> Completions:
    """The completions of ``titles`` (and of the index's frequent Chinese terms), each word
    weighed by the pages of ``searcher`` that hold it."""
    in_titles: Counter[str] = Counter()
    whole: Counter[str] = Counter()
    for title in titles:
        title = _SPACES.sub(" ", title).strip()
        if not title:
            continue
        in_titles.update(set(tokenizer.tokens(title)))
        if len(title) <= MAX_TITLE_CHARS:
            whole[title] += 1
    words: dict[str, int] = {}
    for word, n in in_titles.items():
        if word.isdigit():
            continue  # a number completes nothing anyone types
        words[word] = max(n, searcher.doc_freq(_WORD_FIELD, stem(word)))
    for term, n in searcher.terms_with_prefix(_WORD_FIELD, "", limit=FREQUENT_CHINESE_TERMS):
        if HAN_RUN.fullmatch(term) and n > words.get(term, 0):
            words[term] = n
    return Completions(words, whole)
