"""Boilerplate: the text a host repeats on most of its pages (menus, footers).

Found from the data, not from class names: a page's stored text is cut into
*shingles*, runs of :data:`SHINGLE` consecutive whitespace-separated chunks
(the parser puts a space between block elements, so a menu of links is a
run of chunks), and a shingle seen on at least :data:`SHARE` of a sample of
the host's pages (the first :data:`SAMPLE` by fingerprint, at least
:data:`MIN_PAGES` of them) is boilerplate. The chunks of a page covered by
boilerplate shingles are indexed apart from the page's own text and weigh
less in ranking (the ``boiler`` weight, indexer/search/weights.py). [Broder, w-shingling]
in the papers.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from srcrawl.core.defaults import DEFAULT_INDEX_MAX_CHARS
from srcrawl.sql.store import Store

SHINGLE = 3
"""Chunks per shingle: short enough for a menu of three items, long enough that an
ordinary phrase of the language is rarely on half the pages of a host."""
SAMPLE = 64
"""Pages of a host read to find its boilerplate."""
MIN_PAGES = 5
"""A host with fewer pages has no boilerplate (repetition means nothing on two pages)."""
SHARE = 0.5
"""The share of the sampled pages a shingle must be on to be boilerplate."""
_HOSTS = 4096  # hosts whose boilerplate one process keeps


def shingles(chunks: list[str]) -> list[int]:
    """The hash of each run of SHINGLE chunks, by its first chunk's position."""
    return [hash(tuple(chunks[i : i + SHINGLE])) for i in range(len(chunks) - SHINGLE + 1)]


def frequent_shingles(texts: list[str]) -> frozenset[int]:
    """The shingles on at least SHARE of ``texts`` (none under MIN_PAGES texts)."""
    if len(texts) < MIN_PAGES:
        return frozenset()
    seen: Counter[int] = Counter()
    for text in texts:
        seen.update(set(shingles(text[:DEFAULT_INDEX_MAX_CHARS].split())))
    least = max(2, SHARE * len(texts))
    return frozenset(s for s, n in seen.items() if n >= least)


def split_boilerplate(text: str, frequent: frozenset[int]) -> tuple[str, str]:
    """(own text, boilerplate) of a page's text: the chunks covered by a frequent shingle
    go to the second, each part keeps its chunks in order."""
    if not frequent:
        return text, ""
    chunks = text.split()
    covered = bytearray(len(chunks))
    for i, h in enumerate(shingles(chunks)):
        if h in frequent:
            covered[i : i + SHINGLE] = b"\x01" * SHINGLE
    if not any(covered):
        return text, ""
    own = [c for c, b in zip(chunks, covered, strict=True) if not b]
    boiler = [c for c, b in zip(chunks, covered, strict=True) if b]
    return " ".join(own), " ".join(boiler)


class OwnText:
    """Which positions of a page's whitespace-collapsed text are its own text, read near
    the positions asked about only: a chunk and the SHINGLE - 1 on either side, found
    with ``str.find`` (a snippet asks about a few positions; splitting a page of 60,000
    characters into its chunks would cost more than the search)."""

    def __init__(self, frequent: frozenset[int]) -> None:
        self.frequent = frequent

    def _chunk_at(self, body: str, pos: int) -> int:
        """Where the chunk holding ``pos`` starts (the chunk after it, at a space)."""
        return body.rfind(" ", 0, pos) + 1

    def _flags(self, body: str, first: int, last: int) -> tuple[list[int], list[bool]]:
        """The starts of the chunks from the one starting at ``first`` to the one starting
        at ``last``, and whether each is in a frequent shingle: one split of them and
        the SHINGLE - 1 chunks on either side."""
        lo = first  # back over up to SHINGLE - 1 chunks
        for _ in range(SHINGLE - 1):
            if lo == 0:
                break
            lo = body.rfind(" ", 0, lo - 1) + 1
        hi = last  # on to the end of up to SHINGLE - 1 chunks after it
        for _ in range(SHINGLE):
            hi = body.find(" ", hi + 1)
            if hi < 0:
                hi = len(body)
                break
        chunks = body[lo:hi].split(" ")
        k0 = body.count(" ", lo, first)  # the first's index among them
        starts, flags = [], []
        at = lo
        for k, chunk in enumerate(chunks):
            if k >= k0:
                if at > last:
                    break
                starts.append(at)
                flags.append(
                    any(
                        hash(tuple(chunks[j : j + SHINGLE])) in self.frequent
                        for j in range(max(0, k - SHINGLE + 1), min(k, len(chunks) - SHINGLE) + 1)
                    )
                )
            at += len(chunk) + 1
        return starts, flags

    def covered(self, body: str, pos: int) -> bool:
        """Whether ``pos`` of ``body`` (whitespace-collapsed) is in repeated text."""
        start = self._chunk_at(body, pos)
        return self._flags(body, start, start)[1][0]

    def run_start(self, body: str, pos: int) -> int | None:
        """Where the run of own text holding ``pos`` starts (looking back a few hundred
        characters at most); at 0, where the page's first own text starts (None: none
        in its first 2,000 chunks)."""
        if pos == 0:
            start = 0
            for _ in range(2000):
                if not self._flags(body, start, start)[1][0]:
                    return start
                start = body.find(" ", start) + 1
                if start == 0:  # that was the last chunk
                    return None
            return start
        start = self._chunk_at(body, pos)  # back over own chunks, up to a covered one
        if start == 0:
            return 0
        # the chunks the walk may pass: from the one holding 400 characters back
        starts, flags = self._flags(
            body, self._chunk_at(body, max(0, pos - 401)), self._chunk_at(body, start - 1)
        )
        i = len(starts) - 1  # the chunk before start
        while start > 0 and pos - start < 400 and not flags[i]:
            start, i = starts[i], i - 1
        return start


class HostBoilerplate:
    """The frequent shingles of each host, read from the store once per process."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._hosts: OrderedDict[str, frozenset[int]] = OrderedDict()

    def of(self, host: str) -> frozenset[int]:
        found = self._hosts.get(host)
        if found is None:
            found = frequent_shingles(self.store.host_texts(host, SAMPLE))
            self._hosts[host] = found
            if len(self._hosts) > _HOSTS:
                self._hosts.popitem(last=False)
        return found

    def split(self, host: str, text: str) -> tuple[str, str]:
        """(own text, boilerplate) of a page of ``host``."""
        return split_boilerplate(text, self.of(host))

    def own_text(self, host: str) -> OwnText | None:
        """A reader of a page of ``host``'s own text, None when the host repeats nothing."""
        frequent = self.of(host)
        return OwnText(frequent) if frequent else None
