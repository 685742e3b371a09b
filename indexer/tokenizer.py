"""The one tokenizer of documents and queries [Redis engine §3.2].

Text is folded with Unicode NFKC (full-width letters, digits and punctuation
become half-width; compatibility ideographs become unified ones) and lower
cased. Runs of Chinese characters are segmented by jieba (accurate mode, HMM
for unknown words); runs of other letters and digits (Latin, Cyrillic, kana,
…) are one token each; everything else (punctuation, spaces, emoji, control
characters) separates tokens. Stop words of the shipped Chinese and English
lists and tokens longer than :data:`MAX_TERM_CHARS` are dropped.

jieba (its import and its prefix dictionary, most of a search command's
start-up) is loaded once per process, and only when a text holds a run of
Chinese characters: text without one never loads it. The prefix dictionary is
kept by jieba as a marshal cache file, which :func:`jieba_cache_dir` puts in a
directory of this user rather than the shared temporary directory. A user
dictionary (jieba's format: ``word [frequency] [tag]`` per line, UTF-8) named
by ``SRCRAWL_USER_DICT`` adds words; slaves and the search command must see
the same one, which is why its content hash travels with every index task.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import marshal
import os
import re
import sys
import threading
import unicodedata
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from srcrawl.defaults import MAX_TERM_CHARS
from srcrawl.errors import ConfigError

if TYPE_CHECKING:
    import jieba

ENV_USER_DICT = "SRCRAWL_USER_DICT"
"""Environment variable naming a jieba user dictionary."""

ENV_CACHE_DIR = "SRCRAWL_CACHE_DIR"
"""Environment variable naming the directory of srcrawl's caches (jieba's prefix dictionary)."""

STOPWORD_FILES = ("stopwords_zh.txt", "stopwords_en.txt")

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_HAN_ONLY_RE = re.compile(f"^[{_HAN}]+$")


@functools.cache
def _runs() -> re.Pattern[str]:
    """Group 1: a run of Chinese characters; group 2: a run of other letters/digits.

    Compiled on first use (tens of milliseconds: the classes are large).
    """
    return re.compile(f"([{_HAN}]+)|([^\\W_{_HAN}]+)")


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


def jieba_cache_dir() -> Path | None:
    """The directory jieba keeps its prefix-dictionary cache in: ``SRCRAWL_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/srcrawl``, else ``~/.cache/srcrawl``; None (jieba's default,
    the temporary directory) if it cannot be created or written.

    A directory of this user's, not the shared temporary one: jieba loads whatever
    cache file it finds there, and a file another user left cannot be replaced.
    """
    named = os.environ.get(ENV_CACHE_DIR)
    if named:
        where = Path(named)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = Path(base) / "srcrawl"
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return where if os.access(where, os.W_OK | os.X_OK) else None


def _import_jieba() -> ModuleType:
    """``import jieba``, without its import of pkg_resources when nothing has imported that.

    jieba reads its packaged files through pkg_resources if it can be imported, and
    by path (its own fallback) if not; pkg_resources alone costs about as much to
    import as jieba does, and a search command has no other use for it.
    """
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


def _cache_name(jieba_module: ModuleType) -> str:
    """The prefix-dictionary cache file of this jieba and its dictionary.

    jieba trusts a cache of its default dictionary without comparing dates, so the
    name carries the version and the dictionary file's size and time: an upgrade of
    jieba gets a cache of its own.
    """
    dict_txt = Path(jieba_module.__file__).with_name(jieba_module.DEFAULT_DICT_NAME)
    try:
        st = dict_txt.stat()
        stamp = f"{st.st_size}-{st.st_mtime_ns}"
    except OSError:
        stamp = "0"
    return f"jieba-{jieba_module.__version__}-{stamp}.cache"


def load_jieba() -> jieba.Tokenizer:
    """A new jieba tokenizer with its default dictionary loaded, from the marshal cache
    jieba keeps in :func:`jieba_cache_dir` (jieba builds and writes it the first time)."""
    jieba = _import_jieba()
    jieba.setLogLevel(logging.WARNING)
    seg = jieba.Tokenizer()
    where = jieba_cache_dir()
    if where is not None:
        seg.tmp_dir, seg.cache_file = str(where), _cache_name(jieba)
        if _read_cache(seg, where / seg.cache_file):
            return seg
    seg.initialize()  # jieba reads its cache, or builds the dictionary and writes the cache
    return seg


def _read_cache(seg: jieba.Tokenizer, path: Path) -> bool:
    """Load jieba's cache file into ``seg`` as its ``initialize`` would; False if there is
    none or it is unreadable (jieba then builds it anew).

    The file is read whole and then unmarshalled: jieba's ``marshal.load`` from the
    open file takes three times as long, reading it in small pieces.
    """
    try:
        freq, total = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return False
    if not isinstance(freq, dict) or not isinstance(total, int):
        return False
    seg.FREQ, seg.total, seg.initialized = freq, total, True
    return True


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
                    seg = load_jieba()
                    if self.user_dict:
                        # read afresh each time (never cached), so an edit is always seen
                        try:
                            seg.load_userdict(self.user_dict)
                        except (OSError, ValueError, UnicodeDecodeError) as e:
                            raise DictionaryError(
                                f"user dictionary {self.user_dict!r} is unusable: {e}"
                            ) from e
                    self._jieba = seg
        return self._jieba

    def needs_segmenter(self, text: str) -> bool:
        """Whether tokenizing ``text`` loads jieba: it holds Chinese once folded (a
        Kangxi radical, say, folds to a Chinese character)."""
        return any(m.group(1) is not None for m in _runs().finditer(normalize(text)))

    def warm_up(self, text: str | None = None) -> None:
        """Load jieba and the dictionaries now rather than on the first Chinese text (a
        server at start, a slave before its first task); given ``text``, only if
        tokenizing it will need them."""
        if text is None or self.needs_segmenter(text):
            self._segmenter()

    def tokens(self, text: str) -> list[str]:
        """The terms of ``text`` in order, stop words and overlong tokens dropped."""
        if not text:
            return []
        cut = None  # jieba, fetched at the first Chinese run: other text never loads it
        stop = self.stopwords
        out: list[str] = []
        append = out.append
        for m in _runs().finditer(normalize(text)):
            word = m.group(2)
            if word is not None:
                if len(word) <= MAX_TERM_CHARS and word not in stop:
                    append(word)
                continue
            if cut is None:
                cut = self._segmenter().cut
            for word in cut(m.group(1), HMM=True):
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
        if not _HAN_ONLY_RE.match(word) or len(word) < 3:
            return []
        parts = self._segmenter().cut_for_search(word, HMM=True)
        return [p for p in dict.fromkeys(parts) if p != word and p not in self.stopwords]

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
