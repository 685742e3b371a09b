"""Vocabularies of the synthetic pages and the distinctive terms planted in them.

Common words (English, simplified and traditional Chinese) fill the pages;
every indexable page also carries one invented English word and one Chinese
term made of characters that no common word uses, so a search for either
finds that page and (almost) nothing else.
"""

from __future__ import annotations

import functools
import random


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ENGLISH = _words(
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there one all we their been has when who will "
    "more no if out so said what up its about into than them can only other new some time "
    "could these two may then first any like now my such make over our even most after also "
    "made many before must through back years where much your way well down should because "
    "each just those people how too little state good very world still own see men work long "
    "here between both life being under never day same another know while last might great "
    "old year off come since against go came right used take three house system program "
    "question during government small number always something early part water city market "
    "river mountain garden library station bridge harbour village museum theatre window "
    "engine signal network server archive crawler search index rank page link graph query "
    "answer paper letter history science music painting weather winter summer autumn spring "
    "morning evening island forest valley desert ocean castle tower street market bakery "
    "kitchen journey travel voyage planet comet orbit lantern compass ledger harvest meadow"
)

CHINESE = _words(
    "我们 中国 发展 经济 社会 政府 国家 工作 问题 时间 城市 人民 世界 历史 文化 教育 科学 技术 "
    "研究 学生 老师 学校 大学 图书馆 网络 系统 数据 信息 搜索 引擎 网页 链接 索引 排名 查询 服务器 "
    "分布式 爬虫 存储 计算 算法 程序 语言 中文 英文 文章 新闻 报道 市场 企业 公司 产品 价格 生活 "
    "家庭 朋友 孩子 父母 健康 医院 医生 环境 天气 春天 夏天 秋天 冬天 早上 晚上 今天 明天 昨天 "
    "北京 上海 广州 深圳 长江 黄河 山水 风景 旅游 火车 飞机 汽车 道路 桥梁 建筑 音乐 电影 艺术 "
    "体育 比赛 运动 足球 篮球 读书 写作 思想 方法 过程 结果 原因 影响 变化 需要 可以 已经 开始 "
    "进行 通过 提高 提供 支持 建设 管理 组织 活动 会议 计划 目标 能力 水平 质量 重要 主要 基本 "
    "简单 复杂 快速 安全 稳定 自由 美丽 传统 现代 未来 过去 方向 空间 时代 机会 条件 资源 能源"
)

TRADITIONAL = _words(
    "我們 中國 發展 經濟 社會 政府 國家 工作 問題 時間 城市 人民 世界 歷史 文化 教育 科學 技術 "
    "研究 學生 老師 學校 大學 圖書館 網路 系統 資料 資訊 搜尋 引擎 網頁 連結 索引 排名 查詢 伺服器 "
    "文章 新聞 報導 市場 企業 公司 產品 價格 生活 家庭 朋友 孩子 健康 醫院 環境 天氣 春天 夏天 "
    "秋天 冬天 臺北 香港 風景 旅遊 火車 飛機 汽車 道路 橋樑 建築 音樂 電影 藝術 體育 比賽 運動 "
    "讀書 寫作 思想 方法 過程 結果 原因 影響 變化 需要 可以 已經 開始 進行 通過 提高 提供 支持"
)

_GB2312_LEVEL2 = 0xD8
"""First byte of the GB2312 rows holding the less frequent characters."""
_SYLLABLE_ONSETS = "bdfgklmnprstvz"
_SYLLABLE_VOWELS = "aeiou"


def sentence_en(rng: random.Random, words: int) -> str:
    """An English-looking sentence of ``words`` common words."""
    text = " ".join(rng.choice(ENGLISH) for _ in range(words))
    return text[:1].upper() + text[1:] + "."


def sentence_zh(
    rng: random.Random, words: int, vocab: tuple[str, ...] | list[str] = CHINESE
) -> str:
    """A Chinese-looking sentence of ``words`` common words, with a full stop."""
    return "".join(rng.choice(vocab) for _ in range(words)) + "。"


def invented_word(rng: random.Random) -> str:
    """A pronounceable English-script word that is not a common word (4 syllables)."""
    return "".join(rng.choice(_SYLLABLE_ONSETS) + rng.choice(_SYLLABLE_VOWELS) for _ in range(4))


@functools.lru_cache(maxsize=1)
def rare_characters() -> tuple[str, ...]:
    """Rare CJK characters (GB2312 level 2) also in Big5 that no common word uses.

    Planted Chinese terms are made of these, so they survive GBK and Big5
    pages and are rare in the corpus.
    """
    common = set("".join(CHINESE)) | set("".join(TRADITIONAL))
    chars = []
    for code in range(0x4E00, 0x9FA6):
        ch = chr(code)
        if ch in common:
            continue
        try:
            gb = ch.encode("gb2312")
            ch.encode("big5")
        except UnicodeEncodeError:
            continue
        if gb[0] >= _GB2312_LEVEL2:
            chars.append(ch)
    return tuple(chars)


def invented_term_zh(rng: random.Random) -> str:
    """Four rare characters (see :func:`rare_characters`)."""
    return "".join(rng.sample(rare_characters(), 4))


class TermPool:
    """Hands out planted terms, each used by one page only."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set(ENGLISH)

    def pair(self) -> tuple[str, str]:
        en = invented_word(self.rng)
        while en in self.used:
            en = invented_word(self.rng)
        self.used.add(en)
        zh = invented_term_zh(self.rng)
        while zh in self.used:
            zh = invented_term_zh(self.rng)
        self.used.add(zh)
        return en, zh
