"""Every command refuses bad input in one line on stderr naming the file or key and the problem,
with exit code 1 and no traceback: in-process through each script's ``main``, and once for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, yaml_config
from tiny_training import TinySurfaceModel

import cache_data
import predict
import process_data
import synthetic_data
import train
from domino_pipeline.runtime.entry_point import check_override_keys, config_name, one_line, refusals_in_one_line
from domino_pipeline.storage.file_digests import write_checked
from domino_pipeline.training.model_files import save_model_file


def refusal(capsys, call) -> str:
    """The one stderr line of ``call()``, which must exit with code 1."""
    with pytest.raises(SystemExit) as stopped:
        call()
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_process_data_names_a_missing_raw_folder(tmp_path, capsys):
    cfg = yaml_config(f"data.raw_dir={tmp_path / 'absent'}", f"data.processed_dir={tmp_path / 'out'}")
    assert refusal(capsys, lambda: process_data.main(cfg)) == f"error: {tmp_path / 'absent'}: no such raw-data directory"


def test_cache_data_names_a_missing_processed_folder(tmp_path, capsys):
    cfg = yaml_config(f"data.processed_dir={tmp_path / 'absent'}", f"cache.dir={tmp_path / 'cache'}", name="cached")
    assert refusal(capsys, lambda: cache_data.main(cfg)) == f"error: {tmp_path / 'absent'}: no such processed-data directory"


def test_train_names_a_processed_folder_without_runs(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    cfg = yaml_config(f"data.processed_dir={tmp_path / 'empty'}", f"output_dir={tmp_path / 'run'}", "train.device=cpu")
    line = refusal(capsys, lambda: train.main(cfg))
    assert line.startswith(f"error: {tmp_path / 'empty'}: no run found")


def test_predict_names_a_missing_model_file(tmp_path, capsys):
    cfg = yaml_config(f"predict.checkpoint={tmp_path / 'model.mdlus'}", "predict.device=cpu")
    line = refusal(capsys, lambda: predict.main(cfg))
    assert line.startswith(f"error: {tmp_path / 'model.mdlus'}: no such model file")


def flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("writer", ["train.py", "physicsnemo"])
def test_predict_names_a_damaged_model_file(tmp_path, capsys, writer):
    """64 flipped bytes inside a .mdlus: train.py's (checked by its digest) or one physicsnemo saved
    (by the zip's CRC-32s); one line, never zipfile's traceback."""
    path, model = tmp_path / "model_best.mdlus", TinySurfaceModel()
    save_model_file(model, path) if writer == "train.py" else model.save(str(path))
    flip_middle(path)
    cfg = yaml_config(f"predict.checkpoint={path}", "predict.device=cpu")
    fault = ("its SHA-256 does not match model_best.mdlus.sha256: its bytes changed after it was written"
             if writer == "train.py" else "its member model.pt fails its CRC-32 or header check: damaged")
    assert refusal(capsys, lambda: predict.main(cfg)) == f"error: {path}: {fault}"


def test_train_refuses_a_folder_whose_checkpoints_all_fail_and_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "run" / "checkpoints"
    for name in ("checkpoint-e0003-s000000.pt", "checkpoint-e0002-s000000.pt"):
        write_checked(folder / name, lambda tmp: tmp.write_bytes(b"x" * 1000))
        flip_middle(folder / name)
    before = {p: p.read_bytes() for p in sorted((tmp_path / "run").rglob("*"))  if p.is_file()}
    cfg = yaml_config(f"data.processed_dir={tmp_path / 'empty'}", f"output_dir={tmp_path / 'run'}", "train.device=cpu")
    line = refusal(capsys, lambda: train.main(cfg))
    assert line.startswith(f"error: {folder}: no checkpoint passes its checks (checkpoint-e0003-s000000.pt: its SHA-256 "
                           "does not match checkpoint-e0003-s000000.pt.sha256")
    assert line.endswith("nothing was written or removed: move the folder away to train afresh")
    assert {p: p.read_bytes() for p in sorted((tmp_path / "run").rglob("*")) if p.is_file()} == before


def test_synthetic_data_names_an_output_it_cannot_write(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    line = refusal(capsys, lambda: synthetic_data.main(["--preset", "tiny", "--runs", "1", "--out", str(tmp_path / "file")]))
    assert line.startswith("error: ") and str(tmp_path / "file") in line


@pytest.mark.parametrize("script", [process_data, cache_data, train, predict])
def test_a_bad_config_value_is_one_line_in_every_command(script, capsys):
    cfg = yaml_config("process.num_processes=two")
    assert refusal(capsys, lambda: script.main(cfg)) == "error: process.num_processes must be int, not 'two'"


def test_an_example_key_on_the_command_line_is_named_with_ours(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train.py", "model.volume_points_sample=8192"])
    assert refusal(capsys, train.main) == "error: model.volume_points_sample is sampling.volume_points here"


@pytest.mark.slow
def test_an_unknown_key_on_the_command_line_is_named_with_the_closest_one(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train.py", "train.epoch=3"])
    assert refusal(capsys, train.main) == "error: train.epoch is not a setting; did you mean train.epochs?"
    with pytest.raises(ValueError, match=r"^cache.dri is not a setting; did you mean cache.dir\?$"):
        check_override_keys(["--config-name", "demo", "cache.dri=x"], ROOT / "conf")
    with pytest.raises(ValueError, match=r"^optimizer.lr is not a setting$"):
        check_override_keys(["optimizer.lr=1"], ROOT / "conf")
    check_override_keys(["-cn", "demo", "train.epochs=2", "+train.extra=1", "hydra.run.dir=.", "model_type=volume",
                         "model.geometry_rep.geo_conv.base_neurons=8", "hydra/job_logging=none"], ROOT / "conf")
    assert [config_name(a) for a in (["x=1"], ["--config-name=demo"], ["-cn", "cached", "x=1"])] == \
        ["config", "demo", "cached"]


def test_one_line_of_an_os_error_names_the_file():
    assert one_line(FileNotFoundError(2, "No such file or directory", "/data/x.zarr")) == \
        "/data/x.zarr: No such file or directory"
    assert one_line(ValueError("first\nsecond")) == "first"
    assert one_line(ValueError()) == "ValueError"
    with pytest.raises(KeyError):  # a bug is not a refusal: its traceback stays
        with refusals_in_one_line():
            raise KeyError("x")


@pytest.mark.slow
def test_a_refusal_from_the_command_line_has_no_traceback(tmp_path):
    """The real thing, once: Hydra's command line, then our one line."""
    done = subprocess.run([sys.executable, "predict.py", f"predict.checkpoint={tmp_path / 'none.mdlus'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'none.mdlus'}: no such model file (train.py writes checkpoints/model_best.mdlus "
        "when it validates, checkpoints/model_last.mdlus and checkpoint-e<epoch>-s<step>.pt always)"]
    done = subprocess.run([sys.executable, "process_data.py", "data.input_dir=/data"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr.strip()) == (
        1, "error: data.input_dir is data.processed_dir here (training and validation runs come from one folder)")



def test_an_override_of_a_renamed_key_takes_its_new_name_with_a_warning(capsys):
    from domino_pipeline.runtime.entry_point import with_new_override_names

    arguments = ["-cn", "demo", "cache.check_sources=false", "train.epochs=2"]
    assert with_new_override_names(arguments) == ["-cn", "demo", "cache.check_processed_stats=false", "train.epochs=2"]
    assert capsys.readouterr().err.strip() == ("warning: cache.check_sources is deprecated: it is now "
                                               "cache.check_processed_stats")
    assert with_new_override_names(["+cache.check_sources=true"]) == ["cache.check_processed_stats=true"]
    with pytest.raises(ValueError, match=r"cache\.check_sources and cache\.check_processed_stats are both given"):
        with_new_override_names(["cache.check_sources=false", "cache.check_processed_stats=true"])
