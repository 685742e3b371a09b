"""The one tokenizer of documents and queries, and how it loads jieba."""

from __future__ import annotations

import os
import random
import subprocess

import pytest

from srcrawl.defaults import MAX_TERM_CHARS
from srcrawl.indexer.tokenizer import (
    ENV_CACHE_DIR,
    DictionaryError,
    Tokenizer,
    _runs,
    dictionary_id,
    get_tokenizer,
    jieba_cache_dir,
    load_jieba,
    load_stopwords,
    normalize,
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return get_tokenizer(None)


def test_chinese_is_segmented_by_jieba_and_stop_words_dropped(tok: Tokenizer) -> None:
    # jieba's documented segmentations; 我 他 了 于 are stop words
    assert tok.tokens("我来到北京清华大学") == ["来到", "北京", "清华大学"]
    assert tok.tokens("他来到了网易杭研大厦") == ["来到", "网易", "杭研", "大厦"]
    assert tok.tokens("小明硕士毕业于中国科学院计算所") == [
        "小明",
        "硕士",
        "毕业",
        "中国科学院",
        "计算所",
    ]


def test_latin_words_and_digits_are_lower_case_tokens(tok: Tokenizer) -> None:
    assert tok.tokens("The Quick brown FOX, jumped over 2 lazy dogs in 2024!") == [
        "quick",
        "brown",
        "fox",
        "jumped",
        "2",
        "lazy",
        "dogs",
        "2024",
    ]
    assert tok.tokens("don't e-mail foo_bar x.y") == ["don", "e", "mail", "foo", "bar", "x", "y"]


def test_full_width_forms_fold_to_half_width(tok: Tokenizer) -> None:
    assert tok.tokens("ＨＥＬＬＯ　Ｗｏｒｌｄ　１２３") == ["hello", "world", "123"]
    assert tok.tokens("ＨＥＬＬＯ") == tok.tokens("hello")


def test_mixed_scripts_and_emoji(tok: Tokenizer) -> None:
    assert tok.tokens("用Python写搜索引擎😀🚀Привет мир café") == [
        "用",
        "python",
        "写",
        "搜索引擎",
        "привет",
        "мир",
        "café",
    ]
    assert tok.tokens("😀🚀 ✨ —— !!! ...") == []
    assert tok.tokens("") == []


def test_overlong_tokens_and_binary_junk_are_dropped(tok: Tokenizer) -> None:
    junk = bytes(range(256)).decode("latin-1") * 3 + "\x00\ufffd\ud800"
    terms = tok.tokens(junk + " ok " + "a" * (MAX_TERM_CHARS + 1) + " " + "b" * MAX_TERM_CHARS)
    assert "ok" in terms and "b" * MAX_TERM_CHARS in terms
    assert all(0 < len(t) <= MAX_TERM_CHARS for t in terms)
    assert all("\x00" not in t and t.isalnum() for t in terms)


def test_stop_word_lists_are_shipped_and_folded() -> None:
    words = load_stopwords()
    assert {"的", "了", "我们", "the", "and", "of"} <= words
    assert "搜索" not in words and "search" not in words
    assert all(w == w.lower() for w in words)


def test_a_user_dictionary_adds_words(tmp_path) -> None:
    plain = Tokenizer()
    assert plain.tokens("他来到了网易杭研大厦") == ["来到", "网易", "杭研", "大厦"]
    words = tmp_path / "words.txt"
    words.write_text("杭研大厦 100 n\n", encoding="utf-8")
    custom = Tokenizer(str(words))
    assert custom.tokens("他来到了网易杭研大厦") == ["来到", "网易", "杭研大厦"]
    assert custom.dictionary_id == dictionary_id(str(words)) != plain.dictionary_id == ""


def test_an_unreadable_user_dictionary_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(DictionaryError, match="cannot read user dictionary"):
        Tokenizer(str(tmp_path / "missing.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(DictionaryError, match="unusable"):
        Tokenizer(str(bad)).tokens("中文")


def test_jieba_is_loaded_once_per_process() -> None:
    a, b = get_tokenizer(None), get_tokenizer(None)
    assert a is b
    a.tokens("中文")
    first = a._segmenter()
    a.tokens("再来")
    assert a._segmenter() is first


# -- jieba loaded only for Chinese, from a cache of this user's ------------------
PIECES = [
    "我来到北京清华大学",
    "他来到了网易杭研大厦",
    "量子纠缠",
    "的",
    "了",
    "中国科学院计算所",
    "Hello",
    "WORLD",
    "the",
    "of",
    "2024",
    "café",
    "Привет",
    "カタカナ",
    "ひらがな",
    "한국어",
    "ＦＵＬＬ",
    "１２３",
    "⼀⼈⼤",
    "\uf900\uf901",
    "😀",
    "🚀",
    " ",
    "，",
    "。",
    "-",
    "_",
    "'",
    "\t",
    "\n",
    "x.y",
    "foo_bar",
    "a" * (MAX_TERM_CHARS + 1),
    "搜索引擎" * 20,
    "\x00",
    "\ufffd",
]


def _eager_tokens(seg, stop: frozenset[str], text: str) -> list[str]:
    """The tokens as the tokenizer made them before loading jieba lazily: jieba loaded
    up front by jieba itself, every Chinese run cut by it."""
    out = []
    for m in _runs().finditer(normalize(text)):
        words = [m.group(2)] if m.group(2) is not None else seg.cut(m.group(1), HMM=True)
        out += [w for w in words if w not in stop and len(w) <= MAX_TERM_CHARS]
    return out


@pytest.mark.slow
def test_tokens_are_the_same_as_with_jieba_loaded_up_front(tmp_path, monkeypatch) -> None:
    import jieba

    reference = jieba.Tokenizer()
    reference.tmp_dir = str(tmp_path)  # jieba's own load, from its own cache file
    reference.initialize()
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    lazy, stop = Tokenizer(), load_stopwords()
    rng = random.Random(7)
    texts = ["".join(rng.choices(PIECES, k=rng.randint(1, 12))) for _ in range(400)]
    texts += [" ".join(rng.choices(PIECES, k=rng.randint(1, 12))) for _ in range(400)]
    for text in texts:
        assert lazy.tokens(text) == _eager_tokens(reference, stop, text), text
        assert lazy.overlong(text) == [
            w
            for m in _runs().finditer(normalize(text))
            for w in ([m.group(2)] if m.group(2) is not None else reference.cut(m.group(1)))
            if len(w) > MAX_TERM_CHARS
        ]


# Runs in a new interpreter: whether jieba is imported is a property of the process.
WITHOUT_CHINESE = """
import sys
from srcrawl.indexer.tokenizer import get_tokenizer
tok = get_tokenizer(None)
for text in sys.argv[1:]:
    tok.tokens(text), tok.overlong(text)
    tok.warm_up(text)
print("jieba" in sys.modules, tok._jieba is not None)
tok.tokens("⼈")  # a Kangxi radical: folds to 人, a Chinese character
print("jieba" in sys.modules, tok._jieba is not None, "pkg_resources" in sys.modules)
"""


@pytest.mark.slow
def test_text_without_chinese_never_loads_jieba(python, tmp_path) -> None:
    texts = ["Hello WORLD 2024", "café Привет カタカナ 한국어 ＦＵＬＬ１２３", "😀 ... the of", ""]
    env = {**os.environ, ENV_CACHE_DIR: str(tmp_path / "cache")}
    run = subprocess.run(
        [python, "-c", WITHOUT_CHINESE, *texts],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["False False", "True True False"]
    assert run.stderr == ""
    tok = Tokenizer()
    assert not any(tok.needs_segmenter(t) for t in texts)
    assert all(tok.needs_segmenter(t) for t in ("ok ⼈", "\uf900", "人"))


@pytest.mark.slow
def test_the_prefix_dictionary_is_cached_in_the_cache_dir_and_read_back(
    tmp_path, monkeypatch
) -> None:
    import jieba

    cache_dir = tmp_path / "cache"
    monkeypatch.setenv(ENV_CACHE_DIR, str(cache_dir))
    assert jieba_cache_dir() == cache_dir
    first = load_jieba()  # built by jieba from its dictionary, and written
    [cache] = cache_dir.iterdir()
    assert cache.name.startswith(f"jieba-{jieba.__version__}-") and cache.suffix == ".cache"

    def no_build(*_args):
        raise AssertionError("the dictionary was built again: the cache was not read")

    monkeypatch.setattr(jieba.Tokenizer, "gen_pfdict", staticmethod(no_build))
    again = load_jieba()
    assert again.FREQ == first.FREQ and again.total == first.total and again.initialized
    assert again.lcut("他来到了网易杭研大厦") == first.lcut("他来到了网易杭研大厦")
    monkeypatch.undo()

    monkeypatch.setenv(ENV_CACHE_DIR, str(cache_dir))
    cache.write_bytes(b"not marshal")  # a broken cache is built and written anew
    assert load_jieba().FREQ == first.FREQ and cache.stat().st_size > 1000


@pytest.mark.slow
def test_a_cache_dir_that_cannot_be_made_falls_back_to_jiebas_default(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(ENV_CACHE_DIR, str(blocker / "cache"))
    assert jieba_cache_dir() is None
    assert Tokenizer().tokens("我来到北京清华大学") == ["来到", "北京", "清华大学"]


@pytest.mark.slow
def test_a_changed_user_dictionary_is_seen_by_the_next_tokenizer(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    words = tmp_path / "words.txt"
    words.write_text("杭研大厦 100 n\n", encoding="utf-8")
    assert Tokenizer(str(words)).tokens("他来到了网易杭研大厦") == ["来到", "网易", "杭研大厦"]
    words.write_text("网易杭研 100 n\n", encoding="utf-8")
    changed = Tokenizer(str(words))
    assert changed.tokens("他来到了网易杭研大厦") == ["来到", "网易杭研", "大厦"]
    assert Tokenizer().tokens("他来到了网易杭研大厦") == ["来到", "网易", "杭研", "大厦"]
