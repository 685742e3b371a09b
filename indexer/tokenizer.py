"""The one tokenizer of documents and queries [Redis engine §3.2].

Text is folded with Unicode NFKC (full-width letters, digits and punctuation
become half-width; compatibility ideographs become unified ones) and lower
cased. Runs of Chinese characters are segmented by jieba (accurate mode, HMM
for unknown words); runs of other letters and digits (Latin, Cyrillic, kana,
…) are one token each; everything else (punctuation, spaces, emoji, control
characters) separates tokens. Stop words of the shipped Chinese and English
lists and tokens longer than :data:`MAX_TERM_CHARS` are dropped.

The jieba dictionary is loaded once per process, on first use. A user
dictionary (jieba's format: ``word [frequency] [tag]`` per line, UTF-8) named
by ``SRCRAWL_USER_DICT`` adds words; slaves and the search command must see
the same one, which is why its content hash travels with every index task.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import threading
import unicodedata
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from srcrawl.defaults import MAX_TERM_CHARS
from srcrawl.errors import ConfigError

if TYPE_CHECKING:
    import jieba

ENV_USER_DICT = "SRCRAWL_USER_DICT"
"""Environment variable naming a jieba user dictionary."""

STOPWORD_FILES = ("stopwords_zh.txt", "stopwords_en.txt")

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"


@functools.cache
def _runs() -> re.Pattern[str]:
    """Group 1: a run of Chinese characters; group 2: a run of other letters/digits.

    Compiled on first use (tens of milliseconds: the classes are large).
    """
    return re.compile(f"([{_HAN}]+)|([^\\W_{_HAN}]+)")


class DictionaryError(ConfigError):
    """The user dictionary cannot be read or is not in jieba's format."""


def load_stopwords() -> frozenset[str]:
    """The shipped stop words (Chinese and English), folded like any token."""
    words: set[str] = set()
    for name in STOPWORD_FILES:
        text = resources.files("srcrawl.indexer").joinpath(name).read_text("utf-8")
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                words.add(normalize(line))
    return frozenset(words)


def normalize(text: str) -> str:
    """NFKC-folded, lower-cased text: the form tokens and snippets are matched in."""
    return unicodedata.normalize("NFKC", text).lower()


def user_dict_from_env() -> str | None:
    """The user dictionary ``SRCRAWL_USER_DICT`` names, or None."""
    return os.environ.get(ENV_USER_DICT) or None


def dictionary_id(user_dict: str | None) -> str:
    """A short content hash of the user dictionary ('' without one).

    Raises DictionaryError if the file cannot be read.
    """
    if not user_dict:
        return ""
    try:
        data = Path(user_dict).read_bytes()
    except OSError as e:
        raise DictionaryError(f"cannot read user dictionary {user_dict!r}: {e.strerror}") from e
    return hashlib.sha1(data).hexdigest()[:12]


class Tokenizer:
    """Turns text into index terms; documents and queries go through the same one."""

    def __init__(self, user_dict: str | None = None) -> None:
        self.user_dict = user_dict
        self.dictionary_id = dictionary_id(user_dict)
        self.stopwords = load_stopwords()
        self._jieba: jieba.Tokenizer | None = None
        self._lock = threading.Lock()

    def _segmenter(self) -> jieba.Tokenizer:
        """jieba, with its dictionary (and the user's) loaded on first use."""
        if self._jieba is None:
            with self._lock:
                if self._jieba is None:
                    import jieba  # late: commands that never tokenize stay fast

                    jieba.setLogLevel(logging.WARNING)
                    seg = jieba.Tokenizer()
                    seg.initialize()
                    if self.user_dict:
                        try:
                            seg.load_userdict(self.user_dict)
                        except (OSError, ValueError, UnicodeDecodeError) as e:
                            raise DictionaryError(
                                f"user dictionary {self.user_dict!r} is unusable: {e}"
                            ) from e
                    self._jieba = seg
        return self._jieba

    def warm_up(self) -> None:
        """Load the dictionaries now rather than on the first text."""
        self._segmenter()

    def tokens(self, text: str) -> list[str]:
        """The terms of ``text`` in order, stop words and overlong tokens dropped."""
        if not text:
            return []
        cut = self._segmenter().cut
        stop = self.stopwords
        out: list[str] = []
        append = out.append
        for m in _runs().finditer(normalize(text)):
            word = m.group(2)
            if word is not None:
                if len(word) <= MAX_TERM_CHARS and word not in stop:
                    append(word)
                continue
            for word in cut(m.group(1), HMM=True):
                if word not in stop and len(word) <= MAX_TERM_CHARS:
                    append(word)
        return out

    def overlong(self, text: str) -> list[str]:
        """The words of ``text`` that :meth:`tokens` drops for being longer than
        MAX_TERM_CHARS (no page can hold them as terms), in order."""
        out = []
        for m in _runs().finditer(normalize(text)):
            words = [m.group(2)] if m.group(2) is not None else self._segmenter().cut(m.group(1))
            out += [w for w in words if len(w) > MAX_TERM_CHARS]
        return out


_shared: dict[str | None, Tokenizer] = {}
_shared_lock = threading.Lock()


def get_tokenizer(user_dict: str | None = None) -> Tokenizer:
    """The process-wide tokenizer for ``user_dict`` (jieba is loaded once per process)."""
    with _shared_lock:
        tok = _shared.get(user_dict)
        if tok is None:
            tok = _shared[user_dict] = Tokenizer(user_dict)
        return tok
