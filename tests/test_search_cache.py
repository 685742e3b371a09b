"""Search from memory (the portal's term cache) ranks exactly as an exhaustive reference
and as a search reading the store; the cache is dropped when the index changes; the fast
NFKC and term-finding paths of snippets agree with unicodedata and re.IGNORECASE."""

from __future__ import annotations

import random
import re
import sys
import unicodedata

import pytest

from srcrawl.indexer.blocks import records
from srcrawl.indexer.corpus import Corpus
from srcrawl.indexer.merge import merge_index
from srcrawl.indexer.postings import PostingsBatch, term_fingerprint
from srcrawl.indexer.search import (
    BOILERPLATE_WEIGHT,
    FIELD_B,
    FIELD_WEIGHTS,
    Searcher,
    bm25_idf,
)
from srcrawl.indexer.slave import tokenize_document
from srcrawl.indexer.snippets import _HAN, _OTHER_CASES, _fold_table, nfkc, term_pattern
from srcrawl.indexer.term_cache import TermCache
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.portal.search_pool import SearchPool
from srcrawl.sql.store import Page
from srcrawl.urls import fingerprint

K1, B, W = 1.2, 0.75, 0.5


def index(store, pages: list[Page]) -> None:
    """One merge (one postings block) of ``pages``."""
    store.put_pages(pages)
    tok = get_tokenizer(None)
    docs = [tokenize_document(tok, p.fp, p.fetched_at, p.title, p.text) for p in pages]
    merge_index(store, PostingsBatch.of(docs), 1.0)


def twin(page: Page, n: int) -> Page:
    """A copy of ``page`` under another URL: the same postings, so the same scores."""
    url = f"{page.url}/twin-{n}"
    return Page(fp=fingerprint(url), url=url, host=page.host,
                fetched_at=page.fetched_at, title=page.title, text=page.text)  # fmt: skip


@pytest.fixture(scope="module")
def pages() -> list[Page]:
    corpus = Corpus(seed=7, zh_words=3000, en_words=600)
    out = list(corpus.pages(240))
    return out + [twin(out[i], n) for i in (3, 17, 41) for n in range(3)]  # ties


def queries(pages: list[Page], n: int = 6) -> list[str]:
    """Two-word English and Chinese queries from pages (the first from pages with twins),
    one frequent word alone, and one with a word no page has (so: OR)."""
    rng = random.Random(5)
    tok = get_tokenizer(None)
    out: list[str] = []
    for lang in (r"^[a-z]+$", r"^[\u4e00-\u9fff]+$"):
        for i in range(n):
            page = pages[(3, 17)[i]] if i < 2 else rng.choice(pages)
            words = [t for t in dict.fromkeys(tok.tokens(page.text)) if re.match(lang, t)]
            out.append(" ".join(rng.sample(words, 2)))
    common = tok.tokens(pages[0].text)[0]
    return [*out, common, f"{common} zzqxvv"]


def reference(store, query: str, top: int, ranks: dict[int, float]) -> list[tuple[int, float]]:
    """The best ``top`` (fp, score) by the module docstring's formulas, over every posting
    of the index (no cap, no early stop), ties by fp."""
    terms = Searcher(store).query_terms(query)[0]
    n_docs, body, title, anchor = store.index_lengths()
    with store.transaction(read_only=True) as cur:
        cur.execute("SELECT term_id, data FROM postings")
        rows = cur.fetchall()
    lists = {t: [r for tid, data in rows if tid == term_fingerprint(t)
                 for r in records([data]).tolist()] for t in terms}  # fmt: skip
    known = sorted((t for t in terms if lists[t]), key=lambda t: (len(lists[t]), t))
    avg = [total / n_docs if total > 0 else 1.0 for total in (body, title, anchor)]

    def weight(fp, tf, dl, boiler, ttf, tdl, atf, adl) -> float:
        bt, ba = FIELD_B["title"], FIELD_B["anchor"]
        x = FIELD_WEIGHTS["body"] * (tf + BOILERPLATE_WEIGHT * boiler) / ((1 - B) + B / avg[0] * dl)
        x += FIELD_WEIGHTS["title"] * ttf / ((1 - bt) + bt / avg[1] * tdl)
        x += FIELD_WEIGHTS["anchor"] * atf / ((1 - ba) + ba / avg[2] * adl)
        return x * (K1 + 1) / (x + K1)

    parts: dict[int, list[float]] = {}
    for t in known:
        idf = bm25_idf(n_docs, len(lists[t]))
        for r in lists[t]:
            parts.setdefault(r[0], []).append(idf * weight(*r))
    every = {fp: p for fp, p in parts.items() if len(p) == len(terms)}
    chosen = every or parts  # AND, else OR
    scores = {fp: sum(p[1:], p[0]) for fp, p in chosen.items()}  # in the terms' order
    if ranks:
        mean = store.rank_mean()
        scores = {fp: s * (1 + W * ranks[fp] / (ranks[fp] + mean)) if ranks.get(fp, 0) > 0
                  else s for fp, s in scores.items()}  # fmt: skip
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


def ranked(result) -> list[tuple[int, float]]:
    return [(h.fp, h.score) for h in result.hits]


def test_search_from_memory_ranks_as_the_exhaustive_reference(store, pages) -> None:
    for part in range(3):  # three merges: three blocks
        index(store, pages[part::3])
    cache = TermCache()
    rng = random.Random(2)
    for ranks in ({}, {p.fp: rng.random() for p in pages[::2]}):
        store.replace_ranks(ranks.items())
        memory = Searcher(store, cap=10**6, cache=cache)
        from_store = Searcher(store, cap=10**6)
        for q in queries(pages):
            want = reference(store, q, 20, ranks)
            assert want, q
            for top, offset in ((10, 0), (20, 10)):  # page 1, page 2
                got = memory.search(q, top=top, offset=offset)
                assert ranked(got) == want[offset:top], (q, top, offset)
                assert ranked(from_store.search(q, top=top, offset=offset)) == want[offset:top]
            assert got.ranked == bool(ranks)
    assert len(cache) > 10  # the terms were kept, and found again


def test_capped_terms_rank_the_same_from_memory_as_from_the_store(store, pages) -> None:
    index(store, pages)
    cache = TermCache()
    for q in queries(pages):
        for top, offset in ((10, 0), (30, 20)):
            a = Searcher(store, cap=25, cache=cache).search(q, top=top, offset=offset)
            b = Searcher(store, cap=25).search(q, top=top, offset=offset)
            assert ranked(a) == ranked(b) and (a.mode, a.matches) == (b.mode, b.matches)
            assert a.approximate == b.approximate
            assert [h.snippet for h in a.hits] == [h.snippet for h in b.hits]
    assert any(Searcher(store, cap=25, cache=cache).search(q).approximate for q in queries(pages))


def test_the_portal_finds_a_page_indexed_after_it_started(store, db_url, pages) -> None:
    index(store, pages[:100])
    pool = SearchPool(db_url, threads=1)
    try:
        common = queries(pages)[-2]
        before = pool.search(common)
        assert pool.search("qyzzyx").result.mode == "none"
        fresh = Page(fp=12345, url="http://127.0.0.1:9/fresh", host="127.0.0.1:9",
                     fetched_at=2.0, title="qyzzyx", text=f"qyzzyx {common} qyzzyx")  # fmt: skip
        index(store, [fresh])
        after = pool.search("qyzzyx")
        assert [h.url for h in after.result.hits] == ["http://127.0.0.1:9/fresh"]
        again = pool.search(common)
        assert again.result.matches == before.result.matches + 1
        # and as a search of its own ranks it, page 2 included
        own = Searcher(store).search(common, top=20, offset=10)
        assert ranked(pool.search(common, page=2).result) == ranked(own)
    finally:
        pool.close()


def test_nfkc_of_common_text_is_unicodedata_s() -> None:
    foldable, _mapped, _table = _fold_table()
    chars = [chr(c) for c in range(sys.maxunicode + 1)
             if not 0xD800 <= c <= 0xDFFF and foldable.fullmatch(chr(c))]  # fmt: skip
    assert len(chars) > 27_000 and "，" in chars and "ｶ" not in chars and "\u3099" not in chars
    for c in chars:
        assert nfkc(c) == unicodedata.normalize("NFKC", c), hex(ord(c))
    rng = random.Random(1)
    tricky = ["ｶﾞ", "e\u0301", "ﬁ", "①", "\u212a", "Å", "\u3000", "ı"]
    for _ in range(2000):
        text = "".join(rng.choice(chars if rng.random() < 0.97 else tricky) for _ in range(40))
        assert nfkc(text) == unicodedata.normalize("NFKC", text), text


def test_terms_are_found_as_re_ignorecase_finds_them() -> None:
    # every character re.IGNORECASE takes for an ASCII one, over all of Unicode
    any_ascii = re.compile(r"[\x21-\x7e]", re.IGNORECASE)
    others = [chr(c) for c in range(128, sys.maxunicode + 1) if any_ascii.fullmatch(chr(c))]
    for c in map(chr, range(0x21, 0x7F)):
        takes = {o for o in others if re.fullmatch(re.escape(c), o, re.IGNORECASE)}
        assert takes == set(_OTHER_CASES.get(c.lower(), "")), c
    # and none for a Chinese one but itself
    han = re.compile(f"[{_HAN}]", re.IGNORECASE)
    assert all(han.fullmatch(chr(c)) is None for c in range(0x3000) if not 0xD800 <= c <= 0xDFFF)
    for c in (0x4E00, 0x6C49, 0x9FFF):
        assert [x for x in range(0x3400, 0xA000) if re.fullmatch(chr(c), chr(x), re.I)] == [c]
    rng = random.Random(4)
    alphabet = "abkisKIS \u212aſıİ搜索引擎éÉ-_.x1"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(30))
        terms = ["".join(rng.choice(alphabet.strip()) for _ in range(rng.randint(1, 3)))
                 for _ in range(rng.randint(1, 3))]  # fmt: skip
        ordered = sorted(set(terms), key=len, reverse=True)
        plain = re.compile("|".join(re.escape(t) for t in ordered), re.IGNORECASE)
        fast = term_pattern(terms)
        assert fast is not None
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in plain.finditer(text)]
