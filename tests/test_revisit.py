"""The recrawl schedule's pure parts: intervals, the digest, the messages that carry them."""

from __future__ import annotations

import pytest

from srcrawl.core.errors import ConfigError, EnvelopeError
from srcrawl.queues.crawl_protocol import Fetched, FetchTask, read_outcome
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.slave.revisit import conditional_headers, page_digest

URL = "http://127.0.0.1:1/p/1.html"


def test_the_nutch_interval_shrinks_on_change_and_grows_without_within_bounds() -> None:
    s = CrawlStrategy(revisit=100.0, min_revisit=50.0, max_revisit=150.0, revisit_policy="nutch")
    assert s.next_revisit(0, True) == s.next_revisit(0, False) == 100.0  # the first interval
    assert s.next_revisit(100.0, True) == pytest.approx(80.0)  # Nutch dec_rate 0.2
    assert s.next_revisit(100.0, False) == pytest.approx(140.0)  # inc_rate 0.4
    assert s.next_revisit(60.0, True) == 50.0 and s.next_revisit(140.0, False) == 150.0
    assert s.next_revisit(100.0, None) == 150.0  # gone: retried at the longest interval
    uniform = CrawlStrategy(revisit=100.0, revisit_policy="uniform")
    assert {uniform.next_revisit(i, c) for i in (0, 80) for c in (True, False, None)} == {100.0}
    # --revisit 2s alone: the default bounds widen to hold it
    short = CrawlStrategy(revisit=2.0, revisit_policy="nutch")
    assert short.next_revisit(2.0, True) == 2.0 and short.next_revisit(2.0, False) == 2.8
    with pytest.raises(ConfigError, match="revisit-policy"):
        CrawlStrategy(revisit_policy="sometimes")
    with pytest.raises(ConfigError, match="min-revisit"):
        CrawlStrategy(min_revisit=10.0, max_revisit=5.0)
    assert CrawlStrategy.from_json(s.to_json()) == s


def test_the_digest_is_of_title_and_text_with_numbers_folded() -> None:
    a = page_digest("Title", "Body text. Generated 2024-01-02 12:00:01.")
    assert a == page_digest("Title", "Body text. Generated 2025-11-30 09:59:59.")
    assert a != page_digest("Title", "Other text. Generated 2024-01-02 12:00:01.")
    assert a != page_digest("Title 2", "Body text. Generated 2024-01-02 12:00:01.")
    assert -(2**63) <= a < 2**63


def test_a_fetched_outcome_carries_the_next_fetch_with_its_validators() -> None:
    task = FetchTask(URL, 7, 2, "127.0.0.1:1", tries=1, failed=1)
    nxt = FetchTask(
        URL,
        7,
        2,
        "127.0.0.1:1",
        revisit=3.5,
        etag='"2-ab"',
        modified="Mon, 01 Jan 2024 00:00:00 GMT",
        digest=-5,
    )
    out = read_outcome(Fetched(task, 200, 12.0, next=nxt, changed=True).encode())
    assert isinstance(out, Fetched) and out.next == nxt and out.changed is True
    assert not out.task.recrawl and out.next.recrawl
    again = read_outcome(Fetched(nxt, 304, 1.0, next=nxt, changed=False).encode())
    assert again.task == nxt and again.changed is False  # type: ignore[union-attr]
    assert conditional_headers(nxt) == [
        'If-None-Match: "2-ab"',
        "If-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT",
    ]
    assert conditional_headers(task) == []
    assert read_outcome(Fetched(task, 404, 1.0).encode()).next is None  # type: ignore[union-attr]
    raw = Fetched(task, 200, 1.0, next=nxt).encode().replace(b'2-ab\\"', b'2-ab\\r\\nX: y\\"')
    with pytest.raises(EnvelopeError, match="etag"):
        read_outcome(raw)
