"""The index phase's messages: tasks in ``srq``, results in ``nrq``.

- task ``index-batch``: ``{"batch": serial, "fps": [page ids], "dict": id}``,
  header only (so the runtime's ``error`` report, which joins the raw tasks
  with newlines, can be split back into tasks).
- result ``postings``: ``{"batch", "tag", "docs", "missing"}`` and the packed
  postings of the batch's pages (:mod:`srcrawl.indexer.postings`).
- result ``index-refused``: ``{"batch", "tag", "reason"}``, a task the slave
  will not do (another user dictionary, a malformed task).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from srcrawl.errors import EnvelopeError
from srcrawl.queues.envelope import decode, encode

TASK = "index-batch"
POSTINGS = "postings"
REFUSED = "index-refused"


@dataclass(frozen=True)
class IndexTask:
    batch: int
    fps: list[int]
    dictionary: str = ""


def encode_task(batch: int, fps: Sequence[int], dictionary: str) -> bytes:
    return encode(TASK, {"batch": batch, "fps": list(fps), "dict": dictionary})


def decode_task(raw: bytes) -> IndexTask:
    """The task in ``raw``; raise EnvelopeError if it is not an index task."""
    msg = decode(raw)
    fps = msg.get("fps")
    batch = msg.get("batch")
    if (
        msg.kind != TASK
        or not isinstance(batch, int)
        or not isinstance(fps, list)
        or not all(isinstance(fp, int) and -(2**63) <= fp < 2**63 for fp in fps)
    ):
        raise EnvelopeError(f"not an index task: {raw[:60]!r}")
    return IndexTask(batch, fps, str(msg.get("dict", "")))
