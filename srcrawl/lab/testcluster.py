"""A real Redis Cluster on loopback, for the tests and benchmarks: primaries with replicas.

Started with ``redis-server --cluster-enabled yes`` and joined with
``redis-cli --cluster create``. Ports stay at or below 55535 because each
node also listens on its port + 10000 (the cluster bus).
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

MAX_PORT = 55535


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(count: int) -> list[int]:
    """``count`` consecutive ports whose bus ports (+10000) are free too."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, MAX_PORT - 10000 - count)
        ports = list(range(base, base + count))
        if all(_free(p) and _free(p + 10000) for p in ports):
            return ports
    raise RuntimeError("no free block of cluster ports on 127.0.0.1")


class RedisClusterProcesses:
    """The nodes of one cluster; ``url`` is srcrawl's ``redis+cluster://`` URL for it."""

    def __init__(self, directory: Path, primaries: int = 3, replicas: int = 1) -> None:
        self.directory = directory
        self.primaries = primaries
        self.replicas = replicas
        self.ports = free_cluster_ports(primaries * (1 + replicas))
        self.procs: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:3])

    def start(self) -> RedisClusterProcesses:
        server = shutil.which("redis-server")
        assert server, "redis-server is not on PATH"
        for port in self.ports:
            self._start_node(server, port)
        for port in self.ports:
            self._wait_ping(port)
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok()
        self.wait_replicas_synced()
        return self

    def wait_replicas_synced(self, timeout: float = 30.0) -> None:
        """Until every replica has finished its sync: before that it cannot take over."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            links = []
            for port, proc in self.procs.items():
                if proc.poll() is None:
                    info = redis.Redis(port=port, socket_timeout=1).info("replication")
                    if info.get("role") == "slave":
                        links.append(info.get("master_link_status") == "up")
            if len(links) == self.primaries * self.replicas and all(links):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster's replicas did not finish their first sync")

    def _start_node(self, server: str, port: int) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [
                server,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(node_dir),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--appendonly",
                "yes",
                "--save",
                "",
                "--logfile",
                str(node_dir / "redis.log"),
                # a replica's first sync starts at once, not after the default 5 s
                "--repl-diskless-sync-delay",
                "0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_ping(self, port: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=port, socket_timeout=1).ping():
                    return
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"cluster node {port} did not start")

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says the cluster is ok and all slots are served."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._node_ok(p) for p, proc in self.procs.items() if proc.poll() is None):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach state ok")

    @staticmethod
    def _node_ok(port: int) -> bool:
        try:
            info = redis.Redis(port=port, socket_timeout=1).cluster("info")
        except (redis.RedisError, OSError):
            return False
        text = info if isinstance(info, str) else str(info)
        return "cluster_state:ok" in text or info.get("cluster_state") == "ok"

    def primary_ports(self) -> list[int]:
        """Ports of the nodes that are primaries now."""
        out = []
        for port, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            role = redis.Redis(port=port, socket_timeout=1).execute_command("ROLE")[0]
            if role in (b"master", "master"):
                out.append(port)
        return sorted(out)

    def primary_of(self, key: str) -> int:
        """The port of the primary serving ``key``'s slot now."""
        for port in self.primary_ports():
            node = redis.Redis(port=port, socket_timeout=1)
            slot = node.cluster("keyslot", key)
            for start, end, primary, *_ in node.cluster("slots"):
                if start <= slot <= end:
                    return int(primary[1])
        raise RuntimeError(f"no primary serves {key}")

    def kill(self, port: int) -> None:
        """SIGKILL one node, as a crashed machine would stop."""
        self.procs[port].kill()
        self.procs[port].wait(timeout=10)

    def keys_by_primary(self, pattern: str) -> dict[int, int]:
        """How many keys matching ``pattern`` each primary holds."""
        return {
            p: sum(1 for _ in redis.Redis(port=p).scan_iter(match=pattern, count=1000))
            for p in self.primary_ports()
        }

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
