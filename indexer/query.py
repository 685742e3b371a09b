"""What users type, as Tantivy queries.

Syntax: words (every word wanted, see below), ``"a phrase"`` (those words
next to each other, in that order), ``-word`` and ``-"a phrase"`` (pages
without them), ``site:host`` (pages of that host or its subdomains; several
``site:`` mean any of them; ``-site:host`` leaves a host out).

A query's words are tokenized as pages are (indexer/tokenizer.py) and each
becomes a *unit*: one word matched in the title, body, anchor text or the
host's repeated text, each field weighed (:data:`FIELD_BOOSTS`), stemmed as
the index is; an identifier (``pg_hba.conf``) is matched whole in the
``ident`` field or as the phrase of its parts; a long Chinese word also by
the shorter words jieba's search mode finds in it, weighed less. A Chinese
character standing alone in the query (用, 到) is wanted, not required
(:func:`_lone_han`). A phrase is a unit too. The required query holds every
unit; the fill query (pages with some of the words) any of them, but still
every phrase, ``site:`` and exclusion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tantivy

from srcrawl.indexer.engine import schema, site_values, stem
from srcrawl.indexer.tokenizer import Tokenizer, normalize

Occur = tantivy.Occur
Query = tantivy.Query

FIELD_BOOSTS = {"title": 3.0, "body": 1.0, "anchor": 2.0, "boiler": 0.2}
"""How much a match in each field counts against one in the page's own text (each field
scores BM25 on its own; a unit's score is their sum)."""
IDENT_BOOST = 4.0
"""An identifier found whole: the page names ``pg_hba.conf`` itself, not ``pg`` near ``hba``."""
SEARCH_PART_BOOST = 0.3
"""A shorter word inside a long Chinese query word, found where the long word is not."""
LONE_HAN_BOOST = 0.3
"""A Chinese character jieba leaves standing alone in a query (用, 到, 下): wanted, not
required (see :func:`_lone_han`)."""
PHRASE_FIELDS = ("title", "body", "anchor")

_PIECE = re.compile(r'(-?)"([^"]*)"?|(-?)site:(\S+)|(\S+)')


@dataclass
class ParsedQuery:
    """A query's parts as typed."""

    words: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # words and phrases
    sites: list[str] = field(default_factory=list)
    excluded_sites: list[str] = field(default_factory=list)


def parse(text: str) -> ParsedQuery:
    """Split what was typed into words, phrases, exclusions and sites."""
    parsed = ParsedQuery()
    for m in _PIECE.finditer(text):
        neg_phrase, phrase, neg_site, site, word = m.groups()
        if phrase is not None:
            (parsed.excluded if neg_phrase else parsed.phrases).append(phrase)
        elif site is not None:
            host = site.strip().lower().rstrip("/")
            (parsed.excluded_sites if neg_site else parsed.sites).append(host)
        elif word.startswith("-") and len(word) > 1:
            parsed.excluded.append(word[1:])
        else:
            parsed.words.append(word)
    return parsed


Clauses = list[tuple[Occur, Query]]


def _fields_clauses(term: str, boost: float = 1.0) -> Clauses:
    """``term`` (a token) in each text field, weighed: a boosted term query a field.

    The term queries read frequencies only: BM25 needs no positions, and reading them (the
    bindings' default) decoded them for nothing and kept the index's position files in
    every portal worker's memory (docs/benchmarks-journal.md, "Words read frequencies, not
    positions")."""
    s, stemmed = schema(), stem(term)
    return [
        (Occur.Should, Query.boost_query(Query.term_query(s, f, stemmed, "freq"), w * boost))
        for f, w in FIELD_BOOSTS.items()
    ]


def _fields_query(term: str, boost: float = 1.0) -> Query:
    """``term`` (a token) in any text field, each field weighed."""
    return Query.boolean_query(_fields_clauses(term, boost))


def _phrase_query(tokens: list[str]) -> Query:
    """The tokens next to each other in the title, body or anchor text."""
    s, stems = schema(), [stem(t) for t in tokens]
    subs = [
        (Occur.Should, Query.boost_query(Query.phrase_query(s, f, stems), FIELD_BOOSTS[f]))
        for f in PHRASE_FIELDS
    ]
    return Query.boolean_query(subs)


@dataclass
class Units:
    """A query's units (see the module doc), what they search for, and the rest."""

    required: list[Query] = field(default_factory=list)  # words and identifiers
    # each required unit's boosted term queries (its score is their sum), or None for a
    # unit that is more than terms (an identifier's phrase)
    required_terms: list[Clauses | None] = field(default_factory=list)
    optional: list[Query] = field(default_factory=list)  # lone Chinese characters
    optional_terms: list[Clauses] = field(default_factory=list)
    phrases: list[Query] = field(default_factory=list)
    excluded: list[Query] = field(default_factory=list)
    sites: list[Query] = field(default_factory=list)
    excluded_sites: list[Query] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)  # every token searched for (snippets)

    @property
    def positive(self) -> int:
        return len(self.required) + len(self.phrases)

    def keep_required(self, n: int) -> None:
        """Keep the first ``n`` required units (and their terms)."""
        del self.required[n:], self.required_terms[n:], self.terms[n:]


def _lone_han(token: str) -> bool:
    """A query token of one Chinese character. jieba keeps content words whole (备份,
    稳定版), so a character it leaves alone in a query is mostly a function word or a
    verb particle (用 rsync 备份, 迁移到, 升级到下一个): a page answers such a query
    whether or not it says 用 or 到 as a word of its own (it may write 使用, 通过), and
    required, the character filtered the answer out and left the pages that list many
    titles (a table of contents). So it only adds to a score. A query of nothing but
    such characters still requires them.
    """
    return len(token) == 1 and "\u4e00" <= token <= "\u9fff"


def _word_units(tokenizer: Tokenizer, word: str, units: Units) -> None:
    idents = tokenizer.identifiers(word)
    if idents and idents[0] == normalize(word).strip(".,;:!?()[]{}'"):
        parts = tokenizer.tokens(word)
        ident = Query.boost_query(Query.term_query(schema(), "ident", idents[0]), IDENT_BOOST)
        alternatives = [(Occur.Should, ident)]
        if parts:
            alternatives.append((Occur.Should, _phrase_query(parts)))
        units.required.append(Query.boolean_query(alternatives))
        units.required_terms.append(None)
        units.terms.append(idents[0])  # (its parts alone are not marked in snippets)
        return
    for token in tokenizer.tokens(word):
        if token in units.terms:
            continue
        units.terms.append(token)
        if _lone_han(token):
            clauses = _fields_clauses(token, LONE_HAN_BOOST)
            units.optional.append(Query.boolean_query(clauses))
            units.optional_terms.append(clauses)
            continue
        clauses = _fields_clauses(token)
        for p in tokenizer.search_parts(token):
            clauses += _fields_clauses(p, SEARCH_PART_BOOST)
        units.required.append(Query.boolean_query(clauses))
        units.required_terms.append(clauses)


def _phrase_unit(tokenizer: Tokenizer, text: str) -> tuple[Query | None, list[str]]:
    tokens = tokenizer.tokens(text)
    if not tokens:
        return None, []
    if len(tokens) == 1:
        return _fields_query(tokens[0]), tokens
    return _phrase_query(tokens), tokens


def units_of(tokenizer: Tokenizer, parsed: ParsedQuery) -> Units:
    """The units of a parsed query."""
    units = Units()
    for word in parsed.words:
        _word_units(tokenizer, word, units)
    if not units.required and not parsed.phrases:
        # nothing but lone characters ("书"): they are what is searched for
        units.required, units.optional = units.optional, []
        units.required_terms, units.optional_terms = list(units.optional_terms), []
    for phrase in parsed.phrases:
        q, tokens = _phrase_unit(tokenizer, phrase)
        if q is not None:
            units.phrases.append(q)
            units.terms += [t for t in tokens if t not in units.terms]
    for text in parsed.excluded:
        q, _tokens = _phrase_unit(tokenizer, text)
        if q is not None:
            units.excluded.append(q)
    s = schema()
    for host in parsed.sites:
        units.sites.append(Query.term_query(s, "site", site_values(host)[0]))
    for host in parsed.excluded_sites:
        units.excluded_sites.append(Query.term_query(s, "site", site_values(host)[0]))
    return units


def _filters(units: Units) -> list[tuple[Occur, Query]]:
    """Every phrase, one of the sites, none of the exclusions."""
    clauses = [(Occur.Must, q) for q in units.phrases]
    if units.sites:
        any_site = Query.boolean_query([(Occur.Should, q) for q in units.sites])
        clauses.append((Occur.Must, Query.const_score_query(any_site, 0.0)))
    clauses += [(Occur.MustNot, q) for q in units.excluded + units.excluded_sites]
    return clauses


def every_word(units: Units) -> Query:
    """Pages with every unit (and the filters)."""
    if len(units.required) == 1 and flat(units) and not units.optional:
        # one plain word: its term queries themselves, which Tantivy prunes by block-max
        # WAND (wrapped as a required clause, it scores every page that holds the word)
        return Query.boolean_query(units.required_terms[0])
    clauses = [(Occur.Must, q) for q in units.required] + _filters(units)
    clauses += [(Occur.Should, q) for q in units.optional]
    if not units.positive:  # only site: (and exclusions): every page of the site
        clauses.append((Occur.Must, Query.const_score_query(Query.all_query(), 1.0)))
    return Query.boolean_query(clauses)


def flat(units: Units) -> bool:
    """Whether every unit is a plain word (its score the sum of its term queries'): no
    phrase, identifier, ``site:`` or exclusion."""
    return (
        bool(units.required)
        and None not in units.required_terms
        and not units.phrases
        and not _filters(units)
    )


def some_words(units: Units) -> Query:
    """Pages with at least one word unit, or with the phrases if there are any (and the
    filters): the fill after every_word."""
    some = [(Occur.Should, q) for q in units.required]
    wanted = [(Occur.Should, q) for q in units.optional]
    if units.phrases or not some:  # the phrases (filters) are what a page must hold
        return Query.boolean_query([*some, *wanted, *_filters(units)])
    if wanted:  # one of the words at least; the lone characters only add
        return Query.boolean_query(
            [(Occur.Must, Query.boolean_query(some)), *wanted, *_filters(units)]
        )
    if flat(units):
        # One flat disjunction of every unit's term queries: the same pages and the same
        # sums, but a union of term queries is what Tantivy prunes by block-max WAND (a
        # union of unions it scores page by page: most of the index for common words).
        return Query.boolean_query([c for terms in units.required_terms for c in terms])
    return Query.boolean_query([*some, *_filters(units)], minimum_number_should_match=1)
