"""Raw runs processed straight from where they are published: a public bucket on a local S3
server (moto, DrivAerML's layout caemldatasets/drivaer/dataset/run_<i>/ with the volume in
.00.part pieces, read with unsigned requests and no credentials in the environment) and a local
server laid out as the Hugging Face Hub (tree API and resolve URLs). Each equals the same run
processed from local files, bit for bit; bytes fetched stay within 5% of the files' bytes; a
connection reset mid-piece resumes at its byte; a changed byte is named by its piece; a killed
run is fetched again on a rerun, and a finished one is not."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
import zarr

from conftest import PROCESS_OPTIONS, ROOT
from hub_server import HubServer
from s3_server import FaultProxy
from synthetic_data import join_pieces, split_into_pieces

from domino_pipeline.storage import object_store
from domino_pipeline.inputs.processing.process_runs import fetch_summary, process_all
from domino_pipeline.inputs.raw_files.raw_reading import RemoteAccess
from domino_pipeline.inputs.raw_files.remote_runs import find_remote_runs, remote_run_files
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile

PREFIX = "drivaer/dataset"
SMALL = RemoteAccess(chunk_bytes=1 << 16, in_flight=4)  # tiny files still take several GETs each
NO_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


@pytest.fixture(scope="module")
def published_raw(tiny_raw_dir: Path, tmp_path_factory) -> Path:
    """``tiny_raw_dir`` as DrivAerML publishes it: each volume in three .00.part pieces."""
    out = tmp_path_factory.mktemp("published") / "dataset"
    shutil.copytree(tiny_raw_dir, out)
    for run in sorted(out.glob("run_*")):
        volume = join_pieces(run / f"volume_{run.name.split('_')[1]}.vtu")  # the generator's two pieces
        size = volume.stat().st_size
        split_into_pieces(volume, [size // 3, 2 * size // 3])
    return out


@pytest.fixture(scope="module")
def public_bucket(s3_server, published_raw: Path) -> str:
    """``published_raw`` uploaded to a public bucket under caemldatasets' prefix: the bucket."""
    bucket = s3_server.public_bucket("caemldatasets")
    for path in sorted(p for p in published_raw.rglob("*") if p.is_file()):
        store, key = object_store.bucket_and_key(f"s3://{bucket}/{PREFIX}/{path.relative_to(published_raw).as_posix()}")
        import obstore
        obstore.put(store, key, path.read_bytes())
    return bucket


@pytest.fixture()
def unsigned(s3_server, monkeypatch) -> FaultProxy:
    """No credentials in the environment; S3 requests go through a proxy that logs them."""
    proxy = FaultProxy(s3_server.endpoint)
    for name in NO_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setattr(object_store, "_STORES", {})  # new clients, through the proxy
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def hub(published_raw: Path):
    """A local Hub serving ``published_raw`` as dataset repository owner/drivaerml, its tree in
    pages of three entries; HF_ENDPOINT points at it."""
    with HubServer(page_size=3) as server:
        server.add("owner/drivaerml", published_raw)
        saved = os.environ.get("HF_ENDPOINT")
        os.environ["HF_ENDPOINT"] = server.endpoint
        yield server
        os.environ.pop("HF_ENDPOINT") if saved is None else os.environ.__setitem__("HF_ENDPOINT", saved)


def assert_same_run(got: Path, expected: Path) -> None:
    """Two processed runs hold the same arrays bit for bit and the same attributes, but for
    where their files came from and the write id."""
    a, b = zarr.open_group(str(got), mode="r"), zarr.open_group(str(expected), mode="r")
    assert sorted(a.array_keys()) == sorted(b.array_keys())
    for name in a.array_keys():
        x, y = a[name][...], b[name][...]
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    skip = {"write_id", "sources"}
    assert {k: v for k, v in a.attrs.items() if k not in skip} == {k: v for k, v in b.attrs.items() if k not in skip}
    assert {k: v["bytes"] for k, v in a.attrs["sources"].items()} == {k: v["bytes"] for k, v in b.attrs["sources"].items()}


def _processed(results) -> list[str]:
    assert [r.status for r in results] == ["processed"] * len(results), [r.message for r in results]
    return [r.name for r in results]


@pytest.mark.slow
def test_runs_read_unsigned_from_a_public_bucket_equal_the_local_ones(public_bucket, unsigned, tiny_processed_dir,
                                                                     tmp_path):
    results = process_all(f"s3://{public_bucket}/{PREFIX}", tmp_path, PROCESS_OPTIONS, access=SMALL)
    assert _processed(results) == ["run_1", "run_2"]
    for name in ("run_1", "run_2"):
        assert_same_run(tmp_path / f"{name}.zarr", tiny_processed_dir / f"{name}.zarr")
    for r in results:
        assert r.source_bytes > 0 and 1.0 <= r.bytes / r.source_bytes <= 1.05, (r.bytes, r.source_bytes)
    assert unsigned.requests and not any(signed for *_, signed in unsigned.requests)
    sources = zarr.open_group(str(tmp_path / "run_1.zarr"), mode="r").attrs["sources"]
    volume = sources["volume"]
    assert volume["url"] == f"s3://{public_bucket}/{PREFIX}/run_1/volume_1.vtu" and volume["checked"] == "size+md5"
    assert [p["url"].rsplit("/", 1)[-1] for p in volume["pieces"]] == [f"volume_1.vtu.{k:02d}.part" for k in range(3)]
    assert all(p["checksum"].startswith("md5:") for p in volume["pieces"])
    assert "fetched 0.00" in fetch_summary(results) and "(1.0" in fetch_summary(results)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir() if p.name != ".locks")  # no staging left


@pytest.mark.slow
def test_without_checksums_only_the_arrays_read_are_fetched_through_transient_errors(public_bucket, unsigned, tiny_processed_dir, tmp_path):
    access = RemoteAccess(verify=False, chunk_bytes=1 << 16)
    unsigned.fail_every = 4  # every fourth GET answered 503: retried with backoff
    [result] = process_all(f"s3://{public_bucket}/{PREFIX}", tmp_path, PROCESS_OPTIONS, runs=[2], access=access)
    assert unsigned.failed > 0 and result.status == "processed", result.message
    assert_same_run(tmp_path / "run_2.zarr", tiny_processed_dir / "run_2.zarr")
    assert result.bytes < 0.9 * result.source_bytes  # the volume's other arrays stay where they are
    assert zarr.open_group(str(tmp_path / "run_2.zarr"), mode="r").attrs["sources"]["volume"]["checked"] == "size"
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("staging ", "surface blocks", "volume blocks"))]


@pytest.mark.slow
def test_a_private_bucket_refuses_unsigned_reads_in_one_line(s3_server, unsigned, published_raw, tmp_path):
    import boto3

    from s3_server import CREDENTIALS
    bucket = s3_server.bucket("private")  # no policy: moto, as S3, refuses anonymous GETs
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                          aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    for path in sorted(p for p in (published_raw / "run_1").iterdir()):
        client.put_object(Bucket=bucket, Key=f"{PREFIX}/run_1/{path.name}", Body=path.read_bytes())
    [result] = process_all(f"s3://{bucket}/{PREFIX}", tmp_path, PROCESS_OPTIONS)
    assert result.status == "failed"
    assert result.message == (f"s3://{bucket}/{PREFIX}/run_1/drivaer_1.stl: access denied (HTTP 403) to unsigned "
                              "requests (data.anonymous=false signs them with the environment's credentials)")


@pytest.mark.slow
def test_runs_read_from_the_hub_equal_the_local_ones(hub, tiny_processed_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub.requests.clear()
    results = process_all("hf://datasets/owner/drivaerml", tmp_path, PROCESS_OPTIONS, access=SMALL, num_processes=2)
    assert _processed(results) == ["run_1", "run_2"]  # two worker processes, their bytes on the parent's bars
    for name in ("run_1", "run_2"):
        assert_same_run(tmp_path / f"{name}.zarr", tiny_processed_dir / f"{name}.zarr")
    assert all(1.0 <= r.bytes / r.source_bytes <= 1.05 for r in results)
    sources = zarr.open_group(str(tmp_path / "run_2.zarr"), mode="r").attrs["sources"]
    assert sources["stl"]["url"] == "hf://datasets/owner/drivaerml/run_2/drivaer_2.stl"
    assert sources["surface"]["checked"] == "size+sha256" and sources["surface"]["pieces"][0]["checksum"].startswith("sha256:")
    trees = [path for method, path, _, _ in hub.requests if "/api/datasets/" in path]
    assert any("cursor=" in path for path in trees)  # the listing took several pages
    assert not any(auth for *_, auth in hub.requests)
    assert any(path.startswith("/cdn/") for _, path, _, _ in hub.requests)  # LFS files via the redirect


@pytest.mark.slow
def test_a_connection_reset_mid_piece_resumes_at_its_byte(hub, public_bucket, unsigned, tiny_processed_dir, tmp_path):
    hub.requests.clear()
    hub.drop_after = 20_000  # the next long GET is cut after 20,000 bytes
    [result] = process_all("hf://datasets/owner/drivaerml", tmp_path / "hub", PROCESS_OPTIONS, runs=[1],
                           access=RemoteAccess(chunk_bytes=1 << 17))
    assert hub.dropped == 1 and result.status == "processed"
    ranges = [urllib.parse.unquote(r) for _, path, r, _ in hub.requests if r and path.startswith("/cdn/")]
    starts = {int(r.split("=")[1].split("-")[0]) for r in ranges}
    assert any(s + 20_000 in starts for s in starts), ranges  # asked again from the byte reached
    assert result.bytes <= 1.05 * result.source_bytes
    assert_same_run(tmp_path / "hub" / "run_1.zarr", tiny_processed_dir / "run_1.zarr")
    unsigned.drop_after = 30_000
    [result] = process_all(f"s3://{public_bucket}/{PREFIX}", tmp_path / "s3", PROCESS_OPTIONS, runs=[1],
                           access=RemoteAccess(chunk_bytes=1 << 17))
    assert unsigned.dropped == 1 and result.status == "processed" and result.bytes <= 1.05 * result.source_bytes
    assert_same_run(tmp_path / "s3" / "run_1.zarr", tiny_processed_dir / "run_1.zarr")


@pytest.mark.slow
def test_a_changed_byte_in_a_piece_is_named(hub, public_bucket, unsigned, tmp_path):
    piece = "run_1/volume_1.vtu.01.part"
    hub.corrupt("owner/drivaerml", piece, 1234)
    try:
        [result] = process_all("hf://datasets/owner/drivaerml", tmp_path / "hub", PROCESS_OPTIONS, runs=[1], access=SMALL)
    finally:
        hub.corrupted.clear()
    assert result.status == "failed"
    assert result.message.startswith(f"hf://datasets/owner/drivaerml/{piece}: its SHA-256 is ")
    assert "its listing says" in result.message and not (tmp_path / "hub" / "run_1.zarr").exists()
    unsigned.flip_at = ("run_2/drivaer_2.stl", 5000)  # a byte of the STL's first GET
    [result] = process_all(f"s3://{public_bucket}/{PREFIX}", tmp_path / "s3", PROCESS_OPTIONS, runs=[2], access=SMALL)
    assert unsigned.flipped == 1 and result.status == "failed"
    assert f"s3://{public_bucket}/{PREFIX}/run_2/drivaer_2.stl: its MD5 is " in result.message


@pytest.mark.slow
def test_a_damaged_published_file_is_named_by_its_url_and_finished_runs_stay(hub, published_raw, tmp_path):
    """A run whose force CSV is unreadable fails in one line naming the CSV's URL, not the
    temporary copy it was read from; a run already processed is kept and skipped."""
    folder = tmp_path / "dataset"
    shutil.copytree(published_raw, folder)
    (folder / "run_2" / "force_mom_2.csv").write_text("Cd, Cl\nnot, numbers\n")
    hub.add("owner/damaged", folder)
    out = tmp_path / "processed"
    [first] = process_all("hf://datasets/owner/damaged", out, PROCESS_OPTIONS, runs=[1], access=SMALL)
    assert first.status == "processed"
    written = (out / "run_1.zarr" / "zarr.json").read_bytes()
    results = process_all("hf://datasets/owner/damaged", out, PROCESS_OPTIONS, access=SMALL)
    assert [r.status for r in results] == ["skipped", "failed"]
    assert results[1].message.startswith("hf://datasets/owner/damaged/run_2/force_mom_2.csv: "), results[1].message
    assert ".raw" not in results[1].message and not (out / "run_2.zarr").exists()
    assert (out / "run_1.zarr" / "zarr.json").read_bytes() == written


def test_an_etag_is_a_checksum_only_when_it_is_a_plain_md5():
    from domino_pipeline.inputs.raw_files.remote_runs import _md5_checksum

    assert _md5_checksum('"174ac9a4f023a557a68ab0417355970e"') == "md5:174ac9a4f023a557a68ab0417355970e"
    assert _md5_checksum('"67697355489d2004c75eb412929cb432-19"') is None  # a multipart upload's
    assert _md5_checksum(None) is None and _md5_checksum('"0x8DC1"') is None


@pytest.mark.slow
def test_remote_runs_are_listed_selected_and_missing_files_named(public_bucket, unsigned, hub):
    for url in (f"s3://{public_bucket}/{PREFIX}", "hf://datasets/owner/drivaerml"):
        runs = find_remote_runs(url, PROCESS_OPTIONS.dataset, anonymous=None)
        assert [r.name for r in runs] == ["run_1", "run_2"]
        files = remote_run_files(runs[1], PROCESS_OPTIONS.dataset)
        assert [p.url.rsplit("/", 1)[-1] for p in files.volume.pieces] == [f"volume_2.vtu.{k:02d}.part" for k in range(3)]
        assert files.volume.size == sum(p.size for p in files.volume.pieces) > 0
    with pytest.raises(FileNotFoundError, match=rf"s3://{public_bucket}/nothing: no such raw-data prefix"):
        find_remote_runs(f"s3://{public_bucket}/nothing", PROCESS_OPTIONS.dataset, anonymous=None)
    with pytest.raises(FileNotFoundError, match=r"hf://datasets/owner/drivaerml/nothing: no such folder on the Hub"):
        find_remote_runs("hf://datasets/owner/drivaerml/nothing", PROCESS_OPTIONS.dataset, anonymous=None)
    run = find_remote_runs("hf://datasets/owner/drivaerml", PROCESS_OPTIONS.dataset, anonymous=None)[0]
    profile = PROCESS_OPTIONS.dataset
    other = type(profile.files)(**{**profile.files.__dict__, "volume": "flow_{index}.vtu"})
    with pytest.raises(FileNotFoundError, match=r"hf://datasets/owner/drivaerml/run_1/flow_1\.vtu: missing file "
                                                r"\(dataset\.files\.volume; process\.parts=surface leaves"):
        remote_run_files(run, type(profile)(**{**profile.__dict__, "files": other}))


def test_opening_an_inline_binary_file_reads_its_header_not_its_data(tmp_path):
    """DrivAerML's volume stores its arrays inline (base64 between the tags): opening it skips
    their text where each array's header says it ends, instead of scanning gigabytes."""
    from synthetic_data import generate_run
    from domino_pipeline.inputs.raw_files import concat_bytes
    from synthetic.vtk_xml_writer import Encoding

    run = generate_run(tmp_path / "run_1", 1, 0, 1500, 3000, 200_000, Encoding("binary", "none"))
    path = run / "volume_1.vtu"
    read = []
    original = concat_bytes.ConcatBytes.read

    def counted(self, position, n):
        data = original(self, position, n)
        read.append(len(data))
        return data

    concat_bytes.ConcatBytes.read = counted
    try:
        file = VtkXmlFile.open(path)
    finally:
        concat_bytes.ConcatBytes.read = original
    size = sum(p.stat().st_size for p in concat_bytes.file_pieces(path))
    assert sum(read) < size / 10, (sum(read), size)
    assert file.n_points == 200_000 and file.read("PointData", "pMeanTrim", 0, 3).shape == (3, 1)


@pytest.mark.slow
def test_a_run_killed_during_its_download_is_fetched_again_and_no_finished_run_is(
        public_bucket, s3_server, tiny_processed_dir, tmp_path):
    out = tmp_path / "processed"
    proxy = FaultProxy(s3_server.endpoint, slow_every=1, delay=0.05)
    env = {k: v for k, v in os.environ.items() if k not in NO_CREDENTIALS} | {"AWS_ENDPOINT_URL": proxy.endpoint}
    command = [sys.executable, "process_data.py", f"data.raw_dir=s3://{public_bucket}/{PREFIX}",
               f"data.processed_dir={out}", "process.num_processes=1"]
    try:
        child = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not ((out / "run_1.zarr").exists() and any("/run_2/volume_2" in p for _, p, _, _ in proxy.requests)):
            assert child.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.005)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        assert not (out / "run_2.zarr").exists() and any(p.name.startswith(".run_2.zarr") for p in out.iterdir())
        proxy.requests.clear()
        proxy.delay = 0.0
        with pytest.MonkeyPatch.context() as patch:
            for name in NO_CREDENTIALS:
                patch.delenv(name, raising=False)
            patch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            patch.setattr(object_store, "_STORES", {})
            results = process_all(f"s3://{public_bucket}/{PREFIX}", out, PROCESS_OPTIONS)
    finally:
        proxy.stop()
    assert [(r.name, r.status) for r in results] == [("run_1", "skipped"), ("run_2", "processed")]
    paths = [urllib.parse.unquote(path) for _, path, _, _ in proxy.requests]
    assert not any("run_1/" in path for path in paths), paths  # neither listed nor fetched again
    assert_same_run(out / "run_2.zarr", tiny_processed_dir / "run_2.zarr")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".locks")) == ["run_1.zarr", "run_2.zarr"]


@pytest.mark.slow
def test_openfoam_output_read_from_the_hub_equals_the_local_reading(tmp_path, monkeypatch):
    """foamToVTK's own files (inline base64, polyhedra with legacy faces: DrivAerML's form) and
    forceCoeffs' coefficient.dat on the Hub, through the openfoam profile, processed as cell
    centres (connectivity, types and faces staged): as from local disk, published coefficients
    included."""
    from conftest import typed_config

    from domino_pipeline.inputs.processing.process_options import ProcessOptions
    config = typed_config("dataset=openfoam", "process.volume_source=cells")
    options = ProcessOptions.from_config(config.dataset, config.physics, config.process)
    fixture = ROOT / "tests" / "data" / "openfoam"
    local = process_all(fixture, tmp_path / "local", options)
    assert _processed(local) == ["run_1", "run_2"]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with HubServer() as server:
        server.add("owner/openfoam", fixture)
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        remote = process_all("hf://datasets/owner/openfoam", tmp_path / "remote", options, access=SMALL)
    assert _processed(remote) == ["run_1", "run_2"]
    for run in ("run_1", "run_2"):
        assert_same_run(tmp_path / "remote" / f"{run}.zarr", tmp_path / "local" / f"{run}.zarr")
    published = zarr.open_group(str(tmp_path / "remote" / "run_1.zarr"), mode="r").attrs["published"]
    assert published["own"]["cd"] > 0  # coefficient.dat fetched whole and read
    assert all(1.0 <= r.bytes / r.source_bytes <= 1.05 for r in remote)


def test_hub_urls_name_a_folder_at_a_revision(monkeypatch):
    from domino_pipeline.storage.hub import HubFolder

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    folder = HubFolder.parse("hf://datasets/neashton/drivaerml@refs%2Fpr%2F3/run_1")
    assert (folder.repo_type, folder.repo_id, folder.revision, folder.path) == (
        "datasets", "neashton/drivaerml", "refs/pr/3", "run_1")
    assert folder.url == "hf://datasets/neashton/drivaerml@refs%2Fpr%2F3/run_1"
    assert folder.tree_url == "http://127.0.0.1:9/api/datasets/neashton/drivaerml/tree/refs%2Fpr%2F3/run_1"
    assert folder.resolve_base == "http://127.0.0.1:9/datasets/neashton/drivaerml/resolve/refs%2Fpr%2F3"
    assert HubFolder.parse("hf://datasets/o/n").child("run_2").url == "hf://datasets/o/n/run_2"
    with pytest.raises(ValueError, match=r"hf://datasets/only: expected hf://datasets/<owner>/<name>"):
        HubFolder.parse("hf://datasets/only")


def test_fetch_bars_follow_each_run_from_its_start_to_its_end():
    from domino_pipeline.inputs.raw_files.fetch_progress import FetchBars

    bars = FetchBars()
    bars.take(("run_1", 1000, 0))
    bars.take(("run_2", 500, 0))
    bars.take(("run_1", None, 400))
    bars.take(("run_1", None, 600))
    assert bars.bars["run_1"].n == 1000 and bars.bars["run_1"].total == 1000
    assert sorted(bars.positions.values()) == [1, 2]
    bars.take(("run_1", -1, 0))
    bars.take(("run_3", 10, 0))  # takes the position run_1 left
    assert sorted(bars.bars) == ["run_2", "run_3"] and bars.positions["run_3"] == 1
    for name in list(bars.bars):
        bars.take((name, -1, 0))
    assert not bars.bars
