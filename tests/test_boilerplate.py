"""Boilerplate found from the repeated shingles of a host's pages."""

from __future__ import annotations

from srcrawl.indexer.boilerplate import frequent_shingles, split_boilerplate

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
