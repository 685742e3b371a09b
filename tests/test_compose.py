"""docker-compose.yml is checked without a Docker engine: every srcrawl service
runs a real srcrawl command, and every variable it sets is one the config reads."""

from __future__ import annotations

import warnings
from pathlib import Path

import click
import yaml

from srcrawl.cli import cli
from srcrawl.config import ENV_VARS

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"


def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def resolve(args: list[str]) -> click.Command:
    """The click command ``srcrawl ARGS`` would run; raises if it does not exist or parse."""
    ctx = cli.make_context("srcrawl", list(args), resilient_parsing=False)
    command: click.Command = cli
    while isinstance(command, click.Group):
        with warnings.catch_warnings():  # protected_args: deprecated, still where click puts it
            warnings.simplefilter("ignore", DeprecationWarning)
            pending = [*ctx.protected_args, *ctx.args]
        name, command, rest = command.resolve_command(ctx, pending)
        ctx = command.make_context(name, rest, parent=ctx)
    return command


def test_services_and_scaling() -> None:
    s = services()
    assert {"redis", "mysql", "master", "slave"} <= set(s)
    slave = s["slave"]
    assert "container_name" not in slave and "ports" not in slave  # --scale slave=N works
    assert "--appendonly" in s["redis"]["command"] and "yes" in s["redis"]["command"]


def test_every_srcrawl_command_is_real() -> None:
    for name, svc in services().items():
        if svc.get("build") != ".":
            continue
        command = resolve(svc["command"])
        assert command.callback is not None, name
        assert svc["healthcheck"]["test"][1] == "srcrawl"
        resolve(svc["healthcheck"]["test"][2:])


def test_environment_is_only_what_the_config_reads() -> None:
    for name, svc in services().items():
        if svc.get("build") != ".":
            continue
        env = svc["environment"]
        assert set(env) <= set(ENV_VARS), name
        assert {"SRCRAWL_REDIS_URL", "SRCRAWL_DB_URL"} <= set(env)
        for dep, cond in svc["depends_on"].items():
            assert cond == {"condition": "service_healthy"}, (name, dep)
        assert svc["restart"] == "unless-stopped"


def test_dockerfile_copies_every_package() -> None:
    dockerfile = (COMPOSE.parent / "Dockerfile").read_text()
    for package in ("srcrawl", "master", "slave", "queues", "pagerank", "indexer", "sql"):
        assert f"COPY {package} ./{package}" in dockerfile
