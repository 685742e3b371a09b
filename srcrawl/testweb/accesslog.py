"""The test web's access log: one JSON object per request, one per line.

Fields: ``host`` (``address:port``), ``host_index``, ``method``, ``path`` (the
request target as sent), ``url`` (its canonical form, or null), ``status``,
``bytes`` (body bytes sent), ``start``/``end`` (wall clock, ``time.time()``),
``start_mono``/``end_mono`` (``time.monotonic()``: CLOCK_MONOTONIC, comparable
between processes of one machine), and ``aborted`` (the client went away
before the response was complete). ``start`` is when the request head was
received, ``end`` when the last byte was handed to the kernel (or the
connection ended). ``agent`` is the request's User-Agent (null without one).
Lines are flushed every ``flush_interval`` seconds and on
shutdown; the file is appended to, never truncated.

:func:`by_host`, :func:`overlaps`, :func:`gaps` and :func:`most_in_flight` are
what politeness checks read: no two requests to one host in flight at once (or
no more than a crawl's per-host limit), no gap below a delay. The server sees a
request from its head to its last byte, within the time the client had it in
flight, so what the log shows in flight at once the client had too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from json.encoder import encode_basestring_ascii as _esc
from pathlib import Path
from typing import Any

from srcrawl.core.defaults import DEFAULT_TESTWEB_LOG_FLUSH
from srcrawl.testweb.model import TestWebError


class AccessLog:
    """Buffers entries in memory and writes them out in batches."""

    def __init__(self, path: str | Path, flush_interval: float = DEFAULT_TESTWEB_LOG_FLUSH) -> None:
        self.path = Path(path)
        self.flush_interval = flush_interval
        self._lines: list[str] = []
        try:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as e:
            raise TestWebError(f"cannot write the access log {self.path}: {e.strerror}") from e

    def record(
        self,
        *,
        host: str,
        host_index: int,
        method: str,
        path: str,
        url: str | None,
        status: int,
        sent: int,
        start: float,
        end: float,
        start_mono: float,
        end_mono: float,
        aborted: bool,
        agent: str | None = None,
    ) -> None:
        """Buffer one entry (formatted by hand: json.dumps of a dict costs 4× more)."""
        self._lines.append(
            f'{{"host":{_esc(host)},"host_index":{host_index},"method":{_esc(method)},'
            f'"path":{_esc(path)},"url":{"null" if url is None else _esc(url)},'
            f'"status":{status},"bytes":{sent},"start":{start!r},"end":{end!r},'
            f'"start_mono":{start_mono!r},"end_mono":{end_mono!r},'
            f'"aborted":{"true" if aborted else "false"},'
            f'"agent":{"null" if agent is None else _esc(agent)}}}'
        )

    def flush(self) -> None:
        if self._lines:
            self._file.write("\n".join(self._lines) + "\n")
            self._lines.clear()
        self._file.flush()

    async def run(self) -> None:
        """Flush every ``flush_interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.flush_interval)
            self.flush()

    def close(self) -> None:
        self.flush()
        self._file.close()


def read_access_log(path: str | Path) -> list[dict[str, Any]]:
    """Every entry written so far, in the order the requests ended."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def by_host(entries: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Entries grouped by host index, each group in order of request start."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        groups.setdefault(e["host_index"], []).append(e)
    for group in groups.values():
        group.sort(key=lambda e: e["start_mono"])
    return groups


def overlaps(entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of requests to one host where the second started before the first ended."""
    found = []
    for group in by_host(entries).values():
        latest_end: dict[str, Any] | None = None
        for e in group:
            if latest_end is not None and e["start_mono"] < latest_end["end_mono"]:
                found.append((latest_end, e))
            if latest_end is None or e["end_mono"] > latest_end["end_mono"]:
                latest_end = e
    return found


def gaps(entries: list[dict[str, Any]]) -> dict[int, list[float]]:
    """Per host index: seconds from the end of each request to the start of the next one."""
    return {
        host: [b["start_mono"] - a["end_mono"] for a, b in itertools.pairwise(group)]
        for host, group in by_host(entries).items()
    }


def most_in_flight(entries: list[dict[str, Any]]) -> dict[int, int]:
    """Per host index: the most requests it had in flight at one moment.

    A request that ends at the very moment another starts does not overlap it.
    """
    out: dict[int, int] = {}
    for host, group in by_host(entries).items():
        # at equal times an end (0) sorts before a start (1)
        events = sorted([(e["start_mono"], 1) for e in group] + [(e["end_mono"], 0) for e in group])
        now = most = 0
        for _t, starts in events:
            now += 1 if starts else -1
            most = max(most, now)
        out[host] = most
    return out


def mean_in_flight(entries: list[dict[str, Any]]) -> float:
    """Requests in flight at the web on average, from the first request's start to the last
    one's end (0 without any): how full a crawl kept the slots it may use."""
    if not entries:
        return 0.0
    start = min(e["start_mono"] for e in entries)
    end = max(e["end_mono"] for e in entries)
    busy = sum(e["end_mono"] - e["start_mono"] for e in entries)
    return busy / (end - start) if end > start else 0.0


def idle_stretches(entries: list[dict[str, Any]]) -> list[float]:
    """Seconds of each stretch with no request in flight at all, from the first request's
    start to the last one's end, longest first: what a crawl spent waiting on nothing the
    web did (back-offs, politeness, its own pauses)."""
    spans = sorted((e["start_mono"], e["end_mono"]) for e in entries)
    out = []
    reach = None
    for start, end in spans:
        if reach is not None and start > reach:
            out.append(start - reach)
        reach = end if reach is None else max(reach, end)
    return sorted(out, reverse=True)
