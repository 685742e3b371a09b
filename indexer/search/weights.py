"""The weights of a ranking, in one object a Searcher is given.

Each weight is a signal of the ranking that is chosen at query time, so a
ranking can be measured with other weights on the same index
(``srcrawl bench loco``): the fields a word is matched in, an identifier found
whole, the PageRank prior, the tier of pages short of a word, words near each
other, a word's idf in the whole page, and the signals measured and left off.
Each was chosen by leaving one corpus out; the title, words near each other, the
whole page's idf and the share of pages short of a word were chosen together
(``bench loco --joint``), and so were the weights of long queries, a user's task or
question in their own words (``bench loco --long``; docs/search.md, "Why these
weights").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from srcrawl.core.defaults import DEFAULT_RANK_WEIGHT, LONG_QUERY_WORDS, SOME_WORDS_SHARE

TEXT_FIELDS = ("title", "body", "anchor", "boiler")
"""The text fields a word is matched in, each weighed by the field of that name."""


@dataclass(frozen=True)
class RankWeights:
    """How much each signal counts (a field weight of 0 leaves the field out of matching).

    The field weights say how much a match in each field counts against one in the
    page's own text (each field scores BM25 on its own; a word's score is their sum).
    """

    title: float = 1.0  # (3 until the weights were chosen together)
    body: float = 1.0
    anchor: float = 2.0  # the text of the links to the page
    boiler: float = 0.2  # the host's repeated text (indexer/boilerplate.py)
    ident: float = 1.0  # (4 until long queries had their own weights: bench loco chose 1)
    """An identifier found whole: the page names ``pg_hba.conf`` itself, not ``pg`` near
    ``hba``."""
    exact: float = 0.5  # (chosen by bench loco)
    """The share of a word's weight in the page's text that goes to the word as typed (the
    ``exact`` field, the title's and the text's words not stemmed); the rest stays with
    its stem. At 0.5 a page saying "difference" scores as before for it, and one saying
    only "different" (one stem to Snowball) half as much in its text. Only words the
    stemmer can change (ASCII letters and digits) are split so; 0: stems alone. Below 1."""
    rank: float = DEFAULT_RANK_WEIGHT
    """How much PageRank can raise a score (indexer/search/collect.py); 0: no prior."""
    some_words: float = SOME_WORDS_SHARE
    """What a page short of a word counts against pages with every word; 0: such pages
    are listed after every page with every word."""
    hub: float = 0.0
    """How much a page that links to many pages (a table of contents, an index) is lowered:
    by less than this fraction, a page with the mean number of out-links by half of it;
    0: not at all. Measured, not used (docs/search.md, "Why these weights")."""
    near: float = 1.0
    """How much two words of the query next to each other in it count when a page's text
    has them within NEAR_SLOP words of each other too (a sloppy phrase of each such pair,
    boosted by this, added to a page with every word); 0: not at all."""
    shared_idf: float = 0.5
    """How far a word's match in each field is weighed by its idf in the whole page rather
    than in that field alone (indexer/search/query.py's ``shared_idf``): 0, the field's
    own idf (Tantivy's); 1, the page's, as BM25F weighs it. Between, a word of many
    pages' text counts for less in a title or a link, where its own field would make it
    rare."""
    tie: float = 1.0
    """How much a word's match in its other fields counts beside its best field's: 1, the
    fields' scores summed; below 1, Tantivy's disjunction max with this tie-breaker, so
    that a word in a page's title, links and text counts little more than in one of
    them, and a page with more of the query's words comes first. Measured, not used
    (docs/search.md, "Why these weights")."""
    long_title: float = 0.1
    """The title's weight in a query of LONG_QUERY_WORDS words or more (at ``title``'s, a
    long query weighs it as a short one does). Such a query is mostly a task or a question
    in the user's words: the page that answers it holds most of them in its text, while a
    title or the links to a page that name one of them (a page about logs, for "log in")
    speak of the page's subject, not of the task. (Chosen: 0; 0.1 ranks within 0.002 of
    its MRR@10 on every corpus, and a word that only a title holds still finds its
    page.)"""
    long_anchor: float = 1.0
    """The anchor text's weight in a query of LONG_QUERY_WORDS words or more (see
    :attr:`long_title`)."""
    some_words_rise: float = 1.0
    """How far the share of a page short of a word rises with the query's words: the share
    is ``some_words`` for two words and, at 1, 1 − (1 − some_words)·2/n for n words
    (with a share of 0.5, (n − 1)/n: a page short of one word of six counts five sixths,
    as Lucene's classic coordination factor has it); 0: the same share whatever the
    query's length."""
    meaning: float = 0.5
    """How much what a query means counts: its cosine with a page's vector, added to the
    page's score over the best score of the pool it reorders (indexer/search/meaning.py;
    a query in English, an index that keeps its pages' vectors); 0: not at all."""

    def for_words(self, words: int) -> RankWeights:
        """The weights of a query of ``words`` words: those of long queries from
        LONG_QUERY_WORDS on."""
        if words < LONG_QUERY_WORDS or (self.title, self.anchor) == (
            self.long_title,
            self.long_anchor,
        ):
            return self
        return replace(self, title=self.long_title, anchor=self.long_anchor)

    def some_share(self, words: int) -> float:
        """The share of its score a page short of a word counts, in a query of ``words``
        words (:attr:`some_words_rise`)."""
        if self.some_words <= 0 or self.some_words_rise <= 0 or words <= 2:
            return self.some_words
        return self.some_words + self.some_words_rise * (1 - self.some_words) * (1 - 2 / words)

    def fields(self) -> dict[str, float]:
        """Each text field a word is matched in, with its weight (those weighed 0 left out:
        a page is not found by them)."""
        return {f: w for f in TEXT_FIELDS if (w := getattr(self, f)) > 0}


DEFAULT_WEIGHTS = RankWeights()
