"""An S3-compatible object store (``s3://BUCKET/PREFIX``), as WARC files and the search index
use it.

The client is obstore (docs/BENCHMARKS.md, "WARC objects: which S3 client"); the endpoint,
region and keys come from the AWS SDK's standard variables (``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``),
else the keys from the SDK's shared files and profiles (through boto3, imported only then).
obstore itself is imported only by a process that reads or writes objects.
"""

from __future__ import annotations

import datetime
import os
import re
import urllib.error
import urllib.request
from typing import Any

SCHEME = "s3://"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def is_object_url(location: str) -> bool:
    """Whether a location names an object store rather than a directory."""
    return location.startswith(SCHEME)


def parse_url(url: str) -> tuple[str, str]:
    """``s3://BUCKET/PREFIX`` → (bucket, prefix without slashes at either end)."""
    if not is_object_url(url):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r}")
    return bucket, prefix.strip("/")


def valid_bucket(url: str) -> bool:
    """Whether the bucket of the ``s3://`` URL ``url`` is a name S3 accepts."""
    return bool(_BUCKET.fullmatch(url[len(SCHEME) :].split("/", 1)[0]))


def endpoint() -> str | None:
    """The store's endpoint (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``; None: AWS)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def s3_store(bucket: str, prefix: str = "", *, timeout: float = 60.0) -> Any:
    """An obstore S3Store of ``bucket`` under ``prefix``, configured by the SDK's variables;
    ``timeout``: seconds a request may take (a probe's are short)."""
    from obstore.store import S3Store

    url = endpoint()
    options: dict[str, Any] = {
        "client_options": {
            "allow_http": bool(url and url.startswith("http://")),
            "connect_timeout": "2s",
            "timeout": f"{timeout:g}s",
        },
        # few retries inside the client: an outage is waited out above it, where it is
        # said once (WarcOutput, the index publisher and replica), not behind a
        # minutes-long silent retry
        "retry_config": {
            "max_retries": 2,
            "retry_timeout": datetime.timedelta(seconds=min(10.0, timeout)),
        },
    }
    if prefix:
        options["prefix"] = prefix
    if not os.environ.get("AWS_ACCESS_KEY_ID"):
        from obstore.auth.boto3 import Boto3CredentialProvider  # the SDK's files, profiles

        options["credential_provider"] = Boto3CredentialProvider()
    return S3Store(bucket, **options)


def ensure_bucket(bucket: str) -> None:
    """Create ``bucket`` unless it exists: a signed PUT of the bucket's URL, as obstore has
    no call for it."""
    import obstore

    url = obstore.sign(s3_store(bucket), "PUT", "", datetime.timedelta(minutes=5))
    request = urllib.request.Request(url, method="PUT", data=b"")
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy
    try:
        with direct.open(request, timeout=30):
            pass
    except urllib.error.HTTPError as e:
        if e.code != 409:  # BucketAlreadyOwnedByYou / BucketAlreadyExists
            raise


def one_line(e: BaseException) -> str:
    """An object store's error as one line: its type and first line."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
