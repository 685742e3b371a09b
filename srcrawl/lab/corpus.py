"""Synthetic Chinese and English pages for the index and search benchmarks.

Chinese words are drawn from jieba's own dictionary with its frequencies (so
the text has a natural Zipf-like skew, and jieba must segment it: words are
written without spaces); English-like words are made of syllables with Zipf
weights. A page is a mix of Chinese and English sentences, about 2 KB of
text. The same seed and page number always give the same page.
"""

from __future__ import annotations

import importlib.util
import itertools
import random
from collections.abc import Iterator
from pathlib import Path

from srcrawl.core.urls import fingerprint
from srcrawl.sql.pages import Page

_CJK = range(0x4E00, 0xA000)
"""The CJK unified block: the corpus's words are the dictionary's made of its characters
(the common ones), none of the extensions indexer/text.py's HAN holds too."""
_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def _chinese_vocabulary(size: int) -> tuple[list[str], list[float]]:
    """The ``size`` most frequent all-Chinese words of jieba's dictionary, and cum. weights."""
    words: list[tuple[int, str]] = []
    text = _jieba_dictionary().read_text("utf-8")
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) >= 2 and 1 <= len(parts[0]) <= 4 and all(ord(c) in _CJK for c in parts[0]):
            words.append((int(parts[1]), parts[0]))
    words.sort(reverse=True)
    words = words[:size]
    return [w for _, w in words], list(itertools.accumulate(float(f) for f, _ in words))


def _jieba_dictionary() -> Path:
    """The dictionary file of the jieba package, found without importing jieba (whose
    import imports pkg_resources, deprecated and slow to load)."""
    spec = importlib.util.find_spec("jieba")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the jieba package (its dictionary makes the pages) is missing")
    return Path(next(iter(spec.submodule_search_locations))) / "dict.txt"


def _english_vocabulary(size: int, seed: int) -> tuple[list[str], list[float]]:
    rng = random.Random(f"en-{seed}")
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < size:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words, list(itertools.accumulate(1.0 / r for r in range(1, size + 1)))


class Corpus:
    """Deterministic pages: ``page(i)`` is the same for the same seed."""

    def __init__(self, seed: int = 1, zh_words: int = 40_000, en_words: int = 8_000) -> None:
        self.seed = seed
        self.zh, self.zh_cum = _chinese_vocabulary(zh_words)
        self.en, self.en_cum = _english_vocabulary(en_words, seed)

    def _zh(self, rng: random.Random, k: int) -> str:
        return "".join(rng.choices(self.zh, cum_weights=self.zh_cum, k=k))

    def _en(self, rng: random.Random, k: int) -> str:
        return " ".join(rng.choices(self.en, cum_weights=self.en_cum, k=k))

    def page(self, i: int) -> Page:
        rng = random.Random(f"{self.seed}:{i}")
        sentences = []
        for _ in range(rng.randint(12, 40)):
            k = rng.randint(6, 20)
            if rng.random() < 0.7:
                # Chinese, now and then with an English word inside
                s = self._zh(rng, k)
                if rng.random() < 0.3:
                    cut = rng.randrange(len(s))
                    s = f"{s[:cut]} {self._en(rng, 1)} {s[cut:]}"
                sentences.append(s + rng.choice("。，；！？"))
            else:
                sentences.append(self._en(rng, k).capitalize() + rng.choice(".,;!?"))
        paragraphs = []
        while sentences:
            n = rng.randint(3, 8)
            paragraphs.append("".join(sentences[:n]))
            sentences = sentences[n:]
        url = f"http://127.0.0.1:8000/bench/{self.seed}/{i}"
        return Page(
            fp=fingerprint(url),
            url=url,
            host="127.0.0.1:8000",
            depth=1,
            status=200,
            content_type="text/html; charset=utf-8",
            fetched_at=1_700_000_000.0 + i,
            fetch_ms=5,
            title=f"{self._zh(rng, rng.randint(2, 4))} {self._en(rng, 1)}",
            text="\n".join(paragraphs),
        )

    def pages(self, n: int, start: int = 0) -> Iterator[Page]:
        for i in range(start, start + n):
            yield self.page(i)
