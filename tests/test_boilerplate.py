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


def test_own_text_answers_alike_in_any_order_of_positions() -> None:
    # OwnText counts chunks on from the last position it was asked about: asked in
    # order, backwards or at random, each position gets the answer of a fresh reader
    pages = [f"{MENU} page{i} alpha{i} beta{i} gamma{i} {MENU} tail{i}" for i in range(8)]
    frequent = frequent_shingles(pages)
    body = " ".join([pages[2], "own words here", pages[5]])
    positions = list(range(len(body)))
    fresh = [OwnText(frequent).covered(body, p) for p in positions]
    assert any(fresh) and not all(fresh)
    rng = random.Random(3)
    for order in (positions, positions[::-1], rng.sample(positions, len(positions))):
        reader = OwnText(frequent)
        assert [reader.covered(body, p) for p in order] == [fresh[p] for p in order]
        starts = [OwnText(frequent).run_start(body, p) for p in order]
        assert [reader.run_start(body, p) for p in order] == starts
