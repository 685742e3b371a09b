"""The one tokenizer of documents and queries (pure logic)."""

from __future__ import annotations

import pytest

from srcrawl.defaults import MAX_TERM_CHARS
from srcrawl.indexer.tokenizer import (
    DictionaryError,
    Tokenizer,
    dictionary_id,
    get_tokenizer,
    load_stopwords,
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return get_tokenizer(None)


def test_chinese_is_segmented_by_jieba_and_stop_words_dropped(tok: Tokenizer) -> None:
    # jieba's documented segmentations; 我 他 了 于 are stop words
    assert tok.tokens("我来到北京清华大学") == ["来到", "北京", "清华大学"]
    assert tok.tokens("他来到了网易杭研大厦") == ["来到", "网易", "杭研", "大厦"]
    assert tok.tokens("小明硕士毕业于中国科学院计算所") == [
        "小明", "硕士", "毕业", "中国科学院", "计算所",
    ]  # fmt: skip


def test_latin_words_and_digits_are_lower_case_tokens(tok: Tokenizer) -> None:
    assert tok.tokens("The Quick brown FOX, jumped over 2 lazy dogs in 2024!") == [
        "quick", "brown", "fox", "jumped", "2", "lazy", "dogs", "2024",
    ]  # fmt: skip
    assert tok.tokens("don't e-mail foo_bar x.y") == ["don", "e", "mail", "foo", "bar", "x", "y"]


def test_full_width_forms_fold_to_half_width(tok: Tokenizer) -> None:
    assert tok.tokens("ＨＥＬＬＯ　Ｗｏｒｌｄ　１２３") == ["hello", "world", "123"]
    assert tok.tokens("ＨＥＬＬＯ") == tok.tokens("hello")


def test_mixed_scripts_and_emoji(tok: Tokenizer) -> None:
    assert tok.tokens("用Python写搜索引擎😀🚀Привет мир café") == [
        "用", "python", "写", "搜索引擎", "привет", "мир", "café",
    ]  # fmt: skip
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
