"""How long reading one page's record takes: local WARC files against objects of a real
SeaweedFS, the objects with a cold cache (a reader that keeps no block: each read is one
ranged GET) and a warm one (a reader that read them all before).

Pages of real documentation (Debian's ``python3-doc`` HTML, or generated pages when it is
not installed) are written as a slave writes them (:class:`WarcOutput`, 4 MB files), once
to a directory and once published to the store; then ``--reads`` records, drawn at random,
are read back by their pointers (:func:`read_payload`: one ranged read, the record
decompressed), each read timed.

    python -m srcrawl.benchmarks.record_reads [--pages 2000] [--reads 400]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from srcrawl.lab.seaweedfs import SeaweedFS
from srcrawl.warc.objects import ObjectWarcStorage
from srcrawl.warc.output import WarcOutput
from srcrawl.warc.read import read_payload
from srcrawl.warc.records import prepare_fetch
from srcrawl.warc.storage import LocalWarcStorage, Pointer, WarcStorage

DOCS = Path("/usr/share/doc/python3/html")
FILE_BYTES = 4 << 20  # a published object's size


def _bodies(pages: int) -> list[bytes]:
    """Real pages where Debian's python3-doc is installed, else generated ones of the same
    size order (14 KB of text)."""
    files = sorted(DOCS.rglob("*.html"))[:pages] if DOCS.is_dir() else []
    if files:
        return [f.read_bytes() for f in files]
    rng = random.Random(7)
    words = [f"word{i}" for i in range(5000)]
    return [
        f"<html><title>{i}</title><p>{' '.join(rng.choices(words, k=2000))}</p></html>".encode()
        for i in range(pages)
    ]


def _write(storage: WarcStorage, bodies: Sequence[bytes]) -> list[Pointer]:
    out = WarcOutput(storage, "bench", max_bytes=FILE_BYTES, max_age=3600)
    fetches = [
        prepare_fetch(
            f"http://127.0.0.1:1/p{i}.html",
            status=200,
            headers={"content-type": "text/html"},
            body=body,
            ip="127.0.0.1",
            fetched_at=1.7e9 + i,
            request=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            text="",
        )
        for i, body in enumerate(bodies)
    ]
    placed = out.append([f.records() for f in fetches], durable=True)
    out.sync()
    out.publish_due(final=True)
    out.close()
    return [p[1] for p in placed]


def _timed(storage: WarcStorage, pointers: Sequence[Pointer], want: Callable) -> list[float]:
    times = []
    for p in pointers:
        t0 = time.perf_counter()
        body = read_payload(storage, p)
        times.append((time.perf_counter() - t0) * 1000)
        assert body == want(p)
    return times


def _row(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=20)
    return f"{name:22} {statistics.median(ms):8.3f} {q[18]:8.3f} {len(ms):6d}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--reads", type=int, default=400)
    args = ap.parse_args()
    bodies = _bodies(args.pages)
    with (
        tempfile.TemporaryDirectory(prefix="srcrawl-reads-") as tmp,
        SeaweedFS(Path(tmp) / "weed").running(),
    ):
        local = LocalWarcStorage(Path(tmp) / "warc")
        local_ptrs = _write(local, bodies)
        objects = ObjectWarcStorage("s3://bench-reads/warc", Path(tmp) / "spool")
        object_ptrs = _write(objects, bodies)
        rng = random.Random(1)
        picks = [rng.randrange(len(bodies)) for _ in range(args.reads)]
        by_ptr = {}
        for i, (a, b) in enumerate(zip(local_ptrs, object_ptrs, strict=True)):
            by_ptr[a] = by_ptr[b] = bodies[i]
        chosen = [object_ptrs[i] for i in picks]
        url, spool = "s3://bench-reads/warc", Path(tmp) / "reader"
        # cold: a reader that keeps no block, so each read is a ranged GET (the
        # objects' sizes, a HEAD each, are learnt once first, as any reader does)
        cold_reader = ObjectWarcStorage(url, spool, cache_bytes=0)
        _timed(cold_reader, [object_ptrs[0]], by_ptr.get)
        for name in {p.file for p in object_ptrs}:
            cold_reader._size(name)
        cold = _timed(cold_reader, chosen, by_ptr.get)
        warm = ObjectWarcStorage(url, spool)
        _timed(warm, chosen, by_ptr.get)
        rows = [
            _row("local file", _timed(local, [local_ptrs[i] for i in picks], by_ptr.get)),
            _row("object, cold cache", cold),
            _row("object, warm cache", _timed(warm, chosen, by_ptr.get)),
        ]
        objects_n = len({p.file for p in object_ptrs})
    mean = sum(map(len, bodies)) / len(bodies)
    print(f"{len(bodies)} pages ({mean / 1024:.1f} KiB a body) in {objects_n} objects")
    print(f"{'read of one record':22} {'p50 ms':>8} {'p95 ms':>8} {'reads':>6}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
