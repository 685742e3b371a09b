"""Known-item pages: titles, anchor texts and host menus whose answer is known by construction.

A web made with ``known_items`` gives each regular page a distinctive title (three
common English words and two common Chinese words, a combination no other page has,
each word also common in other pages' text), and every link to it the same anchor
text (two English and two Chinese words of a vocabulary no page's text is drawn
from, so the words are on the pages linking to it, never in its own text). Each host
shows a navigation menu on every page whose items name pages of the host by labels
that are also those pages' titles: a label is on every page of the host, and only its
page should come first for it.

The queries (:class:`~srcrawl.testweb.model.KnownItem`) are what a user would type
for one page: its title's words, its anchor words, a menu label; English and Chinese.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from srcrawl.testweb import words
from srcrawl.testweb.model import Host, KnownItem, Link, Page
from srcrawl.testweb.urls import origin_of


def _vocab(text: str) -> tuple[str, ...]:
    return tuple(text.split())


TITLE_EN = words.ENGLISH[words.ENGLISH.index("river") :]
"""Nouns of the pages' common words: title words also found in other pages' text."""
TITLE_ZH = words.CHINESE[words.CHINESE.index("历史") : words.CHINESE.index("需要")]
ANCHOR_EN = _vocab(
    "handbook primer almanac digest compendium gazette chronicle treatise manual "
    "glossary atlas catalogue bulletin dossier memoir anthology synopsis tutorial "
    "overview cookbook lexicon portfolio roster syllabus thesaurus yearbook casebook "
    "workbook sourcebook guidebook"
)
"""Anchor words: no page's text is drawn from these (see :mod:`.words`)."""
ANCHOR_ZH = _vocab(
    "指南 手册 教程 概览 笔记 词典 年鉴 档案 专题 讲义 摘要 随笔 札记 问答 案例 "
    "评论 综述 导读 图解 速查 入门 进阶 实战 原理 秘籍 攻略 百科 心得 纪要 要点"
)
MENU_EN = _vocab(
    "Authors Contact Downloads Changelog Sitemap Support Pricing Careers Partners "
    "Roadmap Donate Privacy Community Forum Newsletter Press"
)
MENU_ZH = _vocab(
    "作者 联系方式 下载 更新日志 网站地图 帮助中心 版权 招聘 合作伙伴 路线图 捐赠 "
    "隐私政策 社区 论坛 订阅 媒体"
)
MENU_ITEMS = 4
"""Menu items per host: two English labels, two Chinese."""


def plant(
    pages: dict[str, Page], hosts: Sequence[Host], regular: list[list[str]], seed: int
) -> list[KnownItem]:
    """Titles, anchors and menus written into ``pages`` (``regular``: each host's regular
    page URLs); the known-item queries they answer, by host, then page order."""
    rng = random.Random(f"known-items-{seed}")
    menus = _menus(hosts, regular)
    titles: dict[str, str] = {}
    anchors: dict[str, tuple[str, str, str, str]] = {}
    queries: list[KnownItem] = []
    used: set[object] = set()
    for urls in regular:
        for url in urls:
            label = next((lb for menu in menus for lb, u in menu if u == url), None)
            if label is not None:
                titles[url] = label
                queries.append(KnownItem("menu", _lang(label), label, url))
                continue
            en, zh = _unique(rng, used, TITLE_EN, 3), _unique(rng, used, TITLE_ZH, 2)
            titles[url] = f"{' '.join(en).title()} {''.join(zh)}"
            queries.append(KnownItem("title", "en", " ".join(en), url))
            queries.append(KnownItem("title", "zh", "".join(zh), url))
            anchors[url] = (*_unique(rng, used, ANCHOR_EN, 2), *_unique(rng, used, ANCHOR_ZH, 2))
    _rewrite(pages, hosts, regular, menus, titles, anchors)
    return queries + _anchor_queries(pages, anchors)


def anchor_text(parts: tuple[str, str, str, str] | str) -> str:
    """What a link to a page says: its English anchor words, then its Chinese ones."""
    if isinstance(parts, str):
        return parts
    return f"{parts[0]} {parts[1]} {parts[2]}{parts[3]}"


def _lang(text: str) -> str:
    return "en" if text.isascii() else "zh"


def _unique(rng: random.Random, used: set[object], vocab: Sequence[str], k: int) -> tuple:
    """``k`` distinct words of ``vocab``, a combination not handed out before."""
    while True:
        pick = tuple(rng.sample(vocab, k))
        if frozenset(pick) not in used:
            used.add(frozenset(pick))
            return pick


def _menus(hosts: Sequence[Host], regular: list[list[str]]) -> list[list[tuple[str, str]]]:
    """Each host's menu, (label, URL) pairs naming regular pages 1… of that host; labels
    are not shared between hosts (hosts past the labels have no menu)."""
    menus = []
    half = MENU_ITEMS // 2
    for h, urls in enumerate(regular):
        labels = [*MENU_EN[h * half : (h + 1) * half], *MENU_ZH[h * half : (h + 1) * half]]
        if len(labels) < MENU_ITEMS or len(urls) <= MENU_ITEMS:
            menus.append([])
            continue
        menus.append([(lb, urls[1 + i]) for i, lb in enumerate(labels)])
    return menus


def _rewrite(
    pages: dict[str, Page],
    hosts: Sequence[Host],
    regular: list[list[str]],
    menus: list[list[tuple[str, str]]],
    titles: dict[str, str],
    anchors: dict[str, tuple[str, str, str, str]],
) -> None:
    """Every page's links given their anchor text, the host menu put first on its regular
    pages, each regular page given its title."""
    texts: dict[str, str] = {u: anchor_text(a) for u, a in anchors.items()}
    texts.update({u: lb for menu in menus for lb, u in menu})
    origins = {h.origin: i for i, h in enumerate(hosts)}
    for url, page in list(pages.items()):
        links = [dataclasses.replace(ln, anchor=texts.get(ln.target)) for ln in page.links]
        host = origins.get(origin_of(url))
        if url in titles and host is not None:
            menu = [Link(target=t, href=t, anchor=lb, menu=True) for lb, t in menus[host]]
            links = menu + links
        pages[url] = dataclasses.replace(page, links=tuple(links), title=titles.get(url))


def _anchor_queries(
    pages: dict[str, Page], anchors: dict[str, tuple[str, str, str, str]]
) -> list[KnownItem]:
    """The anchor queries of pages another page links to, English and Chinese, leaving out
    a query whose words are in the page's own text (the anchors of its links)."""
    linked = {ln.target for url, p in pages.items() for ln in p.links if ln.target != url}
    out = []
    for url, parts in anchors.items():
        if url not in linked:
            continue
        own = {w for ln in pages[url].links for w in _words_of(ln.anchor)}
        for lang, query, ws in (
            ("en", f"{parts[0]} {parts[1]}", parts[:2]),
            ("zh", parts[2] + parts[3], parts[2:]),
        ):
            if not own & set(ws):
                out.append(KnownItem("anchor", lang, query, url))
    return out


def _words_of(anchor: str | None) -> set[str]:
    """The vocabulary words an anchor text is made of."""
    if not anchor:
        return set()
    return {w for w in (*ANCHOR_EN, *ANCHOR_ZH, *MENU_EN, *MENU_ZH) if w in anchor}
