"""What users type, as Tantivy queries.

Syntax: words (every word wanted, see below), ``"a phrase"`` (those words
next to each other, in that order), ``-word`` and ``-"a phrase"`` (pages
without them), ``site:host`` (pages of that host or its subdomains; several
``site:`` mean any of them; ``-site:host`` leaves a host out), ``lang:zh`` (pages
in that language, ISO 639-1, ``und`` when it was not told; several mean any;
``-lang:`` leaves one out), ``since:2026-01-31`` and ``until:2026-02-28`` (pages
fetched on or after, on or before that day, UTC). A command-line
option is searched, not excluded (:func:`is_option`): ``--lf``, ``-x``.

A query's words are tokenized as pages are (indexer/tokenizer.py) and each
becomes a *unit*: one word matched in the title, body, anchor text or the
host's repeated text, each field weighed (indexer/search/weights.py), stemmed as
the index is; an identifier (``pg_hba.conf``) is matched whole in the
``ident`` field or as the phrase of its parts; a long Chinese word also by
the shorter words jieba's search mode finds in it, weighed less. A Chinese
character standing alone in the query (用, 到) is wanted, not required
(:func:`_lone_han`). A phrase is a unit too. The required query holds every
unit; the fill query (pages with some of the words) any of them, but still
every phrase, ``site:`` and exclusion. :func:`lower` takes a query from what
was typed to its units, within a query's limits.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from urllib.parse import urlsplit

import tantivy

from srcrawl.core.defaults import DEFAULT_MAX_QUERY_CHARS, DEFAULT_MAX_QUERY_TERMS, MAX_TERM_CHARS
from srcrawl.core.errors import SrcrawlError
from srcrawl.indexer.engine import EXACT, schema, site_values, stem
from srcrawl.indexer.language import LANGUAGE_CODE
from srcrawl.indexer.search.weights import DEFAULT_WEIGHTS, RankWeights
from srcrawl.indexer.text import fold
from srcrawl.indexer.tokenizer import Tokenizer

Occur = tantivy.Occur
Query = tantivy.Query

SEARCH_PART_BOOST = 0.3
"""A shorter word inside a long Chinese query word, found where the long word is not."""
LONE_HAN_BOOST = 0.3
"""A Chinese character jieba leaves standing alone in a query (用, 到, 下): wanted, not
required (see :func:`_lone_han`)."""
PHRASE_FIELDS = ("title", "body", "anchor")
NEAR_MIN_WORDS = 3
"""Words a query needs for its adjacent ones to count near each other: of two words, a page
with both is mostly about both already, and the phrase, which reads positions and stops
Tantivy skipping blocks, cost most (common words: the most pages hold both; at 500k
pages an English two-word search took 1.7 times the CPU with it)."""
NEAR_SLOP = 3
"""Words between two adjacent query words in a page's text for them to count as near
(``RankWeights.near``): a short clause ("create a new project" holds create … project)."""


_EXACT_WORD = re.compile(r"[a-z0-9]*[a-z][a-z0-9]*")
"""A token the ``exact`` field holds and the English stemmer can change: ASCII letters and
digits, one letter at least (tokens are lower-cased)."""


class QueryError(SrcrawlError):
    """A query that cannot be answered: empty, nothing searchable, no index."""


# a quote opens a phrase only where a later one closes it: an unclosed quote is part of a
# word (see parse), so a stray one never turns the rest of the query into a phrase
_PIECE = re.compile(r'(-?)"([^"]*)"|(-?)(site|lang|since|until):(\S+)|(\S+)')
DAY = 86_400


class FilterError(QueryError):
    """A filter whose value is not one (``lang:english``, ``since:yesterday``)."""


@dataclass
class ParsedQuery:
    """A query's parts as typed, and notes on what was read otherwise than typed."""

    words: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # words and phrases
    sites: list[str] = field(default_factory=list)
    excluded_sites: list[str] = field(default_factory=list)
    langs: list[str] = field(default_factory=list)
    excluded_langs: list[str] = field(default_factory=list)
    since: int | None = None  # fetched at or after (Unix seconds, a day's start, UTC)
    until: int | None = None  # fetched before (the start of the day after the one named)
    notes: list[str] = field(default_factory=list)

    @property
    def facet_filters(self) -> bool:
        """Whether the query filters by a field an index built before them lacks."""
        return bool(self.langs or self.excluded_langs or self.since or self.until)


def language_code(value: str) -> str:
    """``value`` as the language code ``lang:`` takes (``zh``, ``en``, ``und``); raise
    FilterError if it is not one."""
    code = value.strip().lower()
    if LANGUAGE_CODE.fullmatch(code) is None:
        raise FilterError(
            f"lang: takes a language code of two letters, as in lang:zh or lang:en "
            f"(or lang:und, not determined), not {value!r}"
        )
    return code


def day_start(value: str, name: str) -> int:
    """The start (Unix seconds, UTC) of the day ``value`` names as YYYY-MM-DD; raise
    FilterError otherwise (``name``: the filter, for the message)."""
    try:
        day = date.fromisoformat(value.strip())
    except ValueError:
        day = None
    if day is None or len(value.strip()) != 10:
        example = f"{name}2026-01-31"
        raise FilterError(f"{name} takes a day as YYYY-MM-DD, as in {example}, not {value!r}")
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


def site_host(value: str) -> tuple[str, str]:
    """What follows ``site:`` as the host it names, and what of it was left out: a pasted
    URL (``https://docs.example.com/guide/``) is its host (and port), its path dropped."""
    value = value.strip().lower()
    if "://" in value:
        split = urlsplit(value)
        host = split.netloc.rsplit("@", 1)[-1]
        rest = value[value.index(split.netloc) + len(split.netloc) :] if split.netloc else value
    else:
        host, slash, path = value.partition("/")
        rest = slash + path
    return host, rest.rstrip("/")


_OPTION = re.compile(r"--[A-Za-z0-9]|-[A-Za-z0-9]$")


def is_option(word: str) -> bool:
    """Whether ``word`` (what was typed between spaces) names a command-line option, a
    word to search for rather than to leave out: ``--`` and a letter or digit (``--lf``,
    ``--strict-markers``; nobody leaves a word out with two dashes), or one dash and a
    single letter or digit (``-x``, ``-k``; leaving out a lone letter finds nothing worth
    it). ``-word`` still leaves the word out."""
    return _OPTION.match(word) is not None


def parse(text: str) -> ParsedQuery:
    """Split what was typed into words, phrases, exclusions and sites."""
    parsed = ParsedQuery()
    for m in _PIECE.finditer(text):
        neg_phrase, phrase, neg_filter, name, value, word = m.groups()
        if phrase is not None:
            (parsed.excluded if neg_phrase else parsed.phrases).append(phrase)
        elif name is not None:
            _filter(parsed, name, value, bool(neg_filter))
        elif word.startswith("-") and len(word) > 1 and not is_option(word):
            parsed.excluded.append(word[1:])
        else:
            parsed.words.append(word)
    if text.count('"') % 2:
        # the words after it are searched as words, as typed, and the quote said
        parsed.notes.append('a quote (") is not closed: the words after it were searched as words')
    return parsed


def _filter(parsed: ParsedQuery, name: str, value: str, negated: bool) -> None:
    """``name:value`` (``-name:value`` when ``negated``) into ``parsed``."""
    if name == "site":
        host, dropped = site_host(value)
        if dropped:
            parsed.notes.append(f"site: takes a host: {host} searched, {dropped} left out")
        (parsed.excluded_sites if negated else parsed.sites).append(host)
    elif name == "lang":
        (parsed.excluded_langs if negated else parsed.langs).append(language_code(value))
    elif negated:
        raise FilterError(f"-{name}: cannot be left out: use since: or until: instead")
    elif name == "since":
        parsed.since = max(parsed.since or 0, day_start(value, "since:"))
    else:
        end = day_start(value, "until:") + DAY
        parsed.until = end if parsed.until is None else min(parsed.until, end)


Clauses = list[tuple[Occur, Query]]
Scale = Callable[[str], dict[str, float]]
"""A word's (stemmed) weight in each text field beside its field weight (see
:func:`shared_idf`)."""


def _fields_clauses(
    term: str, weights: RankWeights, boost: float = 1.0, scale: Scale | None = None
) -> Clauses:
    """``term`` (a token) in each text field, weighed: a boosted term query a field.

    The term queries read frequencies only: BM25 needs no positions, and reading them (the
    bindings' default) decoded them for nothing and kept the index's position files in
    every portal worker's memory (docs/benchmarks-journal.md, "Words read frequencies, not
    positions")."""
    s, stemmed = schema(), stem(term)
    by = scale(stemmed) if scale is not None else {}
    # the share of the text's weight a word of ASCII letters and digits gives to itself as
    # typed (RankWeights.exact): the rest stays with its stem (none: the text weighed 0)
    typed = 0.0
    if weights.exact > 0 and weights.body > 0 and _EXACT_WORD.fullmatch(term):
        typed = weights.exact
    clauses = [
        (
            Occur.Should,
            Query.boost_query(
                Query.term_query(s, f, stemmed, "freq"),
                w * boost * by.get(f, 1.0) * (1.0 - typed if f == "body" else 1.0),
            ),
        )
        for f, w in weights.fields().items()
    ]
    if typed:
        exact = Query.term_query(s, EXACT, term, "freq")
        clauses.append((Occur.Should, Query.boost_query(exact, weights.body * typed * boost)))
    return clauses


def _fields_query(term: str, weights: RankWeights, boost: float = 1.0) -> Query:
    """``term`` (a token) in any text field, each field weighed."""
    return Query.boolean_query(_fields_clauses(term, weights, boost))


def _phrase_query(tokens: list[str], weights: RankWeights) -> Query:
    """The tokens next to each other in the title, body or anchor text."""
    s, stems = schema(), [stem(t) for t in tokens]
    fields = weights.fields()
    subs = [
        (Occur.Should, Query.boost_query(Query.phrase_query(s, f, stems), fields[f]))
        for f in PHRASE_FIELDS
        if f in fields
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
    near: list[Query] = field(default_factory=list)  # adjacent words near in the text
    excluded: list[Query] = field(default_factory=list)
    sites: list[Query] = field(default_factory=list)
    excluded_sites: list[Query] = field(default_factory=list)
    langs: list[Query] = field(default_factory=list)
    excluded_langs: list[Query] = field(default_factory=list)
    lang_codes: list[str] = field(default_factory=list)  # those of ``langs``
    dates: Query | None = None  # the fetch days (since:, until:)
    facet_filters: bool = False  # it filters by a field an older index lacks
    terms: list[str] = field(default_factory=list)  # every token searched for (snippets)
    words: list[str] = field(default_factory=list)  # each required unit's word (messages)

    @property
    def positive(self) -> int:
        return len(self.required) + len(self.phrases)

    @property
    def narrowed(self) -> bool:
        """Whether it names pages to keep by site, language or date (searchable alone)."""
        return bool(self.sites or self.langs or self.dates is not None)

    def keep_required(self, n: int) -> None:
        """Keep the first ``n`` required units (and their terms)."""
        del self.required[n:], self.required_terms[n:], self.terms[n:], self.words[n:]


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


@dataclass(frozen=True)
class _Word:
    """A word of the query as the tokenizer reads it: one identifier whole (``ident``,
    with its parts as ``tokens``), or its tokens."""

    ident: str | None
    tokens: list[str]


def _read_word(tokenizer: Tokenizer, word: str) -> _Word:
    idents = tokenizer.identifiers(word)
    whole = idents[0] if idents and idents[0] == fold(word).strip(".,;:!?()[]{}'") else None
    return _Word(whole, tokenizer.tokens(word))


def _required_words(words: Sequence[_Word]) -> int:
    """How many words a page is asked to hold of ``words`` (the required units
    :func:`units_of` makes): each identifier, and each distinct token but a lone Chinese
    character."""
    terms: set[str] = set()
    n = 0
    for w in words:
        if w.ident is not None:
            n += 1
            terms.add(w.ident)
            continue
        for token in w.tokens:
            if token not in terms:
                terms.add(token)
                n += not _lone_han(token)
    return n


def _word_units(
    tokenizer: Tokenizer, w: _Word, units: Units, weights: RankWeights, scale: Scale | None
) -> None:
    if w.ident is not None:
        parts = w.tokens
        ident = Query.boost_query(Query.term_query(schema(), "ident", w.ident), weights.ident)
        alternatives = [(Occur.Should, ident)]
        if len(parts) > 1:
            alternatives.append((Occur.Should, _phrase_query(parts, weights)))
        elif parts:  # one part left (from_response: "from" is a stop word); Tantivy
            # refuses, with a panic, a phrase of fewer than two terms
            alternatives.append((Occur.Should, _fields_query(parts[0], weights)))
        units.required.append(Query.boolean_query(alternatives))
        units.required_terms.append(None)
        units.words.append(w.ident)
        units.terms.append(w.ident)  # (its parts alone are not marked in snippets)
        return
    for token in w.tokens:
        if token in units.terms:
            continue
        units.terms.append(token)
        if _lone_han(token):
            clauses = _fields_clauses(token, weights, LONE_HAN_BOOST, scale)
            units.optional.append(Query.boolean_query(clauses))
            units.optional_terms.append(clauses)
            continue
        clauses = _fields_clauses(token, weights, scale=scale)
        for p in tokenizer.search_parts(token):
            clauses += _fields_clauses(p, weights, SEARCH_PART_BOOST, scale)
        if weights.tie < 1:  # the word's best field, the others by the tie's share
            subs = [c for _occur, c in clauses]
            units.required.append(Query.disjunction_max_query(subs, weights.tie))
            units.required_terms.append(None)  # its score is not its term queries' sum
        else:
            units.required.append(Query.boolean_query(clauses))
            units.required_terms.append(clauses)
        units.words.append(token)


def shared_idf(
    searcher: Callable[[], tantivy.Searcher], fields: Iterable[str], power: float
) -> Scale:
    """Each word's weight in a field made as if the field's idf were the word's idf in the
    whole page (BM25F's one idf a word, Robertson et al. 2004), raised to ``power``:
    Tantivy weighs a field's match by the word's idf in that field alone, so a word of
    many pages' text but few titles ("photo") scores in a title as a rare word would.
    The page's document frequency is taken as the word's largest in any field.
    ``searcher`` gives the index's searcher when a word first needs it (so that an
    unusable query is told so before a missing index is)."""
    names = tuple(fields)

    def scale(stemmed: str) -> dict[str, float]:
        index = searcher()
        n = max(index.num_docs, 1)
        dfs = {f: index.doc_freq(f, stemmed) for f in names}
        whole = _idf(n, max(dfs.values(), default=0))
        return {f: (whole / _idf(n, df)) ** power for f, df in dfs.items() if df > 0}

    return scale


def _idf(n: int, df: int) -> float:
    """BM25's idf (Tantivy's) of a word in ``df`` of ``n`` pages."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _phrase_unit(
    tokenizer: Tokenizer, text: str, weights: RankWeights
) -> tuple[Query | None, list[str]]:
    tokens = tokenizer.tokens(text)
    if not tokens:
        return None, []
    if len(tokens) == 1:
        return _fields_query(tokens[0], weights), tokens
    return _phrase_query(tokens, weights), tokens


def _near_pairs(units: Units, weights: RankWeights) -> list[Query]:
    """Each two plain words next to each other in the query, as a phrase of the body with
    NEAR_SLOP words of slack, boosted by ``weights.near`` (none when it is 0)."""
    if weights.near <= 0:
        return []
    s = schema()
    plain = [
        w if terms is not None else None
        for w, terms in zip(units.words, units.required_terms, strict=True)
    ]
    if len(plain) < NEAR_MIN_WORDS:
        return []
    return [
        Query.boost_query(
            Query.phrase_query(s, "body", [stem(a), stem(b)], NEAR_SLOP), weights.near
        )
        for a, b in itertools.pairwise(plain)
        if a is not None and b is not None and stem(a) != stem(b)
    ]


def units_of(
    tokenizer: Tokenizer,
    parsed: ParsedQuery,
    weights: RankWeights = DEFAULT_WEIGHTS,
    scale: Scale | None = None,
) -> Units:
    """The units of a parsed query, each field weighed by ``weights`` (and each word's
    fields by ``scale``)."""
    units = Units()
    words = [_read_word(tokenizer, word) for word in parsed.words]
    # a long query (a task in the user's words) weighs the title and links its own way
    weights = weights.for_words(_required_words(words))
    for w in words:
        _word_units(tokenizer, w, units, weights, scale)
    if not units.required and not parsed.phrases:
        # nothing but lone characters ("书"): they are what is searched for
        units.required, units.optional = units.optional, []
        units.required_terms, units.optional_terms = list(units.optional_terms), []
        units.words = list(units.terms)  # (the lone characters are all the terms)
    for phrase in parsed.phrases:
        q, tokens = _phrase_unit(tokenizer, phrase, weights)
        if q is not None:
            units.phrases.append(q)
            units.terms += [t for t in tokens if t not in units.terms]
    for text in parsed.excluded:
        q, _tokens = _phrase_unit(tokenizer, text, weights)
        if q is not None:
            units.excluded.append(q)
    s = schema()
    for host in parsed.sites:
        units.sites.append(Query.term_query(s, "site", site_values(host)[0]))
    for host in parsed.excluded_sites:
        units.excluded_sites.append(Query.term_query(s, "site", site_values(host)[0]))
    units.lang_codes = list(dict.fromkeys(parsed.langs))
    units.langs = [Query.term_query(s, "lang", code) for code in units.lang_codes]
    units.excluded_langs = [Query.term_query(s, "lang", c) for c in parsed.excluded_langs]
    if parsed.since is not None or parsed.until is not None:
        upper = None if parsed.until is None else parsed.until - 1
        kind = tantivy.FieldType.Integer
        units.dates = Query.range_query(s, "fetched", kind, parsed.since, upper)
    units.facet_filters = parsed.facet_filters
    return units


def lower(
    tokenizer: Tokenizer,
    query: str,
    weights: RankWeights = DEFAULT_WEIGHTS,
    scale: Scale | None = None,
) -> tuple[Units, list[str]]:
    """What was typed as the units to search for (weighed by ``weights``), and notes
    on what was left out (the query cut at DEFAULT_MAX_QUERY_CHARS, words too long to be
    indexed, words past DEFAULT_MAX_QUERY_TERMS) or read otherwise than typed (an
    unclosed quote, a URL given to ``site:``); raise QueryError if it is empty or has
    nothing searchable."""
    if not query or not query.strip():
        raise QueryError("empty query: give one or more words to search for")
    notes = []
    if len(query) > DEFAULT_MAX_QUERY_CHARS:
        query = query[:DEFAULT_MAX_QUERY_CHARS]
        notes.append(f"only the first {DEFAULT_MAX_QUERY_CHARS:,} characters were used")
    parsed = parse(query)
    notes += parsed.notes
    units = units_of(tokenizer, parsed, weights, scale)
    overlong = tokenizer.overlong(" ".join(parsed.words + parsed.phrases))
    if overlong:
        # no page holds such a word as a term: say so rather than search without it
        shown = ", ".join(repr(w[:20] + "…") for w in dict.fromkeys(overlong))
        dropped = f"words over {MAX_TERM_CHARS} characters are not indexed: {shown}"
        if not units.positive and not units.narrowed:
            raise QueryError(f"the query has no searchable words ({dropped})")
        notes.append(f"left out, {dropped}")
    if not units.positive and not units.narrowed:
        raise QueryError(_nothing_searchable(tokenizer, parsed))
    if len(units.required) > DEFAULT_MAX_QUERY_TERMS:
        notes.append(f"only the first {DEFAULT_MAX_QUERY_TERMS} distinct words were used")
        units.keep_required(DEFAULT_MAX_QUERY_TERMS)
    units.near = _near_pairs(units, weights)  # of the words kept
    return units, notes


def _nothing_searchable(tokenizer: Tokenizer, parsed: ParsedQuery) -> str:
    """Why a query has nothing to search for, in the words of what was typed."""
    stop = [w for w in parsed.words + parsed.phrases if _only_stop_words(tokenizer, w)]
    if stop:
        # the index leaves them out (they are on nearly every page): no page can be
        # found by them, as typed or otherwise
        shown = ", ".join(f"«{w}»" for w in dict.fromkeys(stop))
        return (
            f"no searchable words: {shown} are stop words, which the index leaves out as "
            "they are on nearly every page; add a word that is not one"
        )
    if parsed.excluded or parsed.excluded_sites or parsed.excluded_langs:
        left_out = [f"-{w}" for w in parsed.excluded]
        left_out += [f"-site:{h}" for h in parsed.excluded_sites]
        left_out += [f"-lang:{c}" for c in parsed.excluded_langs]
        shown = " ".join(left_out)
        return (
            f"only pages to leave out ({shown}): give a word to search for as well, "
            f"as in «word {shown}»"
        )
    return "the query has no searchable words (only punctuation or symbols)"


def _only_stop_words(tokenizer: Tokenizer, text: str) -> bool:
    """Whether ``text`` has words and each is a stop word."""
    words = [w for w in re.split(r"[^\w]+", fold(text)) if w]
    return bool(words) and all(w in tokenizer.stopwords for w in words)


def _filters(units: Units) -> list[tuple[Occur, Query]]:
    """Every phrase, one of the sites, none of the exclusions."""
    clauses = [(Occur.Must, q) for q in units.phrases]
    for any_of in (units.sites, units.langs):
        if any_of:
            one = Query.boolean_query([(Occur.Should, q) for q in any_of])
            clauses.append((Occur.Must, Query.const_score_query(one, 0.0)))
    if units.dates is not None:
        clauses.append((Occur.Must, Query.const_score_query(units.dates, 0.0)))
    excluded = units.excluded + units.excluded_sites + units.excluded_langs
    clauses += [(Occur.MustNot, q) for q in excluded]
    return clauses


def every_word(units: Units) -> Query:
    """Pages with every unit (and the filters)."""
    if len(units.required) == 1 and flat(units) and not units.optional:
        # one plain word: its term queries themselves, which Tantivy prunes by block-max
        # WAND (wrapped as a required clause, it scores every page that holds the word)
        return Query.boolean_query(units.required_terms[0])
    clauses = [(Occur.Must, q) for q in units.required] + _filters(units)
    clauses += [(Occur.Should, q) for q in (*units.optional, *units.near)]
    if not units.positive:  # only filters (and exclusions): every page they keep
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
