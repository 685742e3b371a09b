"""Who is asking: one User-Agent on every request, robots.txt matched on its name.

Crawls run as a user runs them (`srcrawl crawl`, a real Redis, SQLite) against
the test web on loopback, whose access log records each request's User-Agent.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from srcrawl.core.defaults import DEFAULT_USER_AGENT
from srcrawl.core.errors import ConfigError
from srcrawl.core.useragent import contact_warning, has_contact, is_loopback_host, product_token
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.testweb import TestWeb

AGENT = "mybot/1.0 (+mailto:ops@example.org)"
FAST = [
    "--slaves",
    "1",
    "--threads",
    "4",
    "--delay",
    "0",
    "--delay-factor",
    "0",
    "--fetch-timeout",
    "2",
    "--robots-defer",
    "0.3",
]


def served(tmp_path: Path, robots: str) -> TestWeb:
    """A one-host test web whose robots.txt is ``robots``, logging to tmp_path."""
    tw = TestWeb.generate(
        hosts=1, pages=6, seed=3, access_log=tmp_path / "access.jsonl", flush_interval=0.05
    )
    host = dataclasses.replace(
        tw.web.hosts[0], robots_mode="ok", robots_text=robots, crawl_delay=None
    )
    tw.web = dataclasses.replace(tw.web, hosts=[host])
    return tw


def crawl(
    tmp_path: Path, redis_url: str, job: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    full.update(
        SRCRAWL_REDIS_URL=redis_url,
        SRCRAWL_JOB=job,
        SRCRAWL_HOME=str(tmp_path / "home"),
        SRCRAWL_DB_URL=f"sqlite:///{tmp_path}/crawl.db",
        **(env or {}),
    )
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", "crawl", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["option", "env"])
def test_every_request_carries_the_agent_and_robots_match_its_name(
    tmp_path, redis_url, keys, how
) -> None:
    # groups naming another crawler, or a word of this one's contact, are not its rules
    robots = "User-agent: srcrawl\nDisallow: /\n\nUser-agent: example\nDisallow: /\n"
    given = (
        (["--user-agent", AGENT], {}) if how == "option" else ([], {"SRCRAWL_USER_AGENT": AGENT})
    )
    with served(tmp_path, robots) as tw:
        r = crawl(
            tmp_path,
            redis_url,
            keys.job,
            *tw.seed_urls,
            "--depth",
            "1",
            *FAST,
            *given[0],
            env=given[1],
        )
        assert r.returncode == 0, r.stderr[-2000:]
    entries = tw.log_entries()
    paths = [e["path"] for e in entries]
    assert "/robots.txt" in paths and len([p for p in paths if p != "/robots.txt"]) > 1
    assert {e["agent"] for e in entries} == {AGENT}
    assert "warning" not in r.stderr  # loopback only


@pytest.mark.slow
def test_robots_rules_naming_the_agent_are_obeyed(tmp_path, redis_url, keys) -> None:
    robots = "User-agent: MyBot\nDisallow: /\n\nUser-agent: *\nAllow: /\n"
    with served(tmp_path, robots) as tw:
        crawl(
            tmp_path,
            redis_url,
            keys.job,
            *tw.seed_urls,
            "--depth",
            "1",
            *FAST,
            "--user-agent",
            AGENT,
        )
    entries = tw.log_entries()
    assert [e["path"] for e in entries] == ["/robots.txt"]
    assert entries[0]["agent"] == AGENT


@pytest.mark.slow
def test_the_default_agent_names_the_project_and_is_sent(tmp_path, redis_url, keys) -> None:
    assert product_token(DEFAULT_USER_AGENT) == "srcrawl" and has_contact(DEFAULT_USER_AGENT)
    assert "loopback" not in DEFAULT_USER_AGENT
    with served(tmp_path, "User-agent: mybot\nDisallow: /\n") as tw:
        r = crawl(tmp_path, redis_url, keys.job, *tw.seed_urls, "--depth", "0", *FAST)
        assert r.returncode == 0, r.stderr[-2000:]
    entries = tw.log_entries()
    # robots.txt names no sitemap: one probe of /sitemap.xml (a 404 here), then the seed
    assert [e["path"] for e in entries] == ["/robots.txt", "/sitemap.xml", "/"]
    assert {e["agent"] for e in entries} == {DEFAULT_USER_AGENT}


@pytest.mark.slow
def test_a_crawl_beyond_loopback_without_a_contact_is_warned_once(
    tmp_path, redis_url, keys
) -> None:
    # the allowed domain is never reached: the one loopback seed at depth 0 is all it fetches
    with served(tmp_path, "User-agent: *\nAllow: /\n") as tw:
        seed = tw.seed_urls[0]
        anonymous = crawl(
            tmp_path,
            redis_url,
            keys.job,
            seed,
            "--depth",
            "0",
            *FAST,
            "--allow-domain",
            "example.org",
            "--user-agent",
            "mybot/1.0",
        )
        named = crawl(
            tmp_path,
            redis_url,
            keys.job,
            seed,
            "--depth",
            "0",
            *FAST,
            "--allow-domain",
            "example.org",
            "--user-agent",
            AGENT,
        )
    assert anonymous.returncode == 0, anonymous.stderr[-2000:]
    warnings = [ln for ln in anonymous.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "example.org" in warnings[0] and "contact" in warnings[0]
    assert named.returncode == 0 and "warning" not in named.stderr
    assert {e["host"].split(":")[0] for e in tw.log_entries()} == {"127.0.0.1"}


@pytest.mark.parametrize(
    "agent", ["", "1bot/1.0", "my bot\r\nX-Evil: 1", "bot.v2/1.0", "робот/1.0"]
)
def test_an_agent_robots_txt_cannot_name_is_refused_with_one_line(
    tmp_path, redis_url, keys, agent
) -> None:
    with pytest.raises(ConfigError, match="--user-agent"):
        CrawlStrategy(user_agent=agent)
    r = crawl(tmp_path, redis_url, keys.job, "http://127.0.0.1:9/", "--user-agent", agent)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("srcrawl: --user-agent")


def test_product_tokens_contacts_and_loopback_hosts() -> None:
    assert product_token("mybot/1.0 (+https://x.org/bot)") == "mybot"
    assert product_token("  MyBot (+https://x.org/bot)") == "MyBot"
    for agent in [
        "a/1 (+http://x.org)",
        "a/1 (https://x.org/bot)",
        "a/1 (ops@x.org)",
        "a/1 (+mailto:ops@x.org)",
    ]:
        assert has_contact(agent), agent
    for agent in ["a/1", "a/1 (+loopback research crawler)", "a/1 (compatible; @home)"]:
        assert not has_contact(agent), agent
    loopback = [
        "127.0.0.1:8000",
        "127.3.2.1",
        "localhost",
        "localhost:80",
        "[::1]:8080",
        "a.localhost",
    ]
    assert all(is_loopback_host(h) for h in loopback)
    assert not any(is_loopback_host(h) for h in ["example.org", "10.0.0.1:80", "[2001:db8::1]"])
    assert contact_warning("a/1", loopback) is None
    assert contact_warning("a/1 (+https://x.org)", ["example.org"]) is None
    assert "example.org and others" in contact_warning("a/1", ["example.org", "x.net"])
