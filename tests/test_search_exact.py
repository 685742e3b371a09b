"""Search ranks exactly: the PageRank prior and the duplicates' collapse over a small pool
give the ranking of the whole match set, page 2 included; the portal sees new commits;
the in-place folding and term-finding paths of snippets agree with unicodedata and
re.IGNORECASE."""

from __future__ import annotations

import bisect
import collections
import random
import re
import sys
import time
import unicodedata
from dataclasses import replace

import pytest
import tantivy
from tantivy_index import index_in_process

from srcrawl.core.urls import fingerprint
from srcrawl.indexer.engine import IndexReader, stem
from srcrawl.indexer.search import Searcher, collect, query
from srcrawl.indexer.search import terms as terms_module
from srcrawl.indexer.search.snippets import (
    _best_window,
    collapsed,
    page_snippet,
    snippet_terms,
    stored_snippet,
)
from srcrawl.indexer.search.terms import (
    _OTHER_CASES,
    char_spans,
    find_han,
    find_terms,
    find_words,
    find_words_utf8,
    term_pattern,
    words_starting,
)
from srcrawl.indexer.search.weights import DEFAULT_WEIGHTS
from srcrawl.indexer.text import HAN, fold_aligned
from srcrawl.indexer.tokenizer import get_tokenizer
from srcrawl.lab.corpus import Corpus
from srcrawl.portal.search_pool import PastLastPage, SearchPool
from srcrawl.sql.pages import Page

pytestmark = pytest.mark.slow  # every test here runs for more than a second


def index(store, index_dir, pages: list[Page]) -> None:
    """One commit of ``pages``."""
    store.put_pages(pages)
    index_in_process(store, index_dir, [p.fp for p in pages])


def twin(page: Page, n: int) -> Page:
    """A copy of ``page`` under another URL: the same postings, so the same scores."""
    url = f"{page.url}/twin-{n}"
    return Page(
        fp=fingerprint(url),
        url=url,
        host=page.host,
        fetched_at=page.fetched_at,
        title=page.title,
        text=page.text,
    )


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


def ranked(result) -> list[tuple[int, float, int]]:
    return [(h.fp, h.score, h.similar) for h in result.hits]


def test_a_small_pool_ranks_as_the_whole_match_set(store, pages, tmp_path) -> None:
    for part in range(3):  # three commits: three segments
        index(store, tmp_path, pages[part::3])
    rng = random.Random(2)
    # every match rescored and collapsed, in either tier
    whole = Searcher(store, tmp_path, pool=10**6, fill_pool=10**6)
    small = Searcher(store, tmp_path, pool=3)  # the second tier from 4 x top
    for ranks in ({}, {p.fp: rng.paretovariate(1.0) for p in pages[::2]}):
        store.replace_ranks(ranks.items())
        for q in queries(pages):
            for top, offset in ((10, 0), (20, 10)):  # page 1, page 2
                want = whole.search(q, top=top, offset=offset)
                got = small.search(q, top=top, offset=offset)
                assert want.hits or offset, q
                assert ranked(got) == ranked(want), (q, top, offset)
                assert (got.mode, got.ranked) == (want.mode, bool(ranks))
                assert got.matches <= want.matches  # counted up to the pool
    # the twins (exact copies) were folded into one hit each
    assert any(h.similar >= 3 for q in queries(pages)[:2] for h in whole.search(q).hits)


def test_the_flat_queries_score_as_their_units_do(store, pages, tmp_path) -> None:
    """The pages-with-some-words query, and the query of one plain word, are flat
    disjunctions of term queries (which Tantivy prunes); they must match the same pages
    with the same scores as the units they stand for."""
    for part in range(2):
        index(store, tmp_path, pages[part::2])
    searcher = Searcher(store, tmp_path)
    tantivy_searcher = searcher.reader.searcher()
    everything = tantivy_searcher.num_docs
    flat_seen = 0

    def scores(tq: tantivy.Query) -> dict[int, float]:
        hits = tantivy_searcher.search(tq, everything, count=False).hits
        fps = tantivy_searcher.fast_field_values("fp", [a for _s, a in hits])
        return dict(zip(fps, (s for s, _a in hits), strict=True))

    def same(got: dict[int, float], want: dict[int, float], text: str) -> None:
        assert got.keys() == want.keys(), text
        assert all(got[fp] == pytest.approx(want[fp], rel=1e-5) for fp in want), text

    singles = [w for text in queries(pages) for w in text.split()]
    for text in [*queries(pages), "数据库 备份", *singles]:
        units, _notes = searcher.units(text)
        flat_seen += None not in units.required_terms and bool(units.required)
        if units.positive == 1 and not units.optional:
            must = [(tantivy.Occur.Must, units.required[0])]
            same(scores(query.every_word(units)), scores(tantivy.Query.boolean_query(must)), text)
        if units.positive < 2:
            continue
        nested = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, u) for u in units.required], minimum_number_should_match=1
        )
        same(scores(query.some_words(units)), scores(nested), text)
    assert flat_seen >= 20


def test_leaving_out_the_some_words_query_changes_no_ranking(
    store, pages, tmp_path, monkeypatch
) -> None:
    """The pages-with-some-words query is left out when no page lacking a word can rise
    into the results (indexer/search/collect.py's fill_cannot_rise): the results must be those of
    running it, BM25 alone and with the prior, and it must have been left out."""
    index(store, tmp_path, pages)
    rng = random.Random(3)
    tok = get_tokenizer(None)
    common = [
        t
        for t, _n in collections.Counter(tok.tokens(" ".join(p.text for p in pages))).most_common(
            40
        )
    ]
    texts = [" ".join(rng.sample(common, k)) for k in (2, 2, 3) for _ in range(12)]
    texts += queries(pages)
    verdicts: list[bool] = []
    real = collect.fill_cannot_rise

    def counted(*args):
        verdicts.append(real(*args))
        return verdicts[-1]

    searcher = Searcher(store, tmp_path)
    for ranks in ({}, {p.fp: rng.paretovariate(1.0) for p in pages[::2]}):
        store.replace_ranks(ranks.items())
        for text in texts:
            monkeypatch.setattr(collect, "fill_cannot_rise", counted)
            got = searcher.search(text, top=10)
            monkeypatch.setattr(collect, "fill_cannot_rise", lambda *_a: False)
            want = searcher.search(text, top=10)
            assert ranked(got) == ranked(want), text
            assert (got.mode, got.matches) == (want.mode, want.matches), text
    assert verdicts.count(True) >= 5 and verdicts.count(False) >= 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_words_are_scored_without_reading_positions(store, pages, tmp_path) -> None:
    """A word's term queries ask Tantivy for frequencies only (BM25 needs no more): the
    index's position files stay out of memory until a phrase needs them. Read with the
    positions, they were a quarter of a portal worker's memory at 500k pages."""
    index(store, tmp_path, pages)
    # (words near each other are phrases: they read the positions of a pool's pages)
    searcher = Searcher(store, tmp_path, weights=replace(DEFAULT_WEIGHTS, near=0.0))
    for q in queries(pages):
        searcher.search(q)
    files = len(list(tmp_path.glob("*.pos")))
    words = _resident_kb(tmp_path, ".pos")
    # at most the footer of each file (its fields' sections), with the pages the kernel maps
    # around a page read (fault-around: 64 KB)
    assert words <= 64 * files, words
    phrase = " ".join(get_tokenizer(None).tokens(pages[5].text)[:2])
    assert searcher.search(f'"{phrase}"').hits
    assert _resident_kb(tmp_path, ".pos") > words  # (the measure sees them once read)


def _resident_kb(directory, suffix: str) -> int:
    """Kilobytes of this process's mappings of ``directory``'s ``suffix`` files in memory."""
    total, mapped = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):  # a mapping's header line
                # an anonymous mapping has no path (five fields): it is none of the files and
                # must not inherit the verdict of the mapping before it
                path = " ".join(head[5:])
                mapped = path.startswith(str(directory)) and path.endswith(suffix)
            elif mapped and head[0] == "Rss:":
                total += int(head[1])
    return total


def test_a_new_commit_is_judged_by_its_own_best_scores(store, pages, tmp_path) -> None:
    """The best scores kept for leaving out the some-words query belong to one commit: a
    page committed later that scores higher on a word than any before, and lacks the
    other word, is found after the reload that shows it."""
    index(store, tmp_path, pages)
    tok = get_tokenizer(None)
    counts = collections.Counter(t for p in pages for t in set(tok.tokens(p.text)))
    titled = {t for p in pages for t in tok.tokens(p.title)}
    # a word of many pages but of no title: the new page's title makes it score high
    a, b = [t for t, _n in counts.most_common(50) if t.isascii() and t not in titled][:2]
    text = f"{a} {b}"
    # a title scores a word of many pages' text as a rare word with each field's own idf
    weights = replace(DEFAULT_WEIGHTS, shared_idf=0.0)
    searcher = Searcher(store, tmp_path, weights=weights)
    before = searcher.search(text)
    assert before.mode == "and"
    loud = Page(
        fp=fingerprint("http://127.0.0.1:9/loud"),
        url="http://127.0.0.1:9/loud",
        host="127.0.0.1:9",
        fetched_at=2.0,
        title=a,
        text=f"{a} " * 20,
    )
    index(store, tmp_path, [loud])
    searcher.reader.reload()
    got = searcher.search(text)
    fresh = Searcher(store, tmp_path, weights=weights)  # nothing kept from the earlier commit
    assert ranked(got) == ranked(fresh.search(text))
    assert loud.fp in [h.fp for h in got.hits]


def test_a_reader_sees_a_commit_on_its_own_within_its_refresh(store, pages, tmp_path) -> None:
    index(store, tmp_path, pages[:50])
    reader = IndexReader(tmp_path, refresh=0.2)
    assert reader.num_docs() == 50
    index(store, tmp_path, pages[50:60])
    deadline = time.monotonic() + 5
    while reader.num_docs() != 60:
        assert time.monotonic() < deadline, "the new commit was never seen"
        time.sleep(0.05)


def test_what_a_commit_s_memo_holds_outlives_reloads_that_find_no_other_commit(
    store, pages, tmp_path
) -> None:
    """The memo (each word's best score) is kept from the index's opening through every
    reload that finds the same commit, and dropped by the one that finds another."""
    index(store, tmp_path, pages[:50])
    reader = IndexReader(tmp_path, refresh=0.05)
    _searcher, memo = reader.snapshot()
    memo["best of a word"] = 1.0
    time.sleep(0.1)
    _searcher, memo = reader.snapshot()  # the first reload: the same commit
    assert memo.get("best of a word") == 1.0
    index(store, tmp_path, pages[50:60])
    time.sleep(0.1)
    searcher, memo = reader.snapshot()
    assert searcher.num_docs == 60
    assert "best of a word" not in memo


def test_the_portal_finds_a_page_indexed_after_it_started(store, db_url, pages, tmp_path) -> None:
    index(store, tmp_path, pages[:100])
    pool = SearchPool(db_url, tmp_path, threads=1)
    try:
        common = queries(pages)[-2]
        before = pool.search(common)
        assert pool.search("qyzzyx").result.mode == "none"
        fresh = Page(
            fp=12345,
            url="http://127.0.0.1:9/fresh",
            host="127.0.0.1:9",
            fetched_at=2.0,
            title="qyzzyx",
            text=f"qyzzyx {common} qyzzyx",
        )
        index(store, tmp_path, [fresh])
        pool.reader.reload()  # (it reloads on its own within a second)
        after = pool.search("qyzzyx")
        assert [h.url for h in after.result.hits] == ["http://127.0.0.1:9/fresh"]
        again = pool.search(common)
        assert again.result.matches == before.result.matches + 1
        # and as a search of its own ranks it, page 2 included
        own = Searcher(store, tmp_path).search(common, top=20, offset=10)
        if own.hits:
            assert ranked(pool.search(common, page=2).result) == ranked(own)
        else:  # one page of results: the second is said to be past it
            with pytest.raises(PastLastPage, match="page 2 is past the last page of results"):
                pool.search(common, page=2)
    finally:
        pool.close()


def test_text_is_folded_in_place_as_nfkc_folds_it() -> None:
    # each character is left, or mapped as NFKC maps it onto one character NFKC keeps
    # (beside a full-width letter: a text holding no letter, digit or space to fold is
    # left whole, its full-width punctuation with it, as no term can match there)
    changed = 0
    for c in map(chr, range(sys.maxunicode + 1)):
        if 0xD800 <= ord(c) <= 0xDFFF:
            continue
        folded = fold_aligned("Ａ" + c)[1:]
        if folded != c:
            changed += 1
            assert folded == unicodedata.normalize("NFKC", c), hex(ord(c))
            assert unicodedata.normalize("NFKC", folded) == folded, hex(ord(c))
    assert changed > 100 and fold_aligned("ＦＵＬＬ，好\u3000１") == "FULL,好 1"
    assert fold_aligned("，好") == "，好"


def test_terms_are_found_as_re_ignorecase_finds_them() -> None:
    # every character re.IGNORECASE takes for an ASCII one, over all of Unicode
    any_ascii = re.compile(r"[\x21-\x7e]", re.IGNORECASE)
    others = [chr(c) for c in range(128, sys.maxunicode + 1) if any_ascii.fullmatch(chr(c))]
    for c in map(chr, range(0x21, 0x7F)):
        takes = {o for o in others if re.fullmatch(re.escape(c), o, re.IGNORECASE)}
        assert takes == set(_OTHER_CASES.get(c.lower(), "")), c
    # and none for a Chinese one but itself
    han = re.compile(f"[{HAN}]", re.IGNORECASE)
    assert all(han.fullmatch(chr(c)) is None for c in range(0x3000) if not 0xD800 <= c <= 0xDFFF)
    for c in (0x4E00, 0x6C49, 0x9FFF):
        assert [x for x in range(0x3400, 0xA000) if re.fullmatch(chr(c), chr(x), re.I)] == [c]
    rng = random.Random(4)
    alphabet = "abkisKIS \u212aſıİ搜索引擎éÉ-_.x1"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(30))
        terms = [
            "".join(rng.choice(alphabet.strip()) for _ in range(rng.randint(1, 3)))
            for _ in range(rng.randint(1, 3))
        ]
        ordered = sorted(set(terms), key=len, reverse=True)
        plain = re.compile("|".join(re.escape(t) for t in ordered), re.IGNORECASE)
        fast = term_pattern(terms)
        assert fast is not None
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in plain.finditer(text)]


def test_terms_found_in_the_lower_cased_copy_are_the_pattern_s_matches(monkeypatch) -> None:
    # find_terms looks for ASCII terms with str.find in a lower-cased copy of a long
    # text (here of any): the same spans as term_pattern's matches kept as whole tokens,
    # with the letters re.IGNORECASE widens, terms inside others, repeated and
    # overlapping, Chinese terms beside them, and the match limit
    monkeypatch.setattr(terms_module, "FIND_MIN_CHARS", 0)
    rng = random.Random(6)
    alphabet = "abkisKIS\u212aſıİ搜索引擎 x1-é"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        terms = [
            "".join(rng.choice("abkisKIS搜索引擎x1") for _ in range(rng.randint(1, 3)))
            for _ in range(rng.randint(1, 4))
        ]
        limit = rng.choice([2, 64])
        pattern = term_pattern(terms)
        assert pattern is not None
        expected = []
        for m in pattern.finditer(text):
            start, end = m.span()
            whole = not (
                (start > 0 and re.match(r"[^\W_]", text[start - 1]) and not han(text[start - 1]))
                or (end < len(text) and re.match(r"[^\W_]", text[end]) and not han(text[end]))
            )
            if all(han(c) for c in m.group(0)) or whole:
                expected.append((start, end))
        assert find_terms(text, terms, limit) == expected[:limit], (terms, text)
    assert find_terms("Engineer engine ENGINE", ["engine"]) == [(9, 15), (16, 22)]
    monkeypatch.undo()  # the threshold as shipped: a long page and a short one
    long_text = "Ｋelvin Sparks ſpark İnk " * 100
    assert len(long_text) >= terms_module.FIND_MIN_CHARS
    for text in (long_text, long_text[:50]):
        spans = [m.span() for m in term_pattern(["spark", "ink"]).finditer(text)]
        assert find_terms(text, ["spark", "ink"], 500) == [
            (a, b) for a, b in spans if not text[b : b + 1].isalnum()
        ]
    assert find_terms("搜索引擎的引擎", ["引擎", "搜索"]) == [(0, 2), (2, 4), (5, 7)]


def han(c: str) -> bool:
    return re.fullmatch(f"[{HAN}]", c) is not None


def test_text_is_collapsed_as_split_and_join_collapse_it() -> None:
    # collapsed returns a printable text without double or outer spaces as it is: it
    # rests on every character str.split splits on being unprintable but the space
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert [c for c in spaces if c.isprintable()] == [" "]
    rng = random.Random(7)
    alphabet = ["a", "搜", "，", " ", " ", "\n", "\x00", "\u200b", *spaces]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert collapsed(text) == " ".join(text.split()), repr(text)
    page = "a crawled page, 已经 collapsed"
    assert collapsed(page) is page


def test_words_are_found_by_their_stems_as_re_ignorecase_finds_them() -> None:
    # words_starting puts the test of the character before a word after its first one:
    # the same words as the plain pattern with the lookbehind first, on the letters whose
    # cases re.IGNORECASE widens, and at the text's start
    rng = random.Random(5)
    alphabet = "abkisKIS\u212aſıİ1 \n-_é搜"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(30))
        stems = tuple(
            "".join(rng.choice("abkisKIS1") for _ in range(rng.randint(1, 3)))
            for _ in range(rng.randint(1, 3))
        )
        ordered = sorted(set(stems), key=len, reverse=True)
        words = "|".join(re.escape(s) for s in ordered)
        plain = re.compile(f"(?<![a-z0-9])(?:{words})[a-z0-9]*", re.IGNORECASE)
        assert words_starting(stems).findall(text) == plain.findall(text), (stems, text)
    assert words_starting(("split",)).findall("Splitting resplit\nSPLITS _split") == [
        "Splitting",
        "SPLITS",
        "split",
    ]


def test_words_found_in_one_pass_are_the_terms_and_stem_variants_found_in_two() -> None:
    # find_words (the stored text's snippets) against snippet_terms then find_terms (as
    # before): the same spans, on words that stem alike (splits, splitting), inside
    # others, beside Chinese, the letters re.IGNORECASE widens, and the match limit
    rng = random.Random(8)
    words = ["split", "splits", "Splitting", "resplit", "splitter", "ink", "İnk", "inks", "x"]
    words += ["kin", "\u212aIN", "1", "x1", "pg", "pg_hba", "conf"]
    seps = [" ", " ", ", ", "-", "_", ".", "搜", "é", ""]
    for _ in range(3000):
        text = "".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(0, 12)))
        terms = rng.sample(["split", "ink", "kin", "x", "1", "pg", "conf", "splitting"], 2)
        limit = rng.choice([2, 64])
        stems = {stem(t) for t in terms}
        expected = find_terms(text, snippet_terms(text, terms), limit)
        assert find_words(text, terms, stems, stem, limit) == expected, (terms, text)
    assert find_words("a 搜索", ["搜索"], set(), stem) is None  # not ASCII: find_terms
    # a word whose letters NFKC folds (ſ for s) is marked as the index matched it, where
    # the two scans took its stem variant for another word
    assert find_words("ſplitting", ["split"], {"split"}, stem) == [(0, 9)]
    assert find_terms("ſplitting", snippet_terms("ſplitting", ["split"])) == []


def test_words_found_in_the_utf8_bytes_are_those_found_in_the_text() -> None:
    # find_words_utf8 (the stored text's snippets, in its UTF-8 bytes) against find_words
    # for ASCII terms and snippet_terms then find_terms with Chinese ones: the same spans
    # once made character spans, on words that stem alike, inside others, beside Chinese
    # and other letters of two to four bytes, and the match limit; None where a term is
    # neither ASCII nor Chinese or the text holds a letter IGNORECASE takes for ASCII
    rng = random.Random(9)
    words = ["split", "splits", "Splitting", "resplit", "ink", "inks", "x", "1", "x1"]
    words += ["pg", "pg_hba", "conf", "搜索", "引擎", "搜索引擎", "é", "Ωmega", "\U00020000", "—"]
    seps = [" ", " ", ", ", "-", "_", ".", "搜", "é", "’", "\U0001f600", ""]
    for _ in range(3000):
        text = "".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(0, 12)))
        terms = rng.sample(["split", "ink", "x", "1", "pg", "conf", "搜索", "引擎", "搜索引擎"], 2)
        limit = rng.choice([2, 64])
        stems = {stem(t) for t in terms if t.isascii()}
        raw = text.encode()
        found = find_words_utf8(raw, terms, stems, stem, limit)
        assert found is not None
        spans, lowered = found
        if all(t.isascii() for t in terms):
            expected = find_words(text, terms, stems, stem, limit)
        else:
            expected = find_terms(text, snippet_terms(text, terms), limit)
        assert char_spans(raw, spans) == expected, (terms, text)
        assert lowered == [text[a:b].lower().encode() for a, b in expected]
    assert find_words_utf8("ſplit".encode(), ["split"], {"split"}, stem) is None
    assert find_words_utf8("İnk".encode(), ["ink"], set(), stem) is None
    assert find_words_utf8("café".encode(), ["café"], set(), stem) is None
    assert find_words_utf8("ſ 搜索".encode(), ["搜索"], set(), stem) == (
        [(3, 9)],
        ["搜索".encode()],
    )


def test_chinese_terms_found_in_the_decoded_text_are_those_find_terms_finds() -> None:
    # find_han (a Chinese query's snippets) against find_terms: the same spans on terms
    # that overlap and hold one another (搜索, 搜索引擎, 引擎), beside other scripts, and
    # the match limit; each span's term is the text it covers
    rng = random.Random(12)
    words = ["搜索", "引擎", "搜索引擎", "索引", "擎天", "Split", "é", "\U00020000", "—", "x"]
    seps = [" ", "", "，", "。", "\U0001f600"]
    for _ in range(3000):
        text = "".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(0, 14)))
        chinese = ["搜索", "引擎", "搜索引擎", "索引", "擎", "\U00020000"]
        terms = rng.sample(chinese, rng.randint(1, 3))
        limit = rng.choice([2, 64])
        spans, found = find_han(text, terms, limit)
        assert spans == find_terms(text, terms, limit), (terms, text)
        assert found == [text[a:b] for a, b in spans]


def test_snippets_of_stored_bytes_are_the_snippets_of_the_text() -> None:
    # stored_snippet (the index's UTF-8 text, and its folded copy when there is one) makes
    # the snippet page_snippet makes of the decoded text, falling back to it for the
    # terms and letters the bytes cannot be searched for
    rng = random.Random(10)
    words = ["Split", "splitting", "ink", "搜索", "引擎", "é", "ſplit", "Ｓplit", "café", "x"]
    for _ in range(500):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 80)))
        terms = rng.sample(["split", "ink", "搜索", "引擎", "café", "x"], 2)
        folded = fold_aligned(text)
        width = rng.choice([20, 60])
        stored = folded.encode() if folded != text else None
        got = stored_snippet(text.encode(), stored, terms, width)
        assert got == page_snippet(text, folded, terms, width), (terms, text)


def test_the_best_window_counted_in_one_pass_is_the_one_each_window_s_set_finds() -> None:
    # _best_window moves both ends of the window along the matches: the same start (and
    # match) as counting the distinct words of each window by bisection, on matches long
    # and short, close and far, repeated words, and windows narrower than a match
    def each_window(matches: list[tuple[int, int]], words: list[str], width: int):
        starts, ends = [a for a, _b in matches], [b for _a, b in matches]
        best = (0, -1, 0)
        for i, first in enumerate(starts):
            start = max(0, first - width // 4)
            lo = bisect.bisect_left(starts, start, 0, i)
            hi = bisect.bisect_right(ends, start + width)
            count = len(set(words[lo : max(i, hi)]))
            if count > best[1]:
                best = (start, count, i)
        return best[0], best[2]

    rng = random.Random(11)
    for _ in range(3000):
        matches, at = [], 0
        for _m in range(rng.randint(1, 40)):
            at += rng.randint(0, 30)
            end = at + rng.randint(1, 12)
            matches.append((at, end))
            at = end
        words = [rng.choice("abcde") for _m in matches]
        width = rng.choice([8, 20, 60, 200])
        assert _best_window(matches, words, width) == each_window(matches, words, width)


def test_a_page_folded_into_a_first_tier_hit_does_not_come_back_through_the_second() -> None:
    # pure logic: page 2 is a duplicate folded into hit 1 (it has every word); the pages
    # with some of the words list it again, above page 3, which alone joins the results
    scored = collect.Scored
    every = [scored(fp=1, bm25=9.0, score=9.0, digest=1, simhash=1, similar=1, members=[2])]
    some = [
        scored(fp=2, bm25=8.0, score=8.0, digest=1, simhash=1),
        scored(fp=3, bm25=4.0, score=4.0, digest=3, simhash=3),
        scored(fp=1, bm25=9.0, score=9.0, digest=1, simhash=1),
    ]
    merged = collect.merge(every, some, top=10)
    assert [s.fp for s in merged] == [1, 3]
    assert merged[0].score == 9.0  # the first tier's hit keeps its score
    assert merged[1].score == pytest.approx(4.0 * collect.SOME_WORDS_SHARE)
