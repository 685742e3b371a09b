"""Boilerplate found from the repeated shingles of a host's pages."""

from __future__ import annotations

import random

from srcrawl.indexer.boilerplate import OwnText, frequent_shingles, split_boilerplate

MENU = "首页 作者 关于 联系 Home Docs"


def test_a_menu_on_most_pages_is_boilerplate_and_a_page_s_own_text_is_not() -> None:
    pages = [f"{MENU} page{i} alpha{i} beta{i} gamma{i}" for i in range(8)]
    pages += ["something else entirely without the menu"] * 2
    frequent = frequent_shingles(pages)
    own, boiler = split_boilerplate(pages[3], frequent)
    assert boiler == MENU and own == "page3 alpha3 beta3 gamma3"
    assert split_boilerplate("作者 is not a menu alone", frequent)[1] == ""


def test_few_pages_have_no_boilerplate() -> None:
    assert frequent_shingles([MENU] * 4) == frozenset()
    assert split_boilerplate(MENU, frozenset()) == (MENU, "")


def test_own_text_read_near_a_position_is_what_the_whole_page_s_chunks_say() -> None:
    # OwnText reads only the chunks around a position: the same answers as the page cut
    # into all its chunks, over every position, with a menu over 2,000 chunks long
    rng = random.Random(3)
    words = ["menu", "home", "docs", "about", "x", "y", "搜索"]
    for _trial in range(300):
        pages = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(8)]
        frequent = frequent_shingles(pages)
        body = " ".join(rng.choice(words) for _ in range(rng.randint(0, 40)))
        reader = OwnText(frequent)
        for pos in range(len(body) + 1):
            assert reader.covered(body, pos) == _covered(body, pos, frequent), (body, pos)
            assert reader.run_start(body, pos) == _run_start(body, pos, frequent), (body, pos)
    frequent = frequent_shingles([f"{MENU} page{i}" for i in range(8)])
    long_menu = " ".join([MENU] * 500)  # 3,000 chunks, all covered
    assert OwnText(frequent).run_start(long_menu, 0) == len(" ".join(long_menu.split()[:2000])) + 1
    assert OwnText(frequent).run_start(MENU, 0) is None
    assert OwnText(frequent).run_start(MENU + " own", 0) == len(MENU) + 1


def _chunk_covered(chunks: list[str], i: int, frequent: frozenset[int]) -> bool:
    """Chunk ``i`` is in a frequent shingle (by the definition: every chunk cut out)."""
    return any(
        hash(tuple(chunks[j : j + 3])) in frequent
        for j in range(max(0, i - 2), i + 1)
        if j + 3 <= len(chunks)
    )


def _covered(body: str, pos: int, frequent: frozenset[int]) -> bool:
    return _chunk_covered(body.split(" "), body.count(" ", 0, pos), frequent)


def _run_start(body: str, pos: int, frequent: frozenset[int]) -> int | None:
    chunks, i = body.split(" "), body.count(" ", 0, pos)
    starts = [0]
    for c in chunks[:-1]:
        starts.append(starts[-1] + len(c) + 1)
    if pos == 0:
        while i < min(len(chunks), 2000) and _chunk_covered(chunks, i, frequent):
            i += 1
        return starts[i] if i < len(chunks) else None
    while i > 0 and not _chunk_covered(chunks, i - 1, frequent) and pos - starts[i] < 400:
        i -= 1
    return starts[i]
