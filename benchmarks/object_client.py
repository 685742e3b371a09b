"""Which S3 client keeps WARC objects: boto3, obstore or minio against a real SeaweedFS.

Each client runs in a fresh process (its import time is a cold import), against one
``weed server -s3`` on loopback: a PUT of one 4 MB object (the size of a published
WARC file), then ranged GETs of 2 KB at random offsets (a page's record, as the
portal and the index read them), and the process's peak RSS at the end.

    python -m benchmarks.object_client [--gets 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from srcrawl.lab.seaweedfs import SeaweedFS

CLIENTS = ("boto3", "obstore", "minio")

_CHILD = r"""
import json, os, random, sys, time
client_name, bucket, gets = sys.argv[1], sys.argv[2], int(sys.argv[3])
endpoint = os.environ["AWS_ENDPOINT_URL"]
def hwm():  # VmHWM: the peak of this process image (ru_maxrss would carry the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
rss0 = hwm()
t0 = time.perf_counter()
if client_name == "boto3":
    import boto3
    c = boto3.client("s3")
    put = lambda k, b: c.put_object(Bucket=bucket, Key=k, Body=b)
    def get(k, o, n):
        return c.get_object(Bucket=bucket, Key=k, Range=f"bytes={o}-{o+n-1}")["Body"].read()
elif client_name == "obstore":
    import obstore
    from obstore.store import S3Store
    c = S3Store(bucket, endpoint=endpoint, client_options={"allow_http": True})
    put = lambda k, b: obstore.put(c, k, b)
    get = lambda k, o, n: bytes(obstore.get_range(c, k, start=o, length=n))
else:
    import minio
    from urllib.parse import urlparse
    u = urlparse(endpoint)
    c = minio.Minio(u.netloc, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                    secure=False, region=os.environ["AWS_REGION"])
    import io
    put = lambda k, b: c.put_object(bucket, k, io.BytesIO(b), len(b))
    def get(k, o, n):
        r = c.get_object(bucket, k, offset=o, length=n)
        try:
            return r.read()
        finally:
            r.close(); r.release_conn()
import_s = time.perf_counter() - t0
body = os.urandom(4 << 20)
key = f"bench/{client_name}-{os.getpid()}.warc.gz"
t0 = time.perf_counter()
put(key, body)
put_s = time.perf_counter() - t0
rng = random.Random(1)
lat = []
for _ in range(gets):
    o = rng.randrange(0, len(body) - 2048)
    t0 = time.perf_counter()
    data = get(key, o, 2048)
    lat.append(time.perf_counter() - t0)
    assert data == body[o:o + 2048]
lat.sort()
rss = hwm()
print(json.dumps({"import_ms": import_s * 1e3, "put_ms": put_s * 1e3,
                  "get_p50_ms": lat[len(lat) // 2] * 1e3,
                  "get_p90_ms": lat[int(len(lat) * .9)] * 1e3,
                  "rss_mb": rss, "rss_base_mb": rss0}))
"""


def run_client(name: str, env: dict[str, str], bucket: str, gets: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, name, bucket, str(gets)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gets", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedFS(Path(tmp)).start()
        try:
            env = {**os.environ, **server.env()}
            import boto3

            boto3.client("s3", endpoint_url=server.endpoint, **_keys(env)).create_bucket(
                Bucket="bench"
            )
            results: dict[str, list[dict]] = {c: [] for c in CLIENTS}
            for _ in range(args.rounds):  # interleaved: a slow spell of the machine hits all
                for name in CLIENTS:
                    results[name].append(run_client(name, env, "bench", args.gets))
        finally:
            server.stop()
    print(
        f"{'client':8} {'import ms':>9} {'PUT 4MB ms':>10} {'GET 2KB p50':>11} "
        f"{'p90':>6} {'peak RSS MB':>11} {'(python)':>8}"
    )
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"{name:8} {med['import_ms']:9.0f} {med['put_ms']:10.1f} {med['get_p50_ms']:11.2f} "
            f"{med['get_p90_ms']:6.2f} {med['rss_mb']:11.1f} {med['rss_base_mb']:8.1f}"
        )


def _keys(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_REGION"],
    }


if __name__ == "__main__":
    main()
