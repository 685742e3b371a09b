"""The JSON API's response shapes (what the OpenAPI document describes)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class HitOut(BaseModel):
    """One result, as ``srcrawl search --json`` prints it."""

    url: str
    title: str
    score: float
    snippet: str = Field(description="Text around the query terms, each marked «like this»")


class SearchOut(BaseModel):
    query: str
    terms: list[str] = Field(description="The terms searched for")
    mode: str = Field(description="and: every term; or: no page held every term; none")
    matches: int = Field(description="Pages that matched")
    approximate: bool = Field(description="Some term's postings were cut at the cap")
    ranked: bool = Field(description="PageRank was blended into the scores")
    page: int
    size: int
    pages: int = Field(description="Pages of results that can be reached")
    elapsed_ms: float
    notes: list[str]
    hits: list[HitOut]


class ErrorOut(BaseModel):
    error: str


class SeedsIn(BaseModel):
    urls: list[str] = Field(min_length=1, max_length=1000)


class SeedsOut(BaseModel):
    added: int
    strategy_version: int


StatusOut = dict[str, Any]
