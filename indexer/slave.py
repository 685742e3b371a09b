"""The index slave: page ids in, the pages' tokens out [Redis engine §3.2].

Per task (a batch of page ids): read the pages' text from the store, take
out the host's boilerplate, tokenize with jieba, and answer with one
documents message for the whole batch (indexer/documents.py). The slave
writes nothing: the index master is the index's single writer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from srcrawl.core.defaults import DEFAULT_INDEX_MAX_CHARS, SNIPPET_TEXT_CHARS
from srcrawl.core.errors import EnvelopeError
from srcrawl.core.urls import host_of
from srcrawl.indexer.boilerplate import HostBoilerplate
from srcrawl.indexer.documents import pack, simhash, text_digest
from srcrawl.indexer.engine import IndexDoc
from srcrawl.indexer.language import detect_language
from srcrawl.indexer.protocol import DocumentsResult, IndexTask, Refusal
from srcrawl.indexer.search import meaning
from srcrawl.indexer.text import fold_aligned
from srcrawl.indexer.tokenizer import Tokenizer, get_tokenizer, user_dict_from_env
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.sql.store import Store

MAX_ANCHOR_FIELD_CHARS = 16_000
"""Characters of anchor text indexed per page (the texts of MAX_ANCHORS_PER_PAGE links)."""


def document_text(title: str, text: str, limit: int = DEFAULT_INDEX_MAX_CHARS) -> str:
    """What of a page is indexed: its title and text, cut at ``limit`` characters."""
    return f"{title}\n{text}"[:limit]


def tokenize_document(
    tokenizer: Tokenizer,
    fp: int,
    fetched_at: float,
    host: str,
    title: str,
    text: str,
    *,
    boilerplate: str = "",
    anchor_text: str = "",
) -> IndexDoc:
    """One page as the index holds it: its own text (``text``), the text its host repeats
    (``boilerplate``), title and anchor text as fields, each its tokens joined by spaces;
    the own text also as written, for snippets, and the language it is written in."""
    tokens = tokenizer.tokens
    text = text[:DEFAULT_INDEX_MAX_CHARS]
    own = tokens(text)
    boiler = tokens(boilerplate[: max(0, DEFAULT_INDEX_MAX_CHARS - len(text))])
    body = own + boiler
    idents = tokenizer.identifiers(f"{title}\n{text}")
    shown = " ".join(text[:SNIPPET_TEXT_CHARS].split())  # collapsed: snippets trust it
    folded = fold_aligned(shown)
    return IndexDoc(
        fp=fp,
        fetched_at=fetched_at,
        host=host,
        title=" ".join(tokens(title)),
        body=" ".join(own),
        boiler=" ".join(boiler),
        anchor=" ".join(tokens(anchor_text[:MAX_ANCHOR_FIELD_CHARS])),
        ident=" ".join(idents),
        digest=text_digest(body),
        simhash=simhash(body),
        text=shown,
        folded=folded if folded != shown else "",
        lang=detect_language(title, shown),
    )


def with_vectors(docs: Sequence[IndexDoc], titles: Sequence[str]) -> None:
    """Each document's vector in the meaning model (indexer/search/meaning.py), made from
    its title (as written, ``titles``) and own text, in one batch; a Chinese page has
    none (the model's words are English), nor has any when the model is not installed."""
    chosen = [i for i, d in enumerate(docs) if d.lang != "zh"]
    packed = meaning.page_vectors([(titles[i], docs[i].text) for i in chosen])
    for i, vector in zip(chosen, packed, strict=True):
        docs[i].meaning = vector


class IndexHandler:
    """Serves the ``index`` phase in ``srcrawl slave start``.

    One task per pop and one thread: tokenizing is CPU-bound Python, so more
    threads would only contend for the GIL; run more slave processes instead.
    """

    phase = "index"
    batch_size = 1
    threads = 1

    def __init__(self, store: Store, *, user_dict: str | None = None) -> None:
        """``store``: where the pages are read; ``user_dict``: jieba's user dictionary
        (None: ``SRCRAWL_USER_DICT``)."""
        self.store = store
        self.boilerplate = HostBoilerplate(self.store)
        self.tokenizer = get_tokenizer(user_dict if user_dict is not None else user_dict_from_env())
        # load jieba now: the first batch then costs what every batch costs,
        # and the heartbeat never waits behind a dictionary load
        self.tokenizer.warm_up()
        # and the embedding model (what a query means): about 0.3 s and 100 MB, spent
        # here for the reason jieba's dictionary is
        meaning.available()
        self.pages = 0
        self.terms = 0
        self.refused = 0
        self.busy_s = 0.0
        self.cpu_s = 0.0  # CPU time of this process's consumer thread inside handle()
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: Config, *, user_dict: str | None = None) -> IndexHandler:
        """The handler of the configured store."""
        return cls(cfg.store(), user_dict=user_dict)

    def handle(self, tasks: list[bytes]) -> list[bytes]:
        """One result per task: the documents, or a refusal naming the reason."""
        t0, c0 = time.perf_counter(), time.thread_time()
        results = [self._one(raw) for raw in tasks]
        with self._lock:
            self.busy_s += time.perf_counter() - t0
            self.cpu_s += time.thread_time() - c0
        return results

    def _one(self, raw: bytes) -> bytes:
        try:
            task = IndexTask.decode(raw)
        except EnvelopeError as e:
            return self._refuse(None, str(e))
        if task.dictionary != self.tokenizer.dictionary_id:
            return self._refuse(
                task.batch,
                f"user dictionary {self.tokenizer.dictionary_id or 'none'} on this slave, "
                f"{task.dictionary or 'none'} on the master (set SRCRAWL_USER_DICT alike)",
            )
        docs = self.tokenize(task.fps)
        with self._lock:
            self.pages += len(docs)
            self.terms += sum(d.body.count(" ") + 1 for d in docs if d.body)
        missing = len(set(task.fps)) - len(docs)
        return DocumentsResult(task.batch, len(docs), missing, pack(docs)).encode()

    def tokenize(self, fps: list[int]) -> list[IndexDoc]:
        """The documents of the stored pages among ``fps``, fields and boilerplate found."""
        anchors = self.store.anchor_texts(fps)
        docs, titles = [], []
        for fp, fetched_at, url, title, text in self.store.index_documents(fps):
            host = host_of(url)
            own, boiler = self.boilerplate.split(host, text)
            anchor_text = "\n".join(anchors.get(fp, ()))
            doc = tokenize_document(
                self.tokenizer,
                fp,
                fetched_at,
                host,
                title,
                own,
                boilerplate=boiler,
                anchor_text=anchor_text,
            )
            docs.append(doc)
            titles.append(title)
        with_vectors(docs, titles)
        return docs

    def _refuse(self, batch: int | None, reason: str) -> bytes:
        with self._lock:
            self.refused += 1
        return Refusal(batch, reason).encode()

    def stats(self) -> dict[str, float]:
        with self._lock:
            return {
                "pages": self.pages,
                "terms": self.terms,
                "refused": self.refused,
                "busy_s": round(self.busy_s, 3),
                "cpu_s": round(self.cpu_s, 3),
            }
