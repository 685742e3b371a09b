"""The index phase's messages: tasks in ``srq``, results in ``nrq``.

- task ``index-batch`` (:class:`IndexTask`): ``{"batch": serial, "fps": [page
  ids], "dict": id}``, header only (so the runtime's ``error`` report, which
  joins the raw tasks with newlines, can be split back into tasks).
- result ``documents`` (:class:`DocumentsResult`): ``{"batch", "docs",
  "missing"}`` and the batch's pages as tokens
  (:mod:`srcrawl.indexer.documents`).
- result ``index-refused`` (:class:`Refusal`): ``{"batch", "reason"}``, a task
  the slave will not do (another user dictionary, a malformed task).
- result ``error``: the runtime's report of a handler that failed on tasks.

The master trusts the format, not the sender: a result that is not well
formed raises EnvelopeError when read, and is dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from srcrawl.core.errors import EnvelopeError
from srcrawl.queues.envelope import Message, decode, encode

TASK = "index-batch"
DOCUMENTS = "documents"
REFUSED = "index-refused"
ERROR = "error"


def _batch(msg: Message, *, optional: bool = False) -> int | None:
    batch = msg.get("batch")
    if batch is None and optional:
        return None
    if not isinstance(batch, int) or isinstance(batch, bool):
        raise EnvelopeError(f"{msg.kind} message has no integer 'batch'")
    return batch


@dataclass(frozen=True)
class IndexTask:
    """Tokenize the pages ``fps`` with the user dictionary ``dictionary``."""

    batch: int
    fps: list[int]
    dictionary: str = ""

    def encode(self) -> bytes:
        return encode(TASK, {"batch": self.batch, "fps": list(self.fps), "dict": self.dictionary})

    @classmethod
    def decode(cls, raw: bytes) -> IndexTask:
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
        return cls(batch, fps, str(msg.get("dict", "")))


@dataclass(frozen=True)
class DocumentsResult:
    """The packed documents of a task's pages; ``missing`` of its pages were not stored."""

    batch: int
    docs: int
    missing: int
    payload: bytes

    def encode(self) -> bytes:
        fields = {"batch": self.batch, "docs": self.docs, "missing": self.missing}
        return encode(DOCUMENTS, fields, self.payload)

    @classmethod
    def from_message(cls, msg: Message) -> DocumentsResult:
        missing = msg.get("missing", 0)
        if not isinstance(missing, int) or missing < 0:
            raise EnvelopeError("documents message has no count 'missing'")
        return cls(_batch(msg), int(msg.get("docs", 0) or 0), missing, msg.payload)


@dataclass(frozen=True)
class Refusal:
    """A task the slave will not do; ``batch`` is None when the task was unreadable."""

    batch: int | None
    reason: str

    def encode(self) -> bytes:
        return encode(REFUSED, {"batch": self.batch, "reason": self.reason})

    @classmethod
    def from_message(cls, msg: Message) -> Refusal:
        return cls(_batch(msg, optional=True), str(msg.get("reason", "")))


def failed_tasks(msg: Message) -> list[IndexTask]:
    """The index tasks an ``error`` report names (its payload: the raw tasks, one a line)."""
    tasks = []
    for raw in msg.payload.split(b"\n"):
        try:
            tasks.append(IndexTask.decode(raw))
        except EnvelopeError:
            continue
    return tasks
