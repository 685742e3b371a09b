"""The one tokenizer of documents and queries [Redis engine §3.2].

Text is folded with Unicode NFKC (full-width letters, digits and punctuation
become half-width; compatibility ideographs become unified ones) and lower
cased. Runs of Chinese characters are segmented by jieba (accurate mode, HMM
for unknown words); runs of other letters and digits (Latin, Cyrillic, kana,
…) are one token each; everything else (punctuation, spaces, emoji, control
characters) separates tokens. Stop words of the shipped Chinese and English
lists and tokens longer than :data:`MAX_TERM_CHARS` are dropped.

jieba runs as jieba-rs (the ``rjieba`` package): jieba's dictionary, DAG and
HMM in Rust, which segments as the Python jieba does (tests/test_tokenizer.py
compares them) about twelve times as fast; segmenting is most of the index
phase's CPU. It is loaded once per process, and only when a text holds a run of
Chinese characters: text without one never loads it. A user dictionary
(jieba's format: ``word [frequency] [tag]`` per line, UTF-8) named by
``SRCRAWL_USER_DICT`` adds words; slaves and the search command must see the
same one, which is why its content hash travels with every index task.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import threading
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Protocol

from srcrawl.core.defaults import MAX_TERM_CHARS
from srcrawl.core.errors import ConfigError
from srcrawl.indexer.text import HAN, HAN_RUN, OTHER_WORD_CHAR, fold

ENV_USER_DICT = "SRCRAWL_USER_DICT"
"""Environment variable naming a jieba user dictionary."""

STOPWORD_FILES = ("stopwords_zh.txt", "stopwords_en.txt")


@functools.cache
def _runs() -> re.Pattern[str]:
    """Group 1: a run of Chinese characters; group 2: a run of other letters/digits.

    Compiled on first use (tens of milliseconds: the classes are large).
    """
    return re.compile(f"([{HAN}]+)|({OTHER_WORD_CHAR}+)")


@functools.cache
def _other_words() -> re.Pattern[str]:
    """A run of letters and digits not Chinese: the words of a text without Chinese."""
    return re.compile(f"{OTHER_WORD_CHAR}+")


_IDENTIFIER = re.compile(r"(?<![\w.])[a-z0-9]+(?:[._][a-z0-9]+)+(?![\w]|\.\w)")
"""``pg_dump``, ``pg_hba.conf``, ``os.path.join``: letters and digits joined by ``_`` or
``.`` (in folded text). Indexed whole besides their parts."""


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
                words.add(fold(line))
    return frozenset(words)


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


_USER_WORD = re.compile(r"^(.+?)( [0-9]+)?( [a-z]+)?$")
"""A user dictionary line as jieba's ``load_userdict`` reads it: word, frequency, tag."""


def load_segmenter(user_dict: str | None = None) -> Segmenter:
    """jieba's segmenter with its default dictionary, and the words of ``user_dict`` (read
    as jieba's ``load_userdict`` reads it) added to a copy of its own.

    Raises DictionaryError for a file that cannot be read or is not UTF-8.
    """
    import rjieba  # jieba's segmentation (its dictionary, DAG and HMM) in Rust

    if not user_dict:
        return rjieba  # the module's own instance, loaded by its import
    seg = rjieba.Jieba()
    try:
        lines = Path(user_dict).read_text("utf-8").removeprefix("\ufeff").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DictionaryError(f"user dictionary {user_dict!r} is unusable: {e}") from e
    for line in lines:
        m = _USER_WORD.match(line.strip())
        if m:
            word, freq, tag = m.groups()
            seg.add_word(word, int(freq) if freq else None, tag.strip() if tag else None)
    return seg


def python_jieba() -> ModuleType:
    """The Python jieba (the reference of tests/test_tokenizer.py, the raw baseline of
    ``bench index``), imported without its import of pkg_resources when nothing has
    imported that: jieba then reads its files by path (its own fallback), and
    pkg_resources, deprecated, costs as much to import as jieba."""
    if "jieba" in sys.modules or "pkg_resources" in sys.modules:
        import jieba

        return jieba
    sys.modules["pkg_resources"] = None  # type: ignore[assignment]  # "not installed"
    try:
        import jieba
    finally:
        if sys.modules.get("pkg_resources", 0) is None:
            del sys.modules["pkg_resources"]
    return jieba


class Segmenter(Protocol):
    """What the tokenizer uses of jieba: its accurate and search modes."""

    def cut(self, text: str, hmm: bool = True) -> list[str]: ...

    def cut_for_search(self, text: str, hmm: bool = True) -> list[str]: ...


class Tokenizer:
    """Turns text into index terms; documents and queries go through the same one."""

    def __init__(self, user_dict: str | None = None) -> None:
        self.user_dict = user_dict
        self.dictionary_id = dictionary_id(user_dict)
        self.stopwords = load_stopwords()
        self._jieba: Segmenter | None = None
        self._lock = threading.Lock()

    def _segmenter(self) -> Segmenter:
        """jieba, with its dictionary (and the user's) loaded on first use."""
        if self._jieba is None:
            with self._lock:
                if self._jieba is None:
                    self._jieba = load_segmenter(self.user_dict)
        return self._jieba

    def needs_segmenter(self, text: str) -> bool:
        """Whether tokenizing ``text`` loads jieba: it holds Chinese once folded (a
        Kangxi radical, say, folds to a Chinese character)."""
        return any(m.group(1) is not None for m in _runs().finditer(fold(text)))

    def warm_up(self, text: str | None = None) -> None:
        """Load jieba and the dictionaries now rather than on the first Chinese text (a
        server at start, a slave before its first task); given ``text``, only if
        tokenizing it will need them. The patterns that split a text into its runs are
        compiled now in any case (milliseconds: their classes are large)."""
        _runs()
        _other_words()
        if text is None or self.needs_segmenter(text):
            self._segmenter()

    def tokens(self, text: str) -> list[str]:
        """The terms of ``text`` in order, stop words and overlong tokens dropped."""
        if not text:
            return []
        folded = fold(text)
        stop = self.stopwords
        if HAN_RUN.search(folded) is None:  # no Chinese: one findall, no loop of matches
            out = [w for w in _other_words().findall(folded) if w not in stop]
            if out and max(map(len, out)) > MAX_TERM_CHARS:
                out = [w for w in out if len(w) <= MAX_TERM_CHARS]
            return out
        cut = self._segmenter().cut  # jieba: loaded only for a text with Chinese
        out = []
        append = out.append
        for han, word in _runs().findall(folded):
            if word:
                if len(word) <= MAX_TERM_CHARS and word not in stop:
                    append(word)
                continue
            for word in cut(han, True):
                if word not in stop and len(word) <= MAX_TERM_CHARS:
                    append(word)
        return out

    def identifiers(self, text: str) -> list[str]:
        """The identifiers of ``text`` (see _IDENTIFIER) with a letter in them, whole, in
        order: :meth:`tokens` gives only their parts. (ASCII identifiers: the text is
        lower-cased, not NFKC-folded, which would cost as much as the rest of a page's
        tokenizing but Chinese.)"""
        return [
            m.group(0)
            for m in _IDENTIFIER.finditer(text.lower())
            if len(m.group(0)) <= MAX_TERM_CHARS and not m.group(0).replace(".", "").isdigit()
        ]

    def search_parts(self, word: str) -> list[str]:
        """The shorter words jieba's search mode finds inside a Chinese ``word``
        (``中华人民共和国``: ``中华``, ``人民``, ``共和国``, …), stop words left out."""
        if len(word) < 3 or not HAN_RUN.fullmatch(word):
            return []
        parts = self._segmenter().cut_for_search(word, True)
        return [p for p in dict.fromkeys(parts) if p != word and p not in self.stopwords]

    def overlong(self, text: str) -> list[str]:
        """The words of ``text`` that :meth:`tokens` drops for being longer than
        MAX_TERM_CHARS (no page can hold them as terms), in order."""
        out = []
        for m in _runs().finditer(fold(text)):
            words = (
                [m.group(2)] if m.group(2) is not None else self._segmenter().cut(m.group(1), True)
            )
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
