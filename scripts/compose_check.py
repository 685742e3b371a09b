"""The compose stack run for real, as users start it (CI; scripts/compose_check.sh).

Against a running Docker engine and the image ``srcrawl:ci``:

1. ``--profile demo --profile replicated up -d --scale slave=N`` with the srcrawl
   services pointed at the replicated object store (``S3_ENDPOINT``): N slave
   containers live as workers; a volume server of the store SIGKILLed mid-crawl,
   then a slave container; then every page of the demo web stored exactly once, at
   its depth, against the web's own expected set (computed from the model of the
   ``testweb`` service's command, as the tests compute it); every indexable page
   found through the portal's ``/api/search`` with its term in its snippet (the
   text read from the WARC objects), ranked; ``/metrics`` answering; ``exec master
   srcrawl search`` answering; every object of the bucket, fetched through the S3
   port on 127.0.0.1, read record by record by warcio, every indexable page's
   response among them; nothing written to the unreplicated store.
2. ``down -v``; the plain stack (no profile, its one-process object store) and a
   web on the compose network (the CI-only service ``web``): ``seed`` without
   ``--allow-private`` refused with the URLs named, then ``seed --allow-private``
   crawled exactly, its WARC objects read back by warcio.

Prints one line per step and writes the timings as JSON (``--report``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import yaml
from botocore.config import Config as BotoConfig
from warcio.archiveiterator import ArchiveIterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from click_parse import parse_command  # noqa: E402

from srcrawl.core.defaults import DEFAULT_MAX_DEPTH  # noqa: E402
from srcrawl.core.urls import host_of  # noqa: E402
from srcrawl.queues.crawl_strategy import CrawlStrategy  # noqa: E402
from srcrawl.queues.scope import Scope  # noqa: E402
from srcrawl.testweb.commands import _web  # noqa: E402

WEB_OPTIONS = (
    "hosts",
    "pages",
    "seed",
    "port_base",
    "addresses",
    "crawl_delay",
    "robots_failures",
    "slow_seconds",
    "large_bytes",
    "public_host",
)


class CheckFailed(Exception):
    """A check of the stack did not hold."""


class Stack:
    """``docker-compose`` with the project's files, and what the stack answers."""

    def __init__(self, files: list[str], project: str, portal_port: int) -> None:
        self.base = ["docker-compose", "-p", project]
        self.env = dict(os.environ)
        """The variables compose reads the file with (``S3_ENDPOINT``: which store)."""
        for f in files:
            self.base += ["-f", f]
        self.portal = f"http://127.0.0.1:{portal_port}"
        self.services = {}
        for f in files:  # an override's keys replace the service's, as compose merges them
            for name, svc in yaml.safe_load(Path(f).read_text()).get("services", {}).items():
                self.services.setdefault(name, {}).update(svc)

    def run(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=timeout, env=self.env
        )
        if check and r.returncode != 0:
            command = " ".join(args)
            raise CheckFailed(f"docker-compose {command}: rc {r.returncode}\n{r.stderr[-3000:]}")
        return r

    def srcrawl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``srcrawl ARGS`` in the master container, as ``docker compose exec`` runs it."""
        return self.run("exec", "-T", "master", "srcrawl", *args, check=check, timeout=120)

    def status(self) -> dict[str, Any]:
        return json.loads(self.srcrawl("status", "--json").stdout)

    def pages(self) -> list[dict[str, Any]]:
        out = self.srcrawl("export", "pages").stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            # a snippet's text first read from an object whose first copy was on the
            # killed volume server waits for that server's name to fail
            with urllib.request.urlopen(self.portal + path, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def search(self, query: str) -> dict[str, Any]:
        status, body = self.get("/api/search?" + urllib.parse.urlencode({"q": query, "size": 10}))
        if status != 200:
            raise CheckFailed(f"/api/search?q={query!r}: {status} {body[:300]!r}")
        return json.loads(body)

    def container_ids(self, service: str) -> list[str]:
        return self.run("ps", "-q", service).stdout.split()


def expected(stack: Stack, web_service: str, seeds: list[str]) -> tuple[Any, dict[str, int]]:
    """The web a service serves (its model, from its own command) and ``{url: depth}`` of
    what a crawl from ``seeds`` with the default strategy fetches."""
    args = stack.services[web_service]["command"]
    opts = parse_command(args)[1].params
    web = _web({k: opts[k] for k in WEB_OPTIONS})
    scope = Scope(
        CrawlStrategy(seed_hosts=tuple({host_of(s) for s in seeds}), max_depth=DEFAULT_MAX_DEPTH)
    )
    return web, web.expected_crawl(seeds, DEFAULT_MAX_DEPTH, lambda u: scope.reject(u, 0) is None)


def wait(what: str, ok: Callable[[], Any], timeout: float, every: float = 2.0) -> Any:
    """Poll ``ok`` until it returns something true; CheckFailed after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = ok()
        if last:
            return last
        time.sleep(every)
    raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def step(t0: float, text: str) -> float:
    elapsed = time.monotonic() - t0
    print(f"compose check: {elapsed:6.1f} s  {text}", flush=True)
    return round(elapsed, 1)


def live_crawl_slaves(stack: Stack) -> int:
    """Live workers serving the crawl: the slave containers (the indexer's and the
    ranker's own slaves serve one phase each and run no fetch threads)."""
    return sum(1 for w in stack.status()["workers"] if w["alive"] and "crawl_threads" in w["stats"])


def exact(stack: Stack, want: dict[str, int]) -> str | None:
    """None when the store holds exactly ``want`` (each URL once, at its depth), else
    what differs."""
    pages = stack.pages()
    twice = [u for u, n in Counter(p["url"] for p in pages).items() if n > 1]
    got = {p["url"]: p["depth"] for p in pages}
    if twice:
        return f"stored more than once: {twice[:5]}"
    if got != want:
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        wrong = sorted(u for u in set(got) & set(want) if got[u] != want[u])
        return f"{len(got)} stored: missing {missing[:5]}, extra {extra[:5]}, depth {wrong[:5]}"
    return None


def searchable(stack: Stack, items: list[tuple[str, str]]) -> Callable[[], Any]:
    """A poll that asks ``/api/search`` for the items not yet found, each query's page
    in its first 10 hits with the query's term in its snippet (the page's text, read
    from its WARC object); those found are not asked again. Raises CheckFailed when a
    page is found with a snippet that lacks its term."""
    left = list(items)

    def found(query: str, url: str) -> bool:
        hit = next((h for h in stack.search(query)["hits"] if h["url"] == url), None)
        if hit is None:
            return False
        if query.lower() not in hit["snippet"].replace("«", "").replace("»", "").lower():
            raise CheckFailed(f"{url} found by {query!r} with the snippet {hit['snippet']!r}")
        return True

    def poll() -> Any:
        left[:] = [(q, u) for q, u in left if not found(q, u)]
        return not left or None

    return poll


def s3_client(stack: Stack, port: int) -> tuple[Any, str, str]:
    """A client of the object store's S3 gateway as published on 127.0.0.1:``port``,
    signing with the stack's keys, and the bucket and prefix the slaves write to (all
    as compose resolves the file)."""
    env = yaml.safe_load(stack.run("config").stdout)["services"]["slave"]["environment"]
    bucket, _, prefix = env["SRCRAWL_WARC_DIR"].removeprefix("s3://").partition("/")
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
        config=BotoConfig(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3}),
    )
    return client, bucket, prefix.strip("/")


def warc_objects(stack: Stack, port: int, pages: list[dict[str, Any]]) -> tuple[int, int]:
    """Fetch every WARC object of the bucket through the S3 port and read each of its
    records with warcio; CheckFailed unless every indexable page's response is among
    them. Returns (objects, records)."""
    client, bucket, prefix = s3_client(stack, port)
    keys = [
        o["Key"]
        for part in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in part.get("Contents", [])
    ]
    records, responses = 0, set()
    for key in keys:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        try:
            for record in ArchiveIterator(io.BytesIO(body)):
                record.content_stream().read()  # every payload, to its end
                records += 1
                if record.rec_type == "response":
                    responses.add(record.rec_headers.get_header("WARC-Target-URI"))
        except Exception as e:  # warcio's own errors, and gzip's
            raise CheckFailed(f"warcio cannot read s3://{bucket}/{key}: {e!r}") from e
    indexable = {
        p["url"] for p in pages if p["error"] is None and p["body_state"] in ("complete", "capped")
    }
    if not keys or indexable - responses:
        raise CheckFailed(
            f"{len(keys)} objects in s3://{bucket}/{prefix}: no response record for "
            f"{sorted(indexable - responses)[:5]} ({len(indexable - responses)} pages)"
        )
    return len(keys), records


def buckets(stack: Stack, port: int) -> list[str]:
    client, _, _ = s3_client(stack, port)
    return [b["Name"] for b in client.list_buckets().get("Buckets", [])]


REPLICATED = "http://objects-s3:8333"
"""The replicated object store's S3 gateway, as the srcrawl services reach it."""
VOLUME_VICTIM = "objects-volume-1"


def demo(stack: Stack, slaves: int, timings: dict[str, float]) -> None:
    seeds = [a for a in stack.services["seed"]["command"] if a.startswith("http")]
    web, want = expected(stack, "testweb", seeds)
    print(f"compose check: demo web: {len(want)} pages reachable from {len(seeds)} seeds")
    stack.env["S3_ENDPOINT"] = REPLICATED
    t0 = time.monotonic()
    profiles = ("--profile", "demo", "--profile", "replicated")
    stack.run(*profiles, "up", "-d", "--scale", f"slave={slaves}")
    timings["demo_up_s"] = step(t0, "demo stack up, every service healthy, replicated object store")
    wait("the first stored page", lambda: stack.status()["store"]["pages"] > 0, 300, 1)
    timings["first_page_s"] = step(t0, "first page stored")
    wait(f"{slaves} crawl slaves live", lambda: live_crawl_slaves(stack) == slaves, 120)
    step(t0, f"{slaves} slave containers live as workers")
    wait("a quarter of the pages", lambda: stack.status()["store"]["pages"] >= len(want) // 4, 600)
    [volume] = stack.container_ids(VOLUME_VICTIM)
    subprocess.run(["docker", "kill", volume], check=True, capture_output=True)
    stored = stack.status()["store"]["pages"]
    step(t0, f"volume server {VOLUME_VICTIM} SIGKILLed with {stored} of {len(want)} pages stored")
    wait("half of the pages", lambda: stack.status()["store"]["pages"] >= len(want) // 2, 600)
    victim = stack.container_ids("slave")[0]
    subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
    stored = stack.status()["store"]["pages"]
    step(t0, f"slave container {victim[:12]} SIGKILLed with {stored} of {len(want)} pages stored")
    wait("the exact demo crawl", lambda: exact(stack, want) is None, 900, 5)
    timings["all_stored_s"] = step(t0, f"every page stored once: {len(want)} pages, exact")
    # a container ended by `docker kill` stays down (Docker counts it as stopped by
    # hand); its worker must be seen dead once its heartbeat lapses
    wait("the killed slave seen dead", lambda: live_crawl_slaves(stack) == slaves - 1, 120)
    items = web.known_items(within=want)
    wait(f"{len(items)} known items searchable", searchable(stack, items), 600, 3)
    timings["all_searchable_s"] = step(t0, f"{len(items)} known items found through /api/search")
    wait("ranked results", lambda: stack.search(items[0][0])["ranked"], 300, 5)
    timings["ranked_s"] = step(t0, "results ranked (PageRank blended in)")
    after_the_kill(stack, want, items)
    step(t0, "after the kills: still exact; /metrics, exec master srcrawl search answer")
    objects, records = warc_objects(stack, int(stack.env["S3_REPLICATED_PORT"]), stack.pages())
    timings["warc_objects_read_s"] = step(
        t0, f"warcio read {records} records of {objects} objects, every indexable page's response"
    )
    unreplicated = buckets(stack, int(stack.env["S3_PORT"]))
    if unreplicated:
        raise CheckFailed(f"the unreplicated store holds buckets {unreplicated}")


def after_the_kill(stack: Stack, want: dict[str, int], items: list[tuple[str, str]]) -> None:
    problem = exact(stack, want)
    if problem:
        raise CheckFailed(f"the crawl changed after it was exact: {problem}")
    status, body = stack.get("/metrics")
    if status != 200 or b"srcrawl_crawl_pages_fetched_total" not in body:
        raise CheckFailed(f"/metrics: {status} {body[:300]!r}")
    query, url = items[len(items) // 2]
    r = stack.srcrawl("search", query, "--json", check=False)
    if r.returncode != 0 or url not in {h["url"] for h in json.loads(r.stdout or "[]")}:
        raise CheckFailed(
            f"exec master srcrawl search {query!r}: rc {r.returncode} "
            f"{r.stdout[-500:]} {r.stderr[-1000:]}"
        )


def plain(stack: Stack, slaves: int, timings: dict[str, float]) -> None:
    """The stack without the demo profile, seeded by hand with a web of its network."""
    args = stack.services["web"]["command"]
    opts = parse_command(args)[1].params
    # host 1's root: host 0 holds the timeout cases, which the demo's crawl already meets
    seeds = [f"http://{opts['public_host']}:{opts['port_base'] + 1}/"]
    _, want = expected(stack, "web", seeds)
    t0 = time.monotonic()
    stack.run("up", "-d", "--scale", f"slave={slaves}")
    stack.run("--profile", "ci-web", "up", "-d", "web")
    timings["plain_up_s"] = step(t0, "plain stack up, and a web on its network")
    refused = stack.srcrawl("seed", *seeds, check=False)
    if refused.returncode == 0 or not all(u in refused.stderr + refused.stdout for u in seeds):
        raise CheckFailed(
            f"seed of private addresses: rc {refused.returncode}, "
            f"{refused.stdout!r} {refused.stderr!r}"
        )
    step(t0, f"seed without --allow-private refused, rc {refused.returncode}, URLs named")
    stack.srcrawl("seed", "--allow-private", *seeds)
    wait("the exact plain crawl", lambda: exact(stack, want) is None, 600, 3)
    timings["plain_all_stored_s"] = step(t0, f"seeded web crawled: {len(want)} pages, exact")
    objects, records = warc_objects(stack, int(stack.env["S3_PORT"]), stack.pages())
    step(t0, f"warcio read {records} records of {objects} objects of the one-process store")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-f", "--file", action="append", required=True, help="compose files")
    ap.add_argument("--project", default="srcrawlci")
    ap.add_argument("--portal-port", type=int, default=8080)
    ap.add_argument("--slaves", type=int, default=4)
    ap.add_argument("--only", choices=("demo", "plain"), help="run one of the two stacks")
    ap.add_argument("--image-build-s", type=float, help="the image's build time, for the report")
    ap.add_argument("--report", type=Path, help="write the timings (JSON) here")
    args = ap.parse_args()
    stack = Stack(args.file, args.project, args.portal_port)
    timings: dict[str, float] = {}
    if args.image_build_s is not None:
        timings["image_build_s"] = args.image_build_s
    try:
        if args.only != "plain":
            demo(stack, args.slaves, timings)
            stack.run("--profile", "demo", "--profile", "replicated", "down", "-v")
            del stack.env["S3_ENDPOINT"]
        if args.only != "demo":
            plain(stack, args.slaves, timings)
    except (CheckFailed, subprocess.TimeoutExpired) as e:
        print(f"compose check FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if args.report:
            args.report.write_text(json.dumps(timings, indent=2) + "\n")
    print("compose check: passed " + json.dumps(timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
