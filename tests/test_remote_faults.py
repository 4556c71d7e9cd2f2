"""Faults while process_data.py reads a raw run from a bucket, injected by a proxy in front of the
tests' S3 server (s3_proxy.FaultProxy): each ends bit-equal to the local reading, or in one line
naming the run's URL and the problem, with a non-zero exit, no traceback and no reply body. The
run's pieces are multipart uploads, as DrivAerML's are: their ETags are no checksums, so what
catches a change is the ETag and size each reply carries, and the processed run records a
SHA-256 of every stretch read."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import zarr

from conftest import ROOT
from s3_server import CREDENTIALS, FaultProxy
from test_raw_remote import NO_CREDENTIALS, assert_same_run, published_raw  # noqa: F401  (a fixture)

from domino_pipeline.storage.byte_reader import require_unchanged
from domino_pipeline.inputs.raw_files.remote_files import RemoteObject
from domino_pipeline.storage.object_store import ObjectStoreError, _reason

VOLUME = "run_1/volume_1.vtu.01.part"  # the volume's middle piece


def _signed(s3_server, bucket: str):
    from obstore.store import S3Store

    return S3Store(bucket, endpoint=s3_server.endpoint, access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                   secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region=CREDENTIALS["AWS_REGION"],
                   client_options={"allow_http": True})


def _flipped(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 0xFF
    return bytes(changed)


@pytest.fixture(scope="module")
def bucket(s3_server, published_raw) -> str:  # noqa: F811
    """A public bucket with run_1 under ``good/``, under ``damaged/`` with a volume header whose
    point count is not a number, and under ``other/`` the volume's middle piece replaced by one
    of the same size; every object a multipart upload (an ETag ``<hex>-1``)."""
    import obstore

    name = s3_server.public_bucket("faults")
    store = _signed(s3_server, name)
    for path in sorted((published_raw / "run_1").iterdir()):
        data = path.read_bytes()
        for prefix in ("good", "damaged"):
            if prefix == "damaged" and path.name.endswith(".00.part"):
                data = data.replace(b'NumberOfPoints="', b'NumberOfPoints="x', 1)
            obstore.put(store, f"{prefix}/run_1/{path.name}", data, use_multipart=True)
    middle = (published_raw / VOLUME).read_bytes()
    obstore.put(store, f"other/{VOLUME}", _flipped(middle, len(middle) // 2), use_multipart=True)
    return name


@pytest.fixture()
def proxy(s3_server):
    proxy = FaultProxy(s3_server.endpoint)
    yield proxy
    proxy.stop()


def _process(proxy: FaultProxy, raw: str, out: Path, *extra: str) -> tuple[int, str]:
    """process_data.py on run_1 of ``raw``, unsigned through ``proxy``: (exit code, its output)."""
    env = {k: v for k, v in os.environ.items() if k not in NO_CREDENTIALS} | {"AWS_ENDPOINT_URL": proxy.endpoint}
    result = subprocess.run([sys.executable, "process_data.py", f"data.raw_dir={raw}", f"data.processed_dir={out}",
                             "data.runs=[1]", "process.num_processes=1", *extra],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    return result.returncode, result.stdout + result.stderr


def _one_failure(code: int, output: str, out: Path) -> str:
    """The one FAILED line of a run that was not written, checked: exit 1, no traceback, no XML."""
    failed = [line for line in output.splitlines() if line.startswith("FAILED ")]
    assert code == 1 and len(failed) == 1, output[-3000:]
    assert "Traceback" not in output and "<?xml" not in output and "<Error>" not in output, output[-3000:]
    assert "Generic S3 error" not in output and not (out / "run_1.zarr").exists()
    return failed[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["damaged header", "replaced, If-Match ignored", "replaced, If-Match honoured",
                                  "404", "403", "listing 403"])
def test_a_fault_is_one_line_naming_the_url_and_the_problem(case, bucket, proxy, tmp_path):
    raw, prefix = f"s3://{bucket}/good", "good"
    if case == "damaged header":
        raw, prefix = f"s3://{bucket}/damaged", "damaged"
    elif case.startswith("replaced"):
        proxy.replaced = {f"good/{VOLUME}": f"other/{VOLUME}"}
        proxy.drop_if_match = case.endswith("ignored")
    elif case == "404":
        proxy.errors = {f"good/{VOLUME}": (404, "NoSuchKey")}
    elif case == "403":
        proxy.errors = {"good/run_1/boundary_1.vtp": (403, "AccessDenied")}
    else:
        proxy.errors = {"prefix=good%2Frun_1": (403, "AccessDenied")}
    line = _one_failure(*_process(proxy, raw, tmp_path), tmp_path)
    url = f"s3://{bucket}/{prefix}/run_1"
    expected = {
        "damaged header": f"FAILED run_1: {url}/volume_1.vtu: unreadable (Piece: NumberOfPoints='x",
        "replaced, If-Match ignored": f"FAILED run_1: {url}/volume_1.vtu.01.part: changed since it was listed (its ETag was",
        "replaced, If-Match honoured": f"FAILED run_1: {url}/volume_1.vtu.01.part: changed since it was listed (its ETag "
                                       "is no longer",
        "404": f"FAILED run_1: {url}/volume_1.vtu.01.part: not found (HTTP 404 NoSuchKey); it was listed, and has been "
               "removed since",
        "403": f"FAILED run_1: {url}/boundary_1.vtp: access denied (HTTP 403 AccessDenied) to unsigned requests",
        "listing 403": f"FAILED run_1: {url}: access denied (HTTP 403 AccessDenied)",
    }[case]
    assert line.startswith(expected), line


@pytest.mark.slow
def test_a_three_second_outage_mid_volume_is_outlasted_and_the_get_resumed_at_its_byte(
        bucket, proxy, published_raw, tiny_processed_dir, tmp_path):  # noqa: F811
    proxy.outage_at = (f"good/{VOLUME}", 5000, 3.0)  # 5000 bytes of a GET, then the endpoint is down 3 s
    code, output = _process(proxy, f"s3://{bucket}/good", tmp_path)
    assert code == 0 and proxy.outages == 1, output[-3000:]
    assert_same_run(tmp_path / "run_1.zarr", tiny_processed_dir / "run_1.zarr")
    ranges = [urllib.parse.unquote(r) for _, path, r, _ in proxy.requests if r and VOLUME in path]
    starts = {int(r.split("=")[1].split("-")[0]) for r in ranges}
    assert any(s + 5000 in starts for s in starts), ranges  # asked again from the byte reached
    # no checksum covers a multipart upload: what was read is recorded, stretch by stretch
    volume = zarr.open_group(str(tmp_path / "run_1.zarr"), mode="r").attrs["sources"]["volume"]
    assert volume["checked"] == "size" and volume["read"], volume
    whole = b"".join((published_raw / "run_1" / Path(p["url"]).name).read_bytes() for p in volume["pieces"])
    for stretch in volume["read"]:
        start, stop = stretch["bytes"]
        assert hashlib.sha256(whole[start:stop]).hexdigest() == stretch["sha256"], stretch


@pytest.mark.slow
def test_an_outage_past_the_retry_deadline_is_one_line(bucket, proxy, tmp_path):
    proxy.outage_at = (f"good/{VOLUME}", 5000, 4.0)
    line = _one_failure(*_process(proxy, f"s3://{bucket}/good", tmp_path, "data.retry_deadline_s=1"), tmp_path)
    assert line.startswith(f"FAILED run_1: s3://{bucket}/good/{VOLUME}: error sending request (connection refused): "
                           "GET failed after "), line


def test_a_reply_is_named_by_its_status_and_code_never_its_body():
    body = ('Server returned non-2xx status code: 404 Not Found: <?xml version="1.0" encoding="UTF-8"?>\n'
            "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>")
    assert _reason(FileNotFoundError(f"Object at location k not found: Error performing GET http://h/k in 2ms - {body}")) \
        == "not found (HTTP 404 NoSuchKey)"
    refused = ("Generic S3 error: Generic S3 error: Error performing GET http://h/b/k in 61.5s, after 21 retries, "
               "max_retries: 64, retry_timeout: 60s  - HTTP error: error sending request\n\nDebug: Connection refused")
    assert _reason(Exception(refused)) == "error sending request (connection refused): GET failed after 21 retries in 61.5 s"
    assert _reason(Exception("Generic S3 error: Generic S3 error: something else\nmore")) == "something else"


def test_a_reply_of_another_etag_or_size_is_a_changed_object():
    piece = RemoteObject("s3://b/run_1/v.part", "run_1/v.part", 100, None, '"abc-2"')
    require_unchanged(piece, {"size": 100, "e_tag": '"abc-2"'}, 0, 10, 10)
    require_unchanged(piece, {"size": 100, "e_tag": "W/abc-2"}, 0, 10, 10)
    with pytest.raises(ObjectStoreError, match=r'^s3://b/run_1/v\.part: changed since it was listed \(its ETag was '
                                               r'"abc-2" then, "def-2" now\)$'):
        require_unchanged(piece, {"size": 100, "e_tag": '"def-2"'}, 0, 10, 10)
    with pytest.raises(ObjectStoreError, match=r"changed since it was listed \(100 bytes then, 90 now\)"):
        require_unchanged(piece, {"size": 90, "e_tag": '"abc-2"'}, 0, 10, 10)


def test_the_retry_deadline_is_configured_and_must_be_positive():
    from conftest import typed_config

    from domino_pipeline.inputs.raw_files.raw_reading import RemoteAccess
    assert typed_config().data.retry_deadline_s == 60
    assert typed_config("data.retry_deadline_s=5").data.retry_deadline_s == 5
    with pytest.raises(ValueError, match=r"data\.retry_deadline_s must be positive, not 0"):
        typed_config("data.retry_deadline_s=0")
    with pytest.raises(ValueError, match=r"data\.retry_deadline_s must be positive, not -1"):
        RemoteAccess(retry_deadline_s=-1)
