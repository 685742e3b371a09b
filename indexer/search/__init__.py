"""Search over the index, in seams that each do one thing.

``srcrawl search`` and the portal ask a :class:`Searcher`; a query goes
through these modules in order:

- ``weights``: how much each signal of the ranking counts, one object a
  searcher is given;
- ``query``: what was typed (words, "phrases", -word, site:) into Tantivy
  queries, its words tokenized and stemmed as pages are, within the limits of
  a query (an unusable one is a QueryError);
- ``searcher``: the Tantivy queries of a search (pages with every word, then
  with some), the pool widened until the ranking is exact;
- ``collect``: each tier's hits with the PageRank prior blended in,
  duplicates collapsed, the tiers merged;
- ``hits``: the hits shown, read from the store, each with its snippet;
- ``snippets`` and ``terms``: a window of the page's own text around the
  query terms, and where the terms are in it;
- ``suggest``: for a word no page holds, the nearest the index has (a "did
  you mean");
- ``completion``: apart from a search, the words and titles that complete a
  query being typed (the portal's search box), built once per commit.

Text is folded, and Chinese told apart, as indexer/text.py says, for the
tokenizer and the snippets alike.
"""

from srcrawl.indexer.search.hits import Hit
from srcrawl.indexer.search.query import QueryError
from srcrawl.indexer.search.searcher import Searcher, SearchResult

__all__ = ["Hit", "QueryError", "SearchResult", "Searcher"]
