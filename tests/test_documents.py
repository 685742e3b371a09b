"""The digests an index slave sends with each document: the simhash of its body's bigrams."""

from __future__ import annotations

import itertools
import random

import xxhash

from srcrawl.indexer.documents import hamming, simhash

M64 = (1 << 64) - 1
MIX = 0x9E3779B97F4A7C15


def reference_simhash(tokens: list[str]) -> int:
    """The definition, one distinct bigram at a time in plain integers: each distinct
    bigram's hash votes for its bits with its count; a bit is set where its votes are more
    than half the bigrams."""
    if not tokens:
        return 0
    words = [xxhash.xxh64_intdigest(t.encode()) for t in tokens]
    if len(words) == 1:
        features = words
    else:
        features = []
        for a, b in itertools.pairwise(words):
            h = (a * MIX + (b ^ (b >> 29))) & M64
            h = (h * MIX) & M64
            features.append(h ^ (h >> 32))
    counts: dict[int, int] = {}
    for f in features:
        counts[f] = counts.get(f, 0) + 1
    total = sum(counts.values())
    value = 0
    for bit in range(64):
        votes = sum(n for f, n in counts.items() if f >> bit & 1)
        if 2 * votes > total:
            value |= 1 << bit
    return value - (1 << 64) if value >> 63 else value


def test_the_simhash_is_its_definition_on_random_texts() -> None:
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(40)] + ["中文", "检索", "ünïcode", "a"]
    for n in [0, 1, 2, 3, 10, 200, 1000]:
        for _ in range(5):
            tokens = [rng.choice(vocabulary) for _ in range(n)]
            assert simhash(tokens) == reference_simhash(tokens), tokens[:20]


def test_a_page_a_few_words_apart_is_a_few_bits_apart() -> None:
    rng = random.Random(3)
    page = [f"w{rng.randrange(2000)}" for _ in range(600)]
    edited = list(page)
    for i in rng.sample(range(len(page)), 3):
        edited[i] = "changed"
    other = [f"w{rng.randrange(2000)}" for _ in range(600)]
    assert hamming(simhash(page), simhash(edited)) <= 8
    assert hamming(simhash(page), simhash(other)) >= 16
