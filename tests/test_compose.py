"""docker-compose.yml is checked without a Docker engine: every srcrawl service
runs a real srcrawl command, and every variable it sets is one the config reads."""

from __future__ import annotations

import re
from pathlib import Path

import click
import requests
import yaml
from click_parse import parse_command

from srcrawl.config import ENV_VARS
from srcrawl.testweb import TestWeb

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"


def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def resolve(args: list[str]) -> click.Command:
    """The click command ``srcrawl ARGS`` would run; raises if it does not exist or parse."""
    return parse_command(args)[0]


def srcrawl_services() -> dict[str, dict]:
    return {name: svc for name, svc in services().items() if svc.get("build") == "."}


def test_services_and_scaling() -> None:
    s = services()
    assert {"redis", "mysql", "master", "slave", "testweb", "seed"} <= set(s)
    slave = s["slave"]
    assert "container_name" not in slave and "ports" not in slave  # --scale slave=N works
    assert "--appendonly" in s["redis"]["command"] and "yes" in s["redis"]["command"]
    # the demo's parts only start with --profile demo; the cluster's always do
    for name in ("testweb", "seed"):
        assert s[name]["profiles"] == ["demo"], name
    for name in ("redis", "mysql", "master", "slave"):
        assert "profiles" not in s[name], name


def test_the_index_follows_and_the_ranks_are_recomputed_with_no_command_typed() -> None:
    s = services()
    index = resolve(s["indexer"]["command"]).make_context("index", s["indexer"]["command"][1:])
    assert index.params["follow"] and index.params["max_delay"] == 30
    rank = resolve(s["ranker"]["command"]).make_context("pagerank", s["ranker"]["command"][1:])
    assert rank.params["every"] == 1800
    for name in ("indexer", "ranker"):
        assert "profiles" not in s[name] and s[name]["restart"] == "unless-stopped", name


def test_every_srcrawl_command_is_real() -> None:
    for name, svc in srcrawl_services().items():
        command = resolve(svc["command"])
        assert command.callback is not None, name
        health = svc.get("healthcheck")
        if health is None:  # a one-shot service: it exits, restarted only if it failed
            assert svc["restart"] == "on-failure", name
            continue
        if health["test"][1] == "srcrawl":
            resolve(health["test"][2:])


def test_environment_is_only_what_the_config_reads() -> None:
    for name, svc in srcrawl_services().items():
        env = svc.get("environment", {})
        assert set(env) <= set(ENV_VARS), name
        if name != "testweb":  # the test web uses neither Redis nor the store
            assert {"SRCRAWL_REDIS_URL", "SRCRAWL_DB_URL"} <= set(env), name
        for dep, cond in svc.get("depends_on", {}).items():
            assert cond == {"condition": "service_healthy"}, (name, dep)
            assert "healthcheck" in services()[dep], (name, dep)
        assert svc["restart"] in ("unless-stopped", "on-failure"), name
    for name in ("redis", "mysql"):
        assert services()[name]["restart"] == "unless-stopped"


def test_testweb_serves_the_network_under_the_service_name() -> None:
    """The demo's web listens beyond loopback, its links name the service, and the
    seeds, the healthcheck and the web agree on the ports."""
    s = services()
    testweb = s["testweb"]
    args = testweb["command"]
    ctx = resolve(args).make_context("serve", list(args[2:]))
    opts = ctx.params
    assert opts["bind_address"] == "0.0.0.0"
    assert opts["public_host"] == "testweb"
    ports = {opts["port_base"] + i for i in range(opts["hosts"])}
    health = " ".join(testweb["healthcheck"]["test"])
    assert re.search(rf"http://127\.0\.0\.1:{opts['port_base']}/", health)

    from srcrawl.testweb.commands import _web

    web = _web({k: opts[k] for k in ("hosts", "pages", "seed", "port_base", "addresses",
                                     "crawl_delay", "robots_failures", "slow_seconds",
                                     "large_bytes", "public_host")})  # fmt: skip
    assert {h.port for h in web.hosts} == ports
    assert all(url.startswith("http://testweb:") for url in web.pages)
    seeds = [a for a in s["seed"]["command"] if a.startswith("http")]
    assert seeds and set(seeds) <= set(web.seed_urls)
    assert web.seed_urls[0] not in seeds  # host 0: the timeout and trap cases
    assert s["seed"]["depends_on"]["testweb"] == {"condition": "service_healthy"}
    assert s["seed"]["depends_on"]["master"] == {"condition": "service_healthy"}


def test_dockerfile_copies_every_package() -> None:
    dockerfile = (COMPOSE.parent / "Dockerfile").read_text()
    for package in ("srcrawl", "master", "slave", "queues", "pagerank", "indexer", "sql"):
        assert f"COPY {package} ./{package}" in dockerfile


def test_a_web_under_a_public_name_links_to_that_name() -> None:
    """What the testweb container serves: pages found by path, links naming the service."""
    with TestWeb.generate(hosts=2, pages=3, seed=1, host_name="testweb", in_process=True) as tw:
        first, second = tw.web.hosts
        assert tw.seed_urls == [f"http://testweb:{first.port}/", f"http://testweb:{second.port}/"]
        root = requests.get(f"http://127.0.0.1:{first.port}/", timeout=5)
        assert root.status_code == 200
        assert f'href="http://testweb:{second.port}"' in root.text
        assert "127.0.0.1" not in root.text
        assert requests.get(f"http://127.0.0.1:{first.port}/p/1.html", timeout=5).status_code == 200
