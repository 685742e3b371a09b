"""A load generator for the test web: keep-alive connections on asyncio, requests per second.

Each connection sends one GET at a time (no pipelining, like a crawler's
fetch thread), cycling over the regular pages of its host, until the time is
up; responses are read completely (Content-Length).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from srcrawl.testweb.model import Web
from srcrawl.testweb.urls import target_of


@dataclass(frozen=True)
class LoadResult:
    requests: int
    errors: int
    seconds: float
    connections: int
    latencies_ms: tuple[float, ...]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def render(self) -> str:
        return (
            f"{self.requests} requests in {self.seconds:.2f} s over {self.connections} "
            f"keep-alive connections: {self.rate:,.0f} requests/s, "
            f"p50 {self.percentile(0.5):.2f} ms, p99 {self.percentile(0.99):.2f} ms, "
            f"{self.errors} errors"
        )


def page_targets(web: Web, host_index: int) -> list[str]:
    """Request targets of the ordinary 200 pages of one host (what the load cycles over)."""
    origin = web.hosts[host_index].origin
    return [
        target_of(url)
        for url, page in sorted(web.pages.items())
        if url.startswith(origin + "/")
        and page.template in ("regular", "root", "leaf")
        and page.behavior == "normal"
        and page.status == 200
    ]


async def timed_get(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, target: str
) -> tuple[bool, float]:
    """One GET on a kept-alive connection, its response read whole (Content-Length):
    whether it answered 200, and the milliseconds it took."""
    t0 = time.perf_counter()
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return head.startswith(b"HTTP/1.1 200"), (time.perf_counter() - t0) * 1000


async def _connection(web: Web, index: int, deadline: float, out: list, lat: list) -> None:
    host = web.hosts[index % len(web.hosts)]
    targets = page_targets(web, host.index)
    reader, writer = await asyncio.open_connection(host.address, host.port)
    name = f"{host.address}:{host.port}"
    requests = errors = 0
    i = index
    try:
        while time.monotonic() < deadline:
            ok, ms = await timed_get(reader, writer, name, targets[i % len(targets)])
            i += 1
            lat.append(ms)
            if ok:
                requests += 1
            else:
                errors += 1
    finally:
        writer.close()
        out.append((requests, errors))


async def run_load(web: Web, seconds: float, connections: int) -> LoadResult:
    """Load ``web`` (already served) for ``seconds`` with ``connections`` connections."""
    out: list[tuple[int, int]] = []
    lat: list[float] = []
    start = time.monotonic()
    deadline = start + seconds
    await asyncio.gather(*(_connection(web, i, deadline, out, lat) for i in range(connections)))
    elapsed = time.monotonic() - start
    return LoadResult(
        requests=sum(r for r, _ in out),
        errors=sum(e for _, e in out),
        seconds=elapsed,
        connections=connections,
        latencies_ms=tuple(lat),
    )


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None where /proc is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
