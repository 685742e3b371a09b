"""docker-compose.yml is checked without a Docker engine: every srcrawl service
runs a real srcrawl command, and every variable it sets is one the config reads."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import click
import requests
import yaml
from click_parse import parse_command

from srcrawl.settings.config import ENV_VARS
from srcrawl.testweb import TestWeb

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
S3_VARS = {"AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
"""The AWS SDK's variables the WARC object store's client reads (srcrawl/warc/objects.py)."""


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
        assert set(env) <= set(ENV_VARS) | S3_VARS, name
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

    web = _web(
        {
            k: opts[k]
            for k in (
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
        }
    )
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


def test_the_cluster_profile_runs_three_primaries_with_replicas() -> None:
    s = services()
    nodes = {name: svc for name, svc in s.items() if name.startswith("redis-node-")}
    assert len(nodes) == 6
    for name, svc in nodes.items():
        assert svc["profiles"] == ["cluster"] and "--cluster-enabled" in svc["command"], name
        # the name it announces is the one the other services resolve
        assert svc["command"][svc["command"].index("--cluster-announce-hostname") + 1] == name
    init = s["redis-cluster-init"]
    assert init["profiles"] == ["cluster"] and set(init["depends_on"]) == set(nodes)
    assert "--cluster-replicas 1" in init["command"][0]
    # every srcrawl service takes SRCRAWL_REDIS_URL from the shell, so a cluster URL reaches it
    assert "${SRCRAWL_REDIS_URL:-" in COMPOSE.read_text()


def default(value: str) -> str:
    """The default of a ``${VAR:-default}`` value, as compose resolves it unset."""
    found = re.fullmatch(r"\$\{\w+:-(.*)\}", value)
    return found.group(1) if found else value


def test_every_warc_writer_and_reader_uses_the_object_store_and_no_volume() -> None:
    """The slaves write WARC objects to the store's S3 gateway, and the master, the
    indexer and the portal read the pages' texts there: no volume holds WARC files."""
    s = services()
    gateway = s["objects"]
    for name in ("master", "slave", "indexer", "portal"):
        env = s[name]["environment"]
        assert default(env["SRCRAWL_WARC_DIR"]) == "s3://srcrawl/warc", name
        assert default(env["AWS_ENDPOINT_URL"]) == "http://objects:8333", name
        # they sign with the one identity the gateway knows
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[key] == gateway["environment"][key], (name, key)
        assert s[name]["depends_on"]["objects"] == {"condition": "service_healthy"}, name
        assert not any("warc" in v for v in s[name].get("volumes", [])), name
    assert "warc-data" not in yaml.safe_load(COMPOSE.read_text())["volumes"]
    assert "-s3" in gateway["command"] and "-s3.port=8333" in gateway["command"]
    assert "-ip=objects" in gateway["command"] and "-ip.bind=0.0.0.0" in gateway["command"]
    assert "http://127.0.0.1:8333/healthz" in gateway["healthcheck"]["test"]


def flag(command: list[str], name: str) -> str:
    [value] = [a.split("=", 1)[1] for a in command if a.startswith(f"-{name}=")]
    return value


def test_the_replicated_object_store_survives_one_volume_server() -> None:
    """Profile replicated: a master keeping every object on two volume servers of one
    rack, three volume servers (a write needs both copies: one can die), a filer with
    the S3 gateway; each server announces its service's name."""
    s = services()
    profile = {n: d for n, d in s.items() if d.get("profiles") == ["replicated"]}
    master = profile["objects-master"]
    assert master["command"][0] == "master" and flag(master["command"], "defaultReplication") == (
        "001"
    )
    volumes = {n: d for n, d in profile.items() if d["command"][0] == "volume"}
    assert len(volumes) >= 3
    for name, d in volumes.items():
        assert flag(d["command"], "ip") == name
        assert flag(d["command"], "master") == "objects-master:9333"
        assert d["volumes"] == ["/data"], name  # the container's own, gone with down -v
    gateway = profile["objects-s3"]
    assert gateway["command"][0] == "filer" and "-s3" in gateway["command"]
    assert flag(gateway["command"], "master") == "objects-master:9333"
    assert set(gateway["depends_on"]) == set(volumes)
    assert gateway["environment"] == s["objects"]["environment"]  # the same key pair
    assert set(profile) == {"objects-master", "objects-s3", *volumes}


def test_the_object_stores_publish_on_loopback_only() -> None:
    """Inside the compose network every port is free to use; what reaches this machine
    binds 127.0.0.1, on a port whose gRPC twin (port + 10000) exists."""
    for name, d in services().items():
        if not d.get("image", "").startswith("chrislusf/seaweedfs"):
            continue
        for published in d.get("ports", []):
            bound = re.fullmatch(r"127\.0\.0\.1:\$\{\w+:-(\d+)\}:\d+", published)
            assert bound and int(bound.group(1)) <= 55535, (name, published)


def test_the_index_is_published_to_the_object_store_and_no_volume_holds_it() -> None:
    """The indexer publishes each commit to the object store; the portal and the master
    keep replicas of their own: no srcrawl service mounts a volume for the index (or for
    WARC files)."""
    s = services()
    for name in ("master", "slave", "indexer", "ranker", "portal"):
        env = s[name]["environment"]
        assert default(env["SRCRAWL_INDEX_DIR"]) == "s3://srcrawl/index", name
        assert not s[name].get("volumes"), name
    assert "index-data" not in (COMPOSE.read_text())


def test_the_portal_shows_status_and_metrics_to_prometheus() -> None:
    """Prometheus scrapes the portal from its own container (not loopback): the portal's
    /status and /metrics are public in the stack, and no other service sets it."""
    s = services()
    assert s["portal"]["environment"]["SRCRAWL_STATUS_PUBLIC"] == "all"
    others = [n for n, d in s.items() if n != "portal" and "SRCRAWL_STATUS_PUBLIC" in str(d)]
    assert others == []


def test_mariadb_takes_its_character_set_as_server_options() -> None:
    """The official image has no MARIADB_CHARACTER_SET_SERVER; arguments starting with
    '-' go to mariadbd."""
    mysql = services()["mysql"]
    assert "--character-set-server=utf8mb4" in mysql["command"]
    assert all(a.startswith("--") for a in mysql["command"])
    assert not any("CHARACTER" in k for k in mysql["environment"])


def test_the_build_context_leaves_out_what_the_image_does_not_install() -> None:
    ignored = set((COMPOSE.parent / ".dockerignore").read_text().split())
    assert {".git", "tests", ".srcrawl", ".venv", "**/__pycache__", ".pytest_cache"} <= ignored
    dockerfile = (COMPOSE.parent / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+)", dockerfile, re.M)) | {"pyproject.toml", "README.md"}
    assert not copied & ignored


def test_no_named_volume_is_made_for_a_profile_alone() -> None:
    """Compose v1 creates every named volume at `up`, profile or not: each one is used
    by a service that always runs."""
    spec = yaml.safe_load(COMPOSE.read_text())
    always = {
        v.split(":")[0]
        for d in spec["services"].values()
        if "profiles" not in d
        for v in d.get("volumes", [])
    }
    assert set(spec["volumes"]) <= always
    for name, svc in spec["services"].items():
        if name.startswith("redis-node-"):
            assert svc["volumes"] == ["/data"], name  # the container's own, gone with down -v


CI = COMPOSE.parent / "scripts" / "compose.ci.yml"


def test_the_ci_override_runs_one_prebuilt_image_and_publishes_on_loopback() -> None:
    override = yaml.safe_load(CI.read_text())
    built = {n for n, s in services().items() if s.get("build") == "."}
    assert {n for n, s in override["services"].items() if s.get("image") == "srcrawl:ci"} >= built
    opts = override["networks"]["default"]["driver_opts"]
    assert opts["com.docker.network.bridge.host_binding_ipv4"] == "127.0.0.1"
    web = override["services"]["web"]
    ctx = resolve(web["command"]).make_context("serve", list(web["command"][2:]))
    assert ctx.params["public_host"] == "web" and web["profiles"] == ["ci-web"]
    assert f":{ctx.params['port_base']}/" in " ".join(web["healthcheck"]["test"])
    assert services()["portal"]["ports"] == ["${PORTAL_PORT:-8080}:8080"]


def test_ci_runs_the_readmes_two_commands_and_the_stack() -> None:
    readme = (COMPOSE.parent / "README.md").read_text()
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)\n```", section, re.S)
    assert blocks == ["pip install . && srcrawl demo", "pip install '.[test]' && scripts/test"]
    ci = (COMPOSE.parent / ".ci" / "run").read_text()
    assert "scripts/fresh_machine_check.sh" in ci and "scripts/compose_check.sh" in ci
    # the test run is the README's command, in the container
    assert "pytest" not in ci.replace("PYTEST", "")
    # a plain container, as a user's: no capability added, no init, no server of the host's
    fresh = (COMPOSE.parent / "scripts" / "fresh_machine_check.sh").read_text()
    [run] = re.findall(r"^docker run .*?(?<!\\)\n", fresh, re.S | re.M)
    assert "--cap-add" not in run and "--init" not in run and "--privileged" not in run
    assert "MYSQL" not in run and "SRCRAWL_TEST_MYSQL_URL=" not in ci  # the suite starts one


def test_scripts_test_names_the_command_that_installs_what_is_missing(tmp_path) -> None:
    """Without root or sudo, a missing program stops scripts/test with exit 2 and one
    line naming the apt-get command, before any test runs."""
    needs = "chromium:/nonexistent/chromium wget:/nonexistent/wget redis-server:/bin/sh"
    env = {"PATH": os.environ["PATH"], "SRCRAWL_TEST_NEEDS": needs}
    if os.geteuid() == 0:  # as nobody, whom sudo does not serve without a password
        run_as = [
            shutil.which("setpriv") or "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ]
    else:  # as this user, with the commands it uses but no sudo
        run_as, bin_dir = [], tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("dirname", "id", "apt-get"):
            if shutil.which(tool):
                (bin_dir / tool).symlink_to(shutil.which(tool))
        env["PATH"] = str(bin_dir)
    script = COMPOSE.parent / "scripts" / "test"
    r = subprocess.run(
        [*run_as, "/bin/sh", str(script)], env=env, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == "", r.stderr
    assert "missing chromium wget" in lines[0] and "redis-server" not in lines[0]
    if shutil.which("apt-get"):
        assert lines[0].endswith("apt-get install -y --no-install-recommends chromium wget")


def test_each_srcrawl_service_is_healthy_only_while_it_does_its_job() -> None:
    s = services()
    for name, role in (
        ("master", "master"),
        ("slave", "slave"),
        ("indexer", "indexer"),
        ("ranker", "ranker"),
        ("portal", "portal"),
    ):
        test = s[name]["healthcheck"]["test"]
        assert test == ["CMD", "srcrawl", "health", role], name
        ctx = resolve(test[2:]).make_context("health", test[3:])
        assert ctx.params["role"] == role
    # the portal's check asks the port it serves in its container
    port = s["portal"]["command"][s["portal"]["command"].index("--port") + 1]
    assert resolve(["health", "portal"]).make_context("health", ["portal"]).params["url"] == (
        f"http://127.0.0.1:{port}/healthz"
    )
