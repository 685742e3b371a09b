"""The one tokenizer of documents and queries, its jieba segments, and when it loads jieba."""

from __future__ import annotations

import os
import random
import subprocess

import pytest

from srcrawl.core.defaults import MAX_TERM_CHARS
from srcrawl.indexer.text import fold
from srcrawl.indexer.tokenizer import (
    DictionaryError,
    Tokenizer,
    _runs,
    dictionary_id,
    get_tokenizer,
    load_stopwords,
    python_jieba,
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


def _jieba_tokens(seg, stop: frozenset[str], text: str) -> list[str]:
    """The tokens as the Python jieba makes them: every Chinese run cut by it."""
    out = []
    for m in _runs().finditer(fold(text)):
        words = [m.group(2)] if m.group(2) is not None else seg.lcut(m.group(1), HMM=True)
        out += [w for w in words if w not in stop and len(w) <= MAX_TERM_CHARS]
    return out


@pytest.mark.slow
def test_tokens_are_the_python_jiebas(tmp_path) -> None:
    """jieba-rs segments as jieba does: the tokenizer's tokens, search parts and overlong
    words against the Python jieba's, on mixed pieces, generated pages of jieba's own
    dictionary words, and with a user dictionary loaded in both."""
    from srcrawl.lab.corpus import Corpus

    reference = python_jieba().Tokenizer()
    reference.tmp_dir = str(tmp_path)  # jieba's own load, from its own cache file
    reference.initialize()
    ours, stop = Tokenizer(), load_stopwords()
    rng = random.Random(7)
    texts = ["".join(rng.choices(PIECES, k=rng.randint(1, 12))) for _ in range(400)]
    texts += [" ".join(rng.choices(PIECES, k=rng.randint(1, 12))) for _ in range(400)]
    texts += [f"{p.title} {p.text}" for p in Corpus(seed=11, zh_words=20_000).pages(150)]
    for text in texts:
        assert ours.tokens(text) == _jieba_tokens(reference, stop, text), text
        assert ours.overlong(text) == [
            w
            for m in _runs().finditer(fold(text))
            for w in ([m.group(2)] if m.group(2) is not None else reference.lcut(m.group(1)))
            if len(w) > MAX_TERM_CHARS
        ]
    for word in {t for text in texts[-150:] for t in ours.tokens(text) if len(t) >= 3}:
        want = [p for p in dict.fromkeys(reference.lcut_for_search(word)) if p != word]
        assert ours.search_parts(word) == [p for p in want if p not in stop], word

    user = tmp_path / "user.txt"
    user.write_text("\ufeff江大桥\n通车仪式 20000 n\n杭研大厦 5\n", "utf-8")
    with_user = Tokenizer(str(user))
    reference.load_userdict(str(user))
    for text in ["江州市长江大桥参加了长江大桥的通车仪式", "他来到了网易杭研大厦", *texts[-20:]]:
        assert with_user.tokens(text) == _jieba_tokens(reference, stop, text), text
    assert "通车仪式" in with_user.tokens("参加了通车仪式")
    assert "通车仪式" not in ours.tokens("参加了通车仪式")


# Runs in a new interpreter: whether jieba is imported is a property of the process.
WITHOUT_CHINESE = """
import sys
from srcrawl.indexer.tokenizer import get_tokenizer
tok = get_tokenizer(None)
for text in sys.argv[1:]:
    tok.tokens(text), tok.overlong(text)
    tok.warm_up(text)
print("rjieba" in sys.modules, tok._jieba is not None)
tok.tokens("⼈")  # a Kangxi radical: folds to 人, a Chinese character
print("rjieba" in sys.modules, tok._jieba is not None, "jieba" in sys.modules)
"""


@pytest.mark.slow
def test_text_without_chinese_never_loads_jieba(python, tmp_path) -> None:
    texts = ["Hello WORLD 2024", "café Привет カタカナ 한국어 ＦＵＬＬ１２３", "😀 ... the of", ""]
    env = dict(os.environ)
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
