"""The Grafana dashboard that ships (docs/grafana/srcrawl.json) queries only metrics a
running srcrawl exports, and a real Prometheus scraping a running crawl finds them all.

The engine runs for real: an always-on crawl master, a crawl slave and
``index --follow`` in processes of their own over the test web, the portal in
a thread. Prometheus is Debian's server (``apt-get install prometheus``), run
from its binary with a configuration and a database of the test's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from srcrawl.portal.server import build_portal, serving_in_thread
from srcrawl.settings.config import Config
from srcrawl.testweb import TestWeb

from .conftest import cli_env

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "srcrawl.json"
PROMETHEUS = "prometheus"
METRIC = re.compile(r"\bsrcrawl_[a-z0-9_]+\b")
FAST = [
    "--delay",
    "0.05",
    "--delay-factor",
    "0",
    "--max-delay",
    "1",
    "--fetch-timeout",
    "1",
    "--robots-defer",
    "0.3",
    "--retry-backoff",
    "0.1",
]


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in doc["panels"] for t in panel.get("targets", [])]


def queried_metrics() -> set[str]:
    """Every metric name in the dashboard's PromQL expressions."""
    return {name for expr in dashboard_queries() for name in METRIC.findall(expr)}


def test_the_dashboard_is_grafana_json_with_queries_of_every_kind() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "srcrawl" and doc["panels"]
    names = queried_metrics()
    titles = " ".join(p["title"].lower() for p in doc["panels"])
    for topic in ("fetch", "fail", "queue", "index delay", "memory", "disk"):
        assert topic in titles, topic
    assert {
        "srcrawl_fetches_total",
        "srcrawl_frontier_queues",
        "srcrawl_index_delay_seconds",
        "srcrawl_redis_used_memory_bytes",
        "srcrawl_disk_free_bytes",
    } <= names


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        env=env,
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _until(what, timeout: float, say: str) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, f"timed out waiting for {say}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def engine(redis_url, tmp_path_factory):
    """A running always-on crawl with an index following it, and the portal: its URL."""
    tmp = tmp_path_factory.mktemp("engine")
    env = cli_env(redis_url, f"dash-{os.getpid()}", tmp)
    cfg = Config.load(env=env)
    cfg.store().init_schema()
    client = redis.Redis.from_url(redis_url)
    with TestWeb.generate(hosts=3, pages=20, seed=3) as web:
        log = tmp / "engine.log"
        procs = [
            _start(
                ["master", "start", *web.seed_urls, "--depth", "3", *FAST, "--keep-running"],
                env,
                log,
            )
        ]
        try:
            _until(lambda: client.exists(cfg.keys.crawl_strategy), 30, "the crawl")
            procs += [
                _start(["index", "--follow", "--max-delay", "2s", "--slaves", "1"], env, log),
                _start(["slave", "start", "--phases", "crawl"], env, log),
            ]
            stats = cfg.keys.stats("index")
            _until(lambda: client.hget(stats, "delay_p50_s") is not None, 120, "index delays")
            with serving_in_thread(build_portal(cfg, threads=1, admin_token="")) as url:
                yield url
        finally:
            _stop(procs)
            if any(p.returncode not in (0, -signal.SIGTERM) for p in procs):
                print(log.read_text()[-5000:])


def _exported(url: str) -> set[str]:
    text = requests.get(url + "metrics", timeout=30).text
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.slow
def test_every_metric_the_dashboard_queries_is_exported_by_a_running_engine(engine) -> None:
    missing = queried_metrics() - _exported(engine)
    assert not missing, f"the dashboard queries metrics srcrawl does not export: {missing}"


def _prometheus_binary() -> str:
    found = shutil.which(PROMETHEUS)
    assert found, "the prometheus server is missing: apt-get install prometheus"
    return found


@pytest.fixture
def prometheus(engine, tmp_path):
    """Prometheus scraping the portal every second: its API's URL."""
    binary = _prometheus_binary()
    target = engine.removeprefix("http://").rstrip("/")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: srcrawl\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = _free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=(tmp_path / "prometheus.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: _ready(url), 60, "Prometheus")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=2).ok
    except requests.RequestException:
        return False


def _query(url: str, expr: str) -> dict:
    r = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert r.ok and body["status"] == "success", (expr, body)
    return body["data"]


@pytest.mark.slow
def test_a_real_prometheus_scraping_the_engine_finds_what_the_dashboard_uses(prometheus) -> None:
    up = 'up{job="srcrawl"}'
    _until(
        lambda: [r["value"][1] for r in _query(prometheus, up)["result"]] == ["1"],
        60,
        "a successful scrape",
    )
    time.sleep(5)  # a few scrapes: the rates have two points at least
    for name in sorted(queried_metrics()):
        assert _query(prometheus, name)["result"], f"Prometheus has no {name}"
    for expr in dashboard_queries():  # every panel's query is valid PromQL with an answer
        assert _query(prometheus, expr)["resultType"] == "vector", expr
    fetched = _query(prometheus, 'sum(srcrawl_fetches_total{status_class="2xx"})')["result"]
    assert float(fetched[0]["value"][1]) >= 20


def test_the_compose_metrics_profile_scrapes_the_portal_and_provisions_the_dashboard() -> None:
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    prom, grafana = compose["prometheus"], compose["grafana"]
    assert prom["profiles"] == ["metrics"] and grafana["profiles"] == ["metrics"]
    assert grafana["image"].startswith("grafana/grafana")
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"] if ":" in v}
    config = ROOT / mounts["/etc/prometheus/prometheus.yml"].removeprefix("./")
    scrape = yaml.safe_load(config.read_text())["scrape_configs"]
    portal_port = compose["portal"]["command"][compose["portal"]["command"].index("--port") + 1]
    assert [t for s in scrape for c in s["static_configs"] for t in c["targets"]] == [
        f"portal:{portal_port}"
    ]
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus"
    check = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    mounted = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    dashboards = ROOT / mounted["/var/lib/grafana/dashboards"].removeprefix("./")
    assert (dashboards / DASHBOARD.name).is_file()
    provisioning = ROOT / mounted["/etc/grafana/provisioning"].removeprefix("./")
    provider = yaml.safe_load((provisioning / "dashboards" / "srcrawl.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
