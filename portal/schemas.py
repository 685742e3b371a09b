"""The JSON API's response shapes (what the OpenAPI document describes)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

API_VERSION = "0.6.0"
"""The JSON API's version, the OpenAPI document's ``info.version``: its minor number goes up
when a response loses or changes a field (pre-1.0: a change a client may have to follow).
0.1.0: the first; 0.2.0: ``approximate`` left the search answer (it was always false:
the ranking is exact); 0.3.0: ``matches`` counts the pages with some of the words that
the results list too (``every``: those with every word), a query over 256 characters
is searched by its first 256 (it was a 400), ``missing`` names the words no page holds and
``suggestion`` the query with the nearest words the index has; 0.4.0: results are grouped
by host (a hit's ``host``, ``host_more``), near-identical hits folded into ``similar``,
and each hit names its ``stored`` copy; 0.5.0: ``/api/suggest`` completes a query being
typed; 0.6.0: ``facets`` counts the matching pages by language, host and fetch month,
``lang=``, ``site=``, ``since=`` and ``until=`` narrow a search (a value that is not one:
422), as do ``lang:``, ``since:`` and ``until:`` in the query."""


class HitOut(BaseModel):
    """One result, as ``srcrawl search --json`` prints it."""

    url: str
    title: str
    score: float
    snippet: str = Field(description="Text around the query terms, each marked «like this»")
    similar: int = Field(0, description="Duplicate and near-duplicate pages folded into this one")
    similar_urls: list[str] = Field(
        default_factory=list, description="Their URLs (the first 20; `similar` counts all)"
    )
    host: str = Field(description="The page's host (and port)")
    host_more: int = Field(
        0,
        description="Pages of this host the first page of results passed over (at most 2 a "
        "host there while other hosts fill it), listed on later pages and by `site:HOST`",
    )
    stored: str = Field(description="The portal path of the page's stored copy (`/stored?url=`)")


class FacetOut(BaseModel):
    value: str = Field(
        description="The language code (ISO 639-1, und: not determined), host or month (YYYY-MM)"
    )
    count: int = Field(description="Matching pages with it")
    since: str | None = Field(None, description="A month's first day (YYYY-MM-DD)")
    until: str | None = Field(None, description="A month's last day (YYYY-MM-DD)")


class FacetsOut(BaseModel):
    lang: list[FacetOut] = Field(description="Matching pages by language, most first")
    site: list[FacetOut] = Field(description="Matching pages by host: the 10 with the most")
    month: list[FacetOut] = Field(
        description="Matching pages by the month they were fetched (UTC): the latest 12 months "
        "that have some, latest first"
    )


class SearchOut(BaseModel):
    query: str
    terms: list[str] = Field(description="The terms searched for")
    mode: str = Field(
        description="and: pages with every word first; or: no page held every word; none"
    )
    matches: int = Field(
        description="Pages that matched: those with every word, counted up to the ranking "
        "pool (200, or 4 × the results asked for: more may match), and those with some of "
        "the words listed up to this page (mode or: those with some, up to the pool)"
    )
    every: int = Field(description="Of the matches, the pages with every word")
    missing: list[str] = Field(description="Words no page holds (only when some is lacking)")
    suggestion: str | None = Field(
        description="The query with those words spelt as the index has them (none found: null)"
    )
    ranked: bool = Field(description="PageRank was blended into the scores")
    page: int
    size: int
    pages: int = Field(description="Pages of results that can be reached")
    elapsed_ms: float
    notes: list[str]
    facets: FacetsOut | None = Field(
        description="Counts of every matching page (those with every word; mode or: with "
        "some), not only those listed; null for an index built before languages and fetch "
        "dates were indexed"
    )
    hits: list[HitOut]


class SuggestOut(BaseModel):
    q: str = Field(description="What was completed: the query typed, cut at 64 characters")
    suggestions: list[str] = Field(
        description="Up to 8 queries: the last word completed from the words of the pages' "
        "titles, ranked by the pages holding them, and titles that start as the query does "
        "(empty for an empty or unusable query)"
    )


class ErrorOut(BaseModel):
    error: str


class SeedsIn(BaseModel):
    urls: list[str] = Field(min_length=1, max_length=1000)
    allow_private: bool = Field(
        False, description="Also let the crawl reach loopback, private and link-local addresses"
    )
    allow_networks: list[str] = Field(
        [], max_length=100, description="Also let the crawl reach these networks (CIDR)"
    )


class SeedsOut(BaseModel):
    added: int = Field(description="Seeds queued")
    strategy_version: int | None = Field(
        description="The crawl strategy published with them (null when none was queued)"
    )
    refused: dict[str, str] = Field(
        {}, description="Seeds not queued, each with the reason its address is refused"
    )
    again: int = Field(0, description="Seeds refused before and now fetched again")


StatusOut = dict[str, Any]
