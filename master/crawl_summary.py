"""What `srcrawl crawl` says when its crawl ends: the URLs it could not fetch, by reason.

Every URL scheduled ends as a row of the store: a page, or a failure with its reason
in ``error`` (a fetch's error, written by the slave; ``robots_gave_up``, written by the
master). The JSON summary's ``not_fetched`` maps each reason to its count, and
``all_fetched`` is true only when it is empty and no host was left deferred.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from srcrawl.queues.crawl_protocol import ERROR_ROBOTS_GAVE_UP

_ERROR_PREFIX = "error_"
"""Counters of the fetches that failed, one per ERROR_* name (master/frontier/outcomes.py)."""
_DROPPED = {ERROR_ROBOTS_GAVE_UP: ERROR_ROBOTS_GAVE_UP, "slave_errors": "slave_error"}
"""Counters of URLs that ended without a fetch → the reason the summary names."""


def not_fetched(counters: Mapping[str, int]) -> dict[str, int]:
    """Reason → URLs of the crawl that ended without a page, from its counters."""
    out = {
        name[len(_ERROR_PREFIX) :]: int(n)
        for name, n in counters.items()
        if name.startswith(_ERROR_PREFIX) and int(n) > 0
    }
    for counter, reason in _DROPPED.items():
        if int(counters.get(counter, 0)) > 0:
            out[reason] = out.get(reason, 0) + int(counters[counter])
    return dict(sorted(out.items()))


def summary_fields(counters: Mapping[str, int], deferred_hosts: list[str]) -> dict[str, object]:
    """The JSON summary's fields on what was not fetched (see the module doc)."""
    failed = not_fetched(counters)
    return {"not_fetched": failed, "all_fetched": not failed and not deferred_hosts}


def crawl_summary(job: str, counters: Mapping[str, int], deferred_hosts: list[str]) -> dict:
    """The JSON summary `srcrawl crawl` prints on stdout: the job, its counters, what was
    not fetched, and the hosts left deferred (if any)."""
    out: dict[str, object] = {"job": job, **counters, **summary_fields(counters, deferred_hosts)}
    if deferred_hosts:
        out["deferred_hosts"] = deferred_hosts
    return out


def summary_line(counters: Mapping[str, int], job: str, deferred_hosts: Sequence[str] = ()) -> str:
    """The last line of a crawl: its pages, URLs, fetch errors, and every reason a URL
    was not fetched with its count, and how to see and retry them. A crawl that left
    hosts deferred (their URLs still queued, neither fetched nor given up) is not
    complete: it ended."""
    state = "ended" if deferred_hosts else "complete"
    line = (
        f"crawl {state}: {counters.get('pages', 0)} pages, {counters.get('scheduled', 0)} URLs "
        f"scheduled, {counters.get('fetch_errors', 0)} fetch errors"
    )
    failed = not_fetched(counters)
    if not failed:
        return line
    kinds = ", ".join(f"{reason} {n}" for reason, n in failed.items())
    return (
        f"{line}; not fetched: {kinds} (`srcrawl --job {job} export pages` lists each with "
        f"its error; `srcrawl --job {job} seed URL…` fetches one again)"
    )
