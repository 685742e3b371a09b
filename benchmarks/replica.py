"""``python -m srcrawl.benchmarks.replica``: from a commit's publish to its being searchable on
a replica, through a real SeaweedFS on loopback.

An index writer with a publisher (indexer/publisher.py) commits ``--docs`` pages at a
time, ``--commits`` times, into a bucket of its own; a replica (indexer/replica.py) in
another directory follows it in a thread every ``--period`` seconds, as a portal's does.
For each commit: how long ``IndexWriter.commit`` took (Tantivy's commit, merges, and the
publish: new files, then the commit point), and how long after the commit point was put
the replica had fetched the commit's files, installed it and reloaded its reader
(publish-to-searchable), and the same from the start of the commit. Tantivy's merges
make some commits larger than others (a merged segment is fetched whole).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from srcrawl.indexer.engine import IndexDoc, IndexReader, IndexWriter
from srcrawl.indexer.published import IndexObjects
from srcrawl.indexer.publisher import IndexPublisher
from srcrawl.indexer.replica import IndexReplica
from srcrawl.lab.seaweedfs import SeaweedFS


def _docs(rng: random.Random, first: int, n: int, vocabulary: list[str]) -> list[IndexDoc]:
    return [
        IndexDoc(
            fp=fp,
            fetched_at=0.0,
            host=f"h{fp % 50}.test",
            title=" ".join(rng.choices(vocabulary, k=6)),
            body=" ".join(rng.choices(vocabulary, k=300)),
        )
        for fp in range(first, first + n)
    ]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(commits: int, docs: int, period: float, directory: Path) -> dict[str, float]:
    """The figures of one run (seconds), the SeaweedFS started and stopped here."""
    import os

    server = SeaweedFS(directory / "weed").start()
    try:
        os.environ.update(server.env())
        objects = IndexObjects(f"s3://bench-{uuid.uuid4().hex[:12]}/index", "bench")
        work, rep = directory / "work", directory / "replica"
        writer = IndexWriter(work, publisher=IndexPublisher(objects, work))
        writer.start()
        installed = threading.Event()
        reader = IndexReader(rep)
        replica = IndexReplica(objects, rep, period=period)

        def on_commit() -> None:
            reader.reload()
            installed.set()

        replica.on_commit = on_commit
        replica.start()
        rng = random.Random(7)
        vocabulary = [f"w{i}" for i in range(20_000)]
        commit_s, after_publish, after_start, sizes = [], [], [], []
        for c in range(commits):
            batch = _docs(rng, c * docs, docs, vocabulary)
            time.sleep(rng.uniform(0, period))  # commits fall anywhere in a sync period
            installed.clear()
            t0 = time.time()
            writer.replace(batch)
            writer.commit()
            commit_s.append(time.time() - t0)
            published = writer.publisher.published
            while not (replica.held is not None and replica.held.same(published)):
                installed.wait(30)
                installed.clear()
            after_publish.append(replica.searchable_at - published.published_at)
            after_start.append(replica.searchable_at - t0)
            sizes.append(published.bytes)
        assert reader.num_docs() == commits * docs
        replica.stop()
    finally:
        server.stop()
    return {
        "commit_p50_s": statistics.median(commit_s),
        "commit_p95_s": _quantile(commit_s, 0.95),
        "publish_to_searchable_p50_s": statistics.median(after_publish),
        "publish_to_searchable_p95_s": _quantile(after_publish, 0.95),
        "commit_to_searchable_p50_s": statistics.median(after_start),
        "commit_to_searchable_p95_s": _quantile(after_start, 0.95),
        "index_mb": sizes[-1] / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=30)
    parser.add_argument("--docs", type=int, default=1000, help="pages a commit")
    parser.add_argument("--period", type=float, default=1.0, help="the replica's sync period")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="srcrawl-bench-replica-") as tmp:
        figures = run(args.commits, args.docs, args.period, Path(tmp))
    for name, value in figures.items():
        print(f"{name:<30} {value:8.3f}")


if __name__ == "__main__":
    main()
