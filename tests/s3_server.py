"""An S3 server on 127.0.0.1 for the object-storage tests (moto's server mode), buckets made
by plain HTTP (public ones, that unsigned requests may read, with a bucket policy), and (from benchmarks/s3_proxy.py) a small proxy in front of it that fails or
delays some requests."""

from __future__ import annotations

import json
import sys
import urllib.request
import uuid
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))
from s3_proxy import FaultProxy  # noqa: E402,F401  (the benchmark's proxy, re-exported)
from s3_servers import public_read_policy  # noqa: E402

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret",
               "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


class MotoServer:
    """moto's S3 server in a thread of this process, on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.ERROR)

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def bucket(self, prefix: str = "cache") -> str:
        """A new empty bucket's name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")).close()
        return name

    def public_bucket(self, prefix: str = "public") -> str:
        """A new empty bucket whose objects anyone may list and read (a bucket policy granting
        s3:ListBucket and s3:GetObject to every principal, as a public dataset's bucket has):
        its name. Without the policy, moto refuses unsigned GETs."""
        import boto3

        name = self.bucket(prefix)
        client = boto3.client("s3", endpoint_url=self.endpoint, region_name=CREDENTIALS["AWS_REGION"],
                              aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        client.put_bucket_policy(Bucket=name, Policy=json.dumps(public_read_policy(name)))
        return name

    def stop(self) -> None:
        self._server.stop()
