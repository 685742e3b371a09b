"""The adaptive revisit policy's pure parts: the change-rate estimate and the interval."""

from __future__ import annotations

import json
import math

import pytest

from srcrawl.core.errors import EnvelopeError
from srcrawl.queues.change_rate import ChangeHistory, marginal_value, optimal_interval
from srcrawl.queues.crawl_protocol import Fetched, FetchTask, read_outcome
from srcrawl.queues.crawl_strategy import CrawlStrategy

URL = "http://127.0.0.1:1/p/1.html"


def _visits(changed: list[bool], gap: float) -> ChangeHistory:
    h = ChangeHistory(at=0.0)
    for i, c in enumerate(changed, 1):
        h = h.observe(c, i * gap)
    return h


def test_the_estimate_follows_cho_and_corrects_for_missed_changes() -> None:
    assert ChangeHistory().rate() == 0.0 and _visits([False] * 5, 10.0).rate() == 0.0
    one = _visits([True], 10.0)  # n = 1, X = 1: -ln(0.5 / 1.5) / 10
    assert one.rate() == pytest.approx(math.log(3) / 10)
    half = _visits([True, False] * 20, 10.0)
    # half the visits find a change: λ is above the naive 0.5 / 10 (missed second changes)
    assert 0.05 < half.rate() < 0.09
    # a page seen changed at every visit is estimated faster than the visits, and
    # faster still the longer the streak
    assert _visits([True] * 20, 10.0).rate() > _visits([True] * 3, 10.0).rate() > 0.1
    # the record forgets: a page that stopped changing is estimated slower each visit
    stopped = [_visits([True] * 10 + [False] * k, 10.0).rate() for k in (1, 5, 10)]
    assert stopped == sorted(stopped, reverse=True)


def test_the_interval_meets_the_lagrange_condition_and_gives_up_on_fast_pages() -> None:
    value = 10.0
    for rate in (0.001, 0.01, 0.05):
        t = optimal_interval(rate, value)
        assert marginal_value(rate * t) / rate == pytest.approx(value, rel=1e-6)
    # slow pages: about sqrt(2 value / rate), so sooner the faster they change...
    assert optimal_interval(0.0001, value) == pytest.approx(math.sqrt(2 * value / 0.0001), 0.02)
    assert optimal_interval(0.01, value) < optimal_interval(0.001, value)
    # ...until keeping them fresh costs more than it pays: later, then never
    assert optimal_interval(0.095, value) > optimal_interval(0.05, value)
    assert optimal_interval(0.1, value) == optimal_interval(0.0, value) == math.inf


def test_the_adaptive_policy_sends_static_pages_away_and_keeps_slow_changers_close() -> None:
    s = CrawlStrategy(revisit=100.0, min_revisit=1.0, max_revisit=1000.0)
    assert s.revisit_policy == "adaptive"
    first, h = s.plan_revisit(0.0, True, None, now=0.0)
    assert first == 100.0 and h == ChangeHistory(at=0.0)
    static, changing, now = (first, h), (first, h), 0.0
    for _ in range(6):
        now += 100.0
        static = s.plan_revisit(static[0], False, static[1], now)
        changing = s.plan_revisit(changing[0], True, changing[1], now)
    assert static[0] == 1000.0  # never changed: the longest interval, doubling to it
    assert 1.0 < changing[0] < 100.0  # changed at every visit: sooner than --revisit
    assert s.plan_revisit(changing[0], None, changing[1], now) == (1000.0, None)  # gone
    # a page changing far faster than a fetch is worth is given up (longest interval)
    fast = ChangeHistory(20.0, 20.0, 20.0, now)  # changed at each of 20 visits 1 s apart
    assert s.plan_revisit(2.0, True, fast, now + 1.0)[0] == 4.0  # growing at most 2× a visit
    assert s.plan_revisit(800.0, True, fast, now + 1.0)[0] == 1000.0
    uniform = CrawlStrategy(revisit=100.0, revisit_policy="uniform")
    assert uniform.plan_revisit(50.0, True, h, 10.0) == (100.0, None)


def test_the_history_travels_with_the_next_fetch_and_bad_ones_are_refused() -> None:
    task = FetchTask(URL, 7, 2, "127.0.0.1:1", revisit=3.5, history=ChangeHistory(1, 1, 3, 9))
    out = read_outcome(Fetched(task, 200, 1.0, next=task, changed=True).encode())
    assert isinstance(out, Fetched) and out.next == task and out.task == task
    assert FetchTask.decode(task.encode()).history == ChangeHistory(1.0, 1.0, 3.0, 9.0)
    for bad in ([1, 2, 3], [1, 2, 3, -1], [1, "2", 3, 4], [1, 5, 3, 4]):
        raw = task.encode().replace(b"[1,1,3,9]", json.dumps(bad, separators=(",", ":")).encode())
        assert raw != task.encode()
        with pytest.raises(EnvelopeError, match="history"):
            FetchTask.decode(raw)
