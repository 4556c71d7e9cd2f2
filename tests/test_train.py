"""train.py on tiny data on the CPU: loss goes down on the cache, a killed run resumes exactly,
torchrun gives each rank different runs, the uncached entry point and demo_report.py run."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import PROCESS_OPTIONS, typed_config
from omegaconf import OmegaConf

from domino_pipeline.configuration.config import load_config
from domino_pipeline.configuration.config_files import compose_files
from domino_pipeline.storage.file_digests import write_checked
from domino_pipeline.processed.runs import DEFAULT_OPTIONS, split_with_test
from domino_pipeline.training import checkpointing, example_checkpoints, model_files
from domino_pipeline.training.checkpointing import check_same_model
from domino_pipeline.training.domino_model import (
    build_model,
    build_optimizer,
    build_scheduler,
    model_parameters,
    resolved_parameters,
)
from domino_pipeline.training.epochs import loader_over, make_loader
from domino_pipeline.training.target_scaling import ensure_scaling_factors
from domino_pipeline.inputs.processing.process_runs import process_all
from synthetic_data import generate_runs

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TORCHRUN = str(Path(PYTHON).with_name("torchrun"))
# A tiny DoMINO on a tiny grid with few points: seconds per epoch on one core.
TINY = [
    "geometry.interp_res=[16,8,8]", "geometry.device=cpu",
    "sampling.surface_points=128", "sampling.volume_points=128", "sampling.geometry_points=400",
    "model.geometry_rep.geo_conv.base_neurons=8", "model.geometry_rep.geo_conv.surface_neighbors_in_radius=[8,8,16]",
    "model.geometry_local.surface_neighbors_in_radius=[8,16]", "model.geometry_local.base_layer=16", "model.nn_basis_functions.base_layer=16",
    "model.aggregation_model.base_layer=16", "model.position_encoder.base_neurons=16",
    "train.device=cpu", "train.num_workers=0", "train.val_num_workers=0", "train.cpu_threads=1", "train.lr=1e-2",
]


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{command[:3]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    """Four tiny runs (three train, so that an epoch can be interrupted half-way), processed and
    cached with cache_data.py."""
    work = tmp_path_factory.mktemp("train")
    generate_runs(work / "raw", 4, preset="tiny", seed=1)
    results = process_all(work / "raw", work / "processed", PROCESS_OPTIONS, num_processes=1)
    assert all(r.status == "processed" for r in results), results
    paths = {"processed": work / "processed", "cache": work / "cache", "factors": work / "scaling_factors.json", "work": work}
    run([PYTHON, "cache_data.py", "--config-name=cached", *common_overrides(paths)])
    return paths


def common_overrides(paths: dict[str, Path]) -> list[str]:
    return [
        f"data.processed_dir={paths['processed']}", f"cache.dir={paths['cache']}",
        f"sampling.scaling_factors={paths['factors']}", *TINY,
    ]


def train_command(paths: dict[str, Path], out: Path, *extra: str, config: str = "cached") -> list[str]:
    return [PYTHON, "train.py", f"--config-name={config}", *common_overrides(paths), f"output_dir={out}", *extra]


def epochs(out: Path) -> list[dict]:
    return [r for r in map(json.loads, (out / "epochs.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]


@pytest.fixture(scope="module")
def three_epochs(setup) -> Path:
    """An uninterrupted three-epoch run on the cache: three training runs, one validation run."""
    out = setup["work"] / "three_epochs"
    run(train_command(setup, out, "train.epochs=3", "train.val_fraction=0.25"))
    return out


@pytest.mark.slow
def test_three_cached_epochs_lower_the_training_loss(three_epochs):
    records = epochs(three_epochs)
    assert [r["epoch"] for r in records] == [1, 2, 3]
    losses = [r["train_loss"] for r in records]
    # an epoch is three draws of three runs: its mean is noisy, the trend is not
    assert losses[2] < losses[0] and losses[2] < losses[1], losses
    split = json.loads((three_epochs / "split.json").read_text())
    assert len(split["train"]) == 3 and len(split["val"]) == 1
    for record in records:
        assert sorted(record["runs_by_rank"][0]) == sorted(split["train"])
        assert record["data_wait_s"] >= 0 and record["compute_s"] > 0 and record["samples_per_s"] > 0
        assert record["epoch_s"] >= record["compute_s"]
        assert record["peak_memory_mb"] > 0 and record["memory_kind"] == "cpu_peak_rss"
        rel_l2 = [v for k, v in record.items() if k.startswith("val_rel_l2/surface/")]
        assert len(rel_l2) == 4 and all(np.isfinite(rel_l2)) and np.isfinite(record["val_loss"])
    state = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(three_epochs))
    assert state["epoch"] == 4 and state["step"] == 0
    assert checkpointing.config_from_checkpoint(state)["train"]["epochs"] == 3
    assert list((three_epochs / "tensorboard").glob("events.out.tfevents.*"))


def wait_for_steps(out: Path, count: int, process: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    steps = out / "steps.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if steps.exists() and len(steps.read_text().splitlines()) >= count:
            return
        time.sleep(0.02)
    process.kill()
    output, _ = process.communicate()
    raise AssertionError(f"training did not log {count} steps in time (exit code {process.returncode}):\n{output[-3000:]}")


@pytest.mark.slow
def test_killed_run_resumes_with_the_losses_of_an_uninterrupted_run(setup, three_epochs):
    out = setup["work"] / "interrupted"
    command = train_command(setup, out, "train.epochs=3", "train.val_fraction=0.25")
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_steps(out, 1, process)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGINT, output[-3000:]
    state = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(out))
    assert state["epoch"] == 1 and 1 <= state["step"] < 3, "the signal should stop the first epoch half-way"
    interrupted = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    assert interrupted[-1]["kind"] == "interrupted"

    resumed = run(command)
    assert "resumed from" in resumed.stdout
    expected, got = epochs(three_epochs), epochs(out)
    assert [r["epoch"] for r in got] == [1, 2, 3]
    for key in ("train_loss", "val_loss"):
        np.testing.assert_allclose([r[key] for r in got], [r[key] for r in expected], rtol=0, atol=1e-5)
    final = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(out))["model"]
    reference = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(three_epochs))["model"]
    for name, tensor in reference.items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=1e-5, msg=name)


# ---- the faults on the real command: checked checkpoints and models, a diverging run

def flip_middle(path: Path, count: int = 64) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))


def finite_and_checked(folder: Path) -> None:
    """Every checkpoint and model in ``folder`` passes its digest and holds finite weights."""
    from domino_pipeline.training.model_files import check_model_file, nonfinite_tensors

    for path in checkpointing.checkpoints_newest_first(folder):
        checkpointing.load_checkpoint(path)  # checks the digest and the weights
    for path in folder.glob("[!.]*.mdlus"):
        check_model_file(path)
        with zipfile.ZipFile(path) as archive:
            state = torch.load(io.BytesIO(archive.read("model.pt")), weights_only=True)
        assert nonfinite_tensors(state) == [], path


@pytest.fixture(scope="module")
def two_epochs(setup) -> Path:
    """Two epochs on the cache: checkpoints of epochs 1 and 2, the last and best models."""
    out = setup["work"] / "two_epochs"
    run(train_command(setup, out, "train.epochs=2", "train.val_fraction=0.25"))
    return out


@pytest.mark.slow
def test_a_checkpoint_with_flipped_bytes_is_named_and_the_older_one_resumed(setup, two_epochs, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_epochs, out)
    folder = checkpointing.checkpoint_folder(out)
    assert [p.name for p in checkpointing.checkpoints_newest_first(folder)] == [
        "checkpoint-e0003-s000000.pt", "checkpoint-e0002-s000000.pt"]
    flip_middle(folder / "checkpoint-e0003-s000000.pt")
    result = run(train_command(setup, out, "train.epochs=3", "train.val_fraction=0.25"))
    lines = result.stdout.splitlines()
    assert f"skipped {folder / 'checkpoint-e0003-s000000.pt'}: its SHA-256 does not match " \
           "checkpoint-e0003-s000000.pt.sha256: its bytes changed after it was written" in lines
    assert f"resumed from {folder / 'checkpoint-e0002-s000000.pt'}: epoch 2, step 0" in lines
    records = epochs(out)
    assert [r["epoch"] for r in records] == [1, 2, 2, 3]
    assert all(np.isfinite(r["train_loss"]) and np.isfinite(r["val_loss"]) for r in records)
    finite_and_checked(folder)


@pytest.mark.slow
def test_train_refuses_when_every_checkpoint_is_damaged_and_touches_nothing(setup, two_epochs, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_epochs, out)
    folder = checkpointing.checkpoint_folder(out)
    flip_middle(folder / "checkpoint-e0003-s000000.pt")
    cut = folder / "checkpoint-e0002-s000000.pt"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*")) if p.is_file()}
    result = subprocess.run(train_command(setup, out, "train.epochs=3", "train.val_fraction=0.25"), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {folder}: no checkpoint passes its checks (checkpoint-e0003-s000000.pt: its SHA-256")
    assert "checkpoint-e0002-s000000.pt: " in line and ": truncated" in line
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*")) if p.is_file()} == before


@pytest.mark.slow
def test_a_kill_mid_epoch_resumes_from_the_last_checkpoint(setup, tmp_path):
    out = tmp_path / "run"
    command = train_command(setup, out, "train.epochs=2", "train.val_fraction=0.25")
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_steps(out, 4, process)  # epoch 1's three steps and checkpoint, one step of epoch 2
    process.kill()
    process.communicate(timeout=60)
    resumed = run(command)
    assert f"resumed from {checkpointing.checkpoint_folder(out) / 'checkpoint-e0002-s000000.pt'}: epoch 2, step 0" \
        in resumed.stdout
    assert [r["epoch"] for r in epochs(out)] == [1, 2]
    finite_and_checked(checkpointing.checkpoint_folder(out))


@pytest.mark.slow
def test_a_diverging_run_stops_at_its_first_nonfinite_step_in_one_line(setup, tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(train_command(setup, out, "train.epochs=2", "train.val_fraction=0.25", "train.lr=1e9",
                                          "train.clip_grad_norm=0"), cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, result.stdout[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert re.match(r"error: epoch \d+, step \d+: the (loss|gradient) is not finite \(loss .*\); its batch: run_\d\.zarr: "
                    r"training stopped there", errors[0]), errors[0]
    if checkpointing.checkpoint_folder(out).exists():
        finite_and_checked(checkpointing.checkpoint_folder(out))


@pytest.mark.slow
def test_predict_names_a_damaged_model_best_in_one_line(setup, three_epochs, tmp_path):
    model = tmp_path / "model_best.mdlus"
    shutil.copy(checkpointing.model_file_paths(three_epochs)["best"], model)
    shutil.copy(f"{checkpointing.model_file_paths(three_epochs)['best']}.sha256", f"{model}.sha256")
    flip_middle(model)
    result = subprocess.run([PYTHON, "predict.py", "--config-name=cached", *common_overrides(setup),
                             f"output_dir={three_epochs}", f"predict.checkpoint={model}", "predict.split=val",
                             f"predict.out_dir={tmp_path / 'predictions'}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {model}: its SHA-256 does not match model_best.mdlus.sha256: its bytes changed after it was written"]


@pytest.mark.slow
def test_torchrun_two_ranks_train_on_different_runs(setup):
    out = setup["work"] / "ddp"
    command = [TORCHRUN, "--standalone", "--nproc_per_node=2", *train_command(
        setup, out, "train.epochs=1", "train.val_fraction=0", "sampling.allow_other_split=true")[1:]]
    run(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    (record,) = epochs(out)
    assert record["world_size"] == 2
    rank0, rank1 = map(set, record["runs_by_rank"])
    assert rank0 and rank1 and not rank0 & rank1
    assert rank0 | rank1 == {f"run_{i}.zarr" for i in range(1, 5)}
    assert np.isfinite(record["train_loss"])


@pytest.mark.slow
def test_torchrun_ranks_compute_missing_scaling_factors_in_parts(setup):
    from domino_pipeline.compute.scaling import compute_scaling_factors, load_scaling_factors

    out, factors = setup["work"] / "ddp_factors", setup["work"] / "ddp_factors.json"
    overrides = [o for o in common_overrides(setup) if not o.startswith("sampling.scaling_factors=")]
    command = [TORCHRUN, "--standalone", "--nproc_per_node=2", "train.py", "--config-name=config", *overrides,
               f"sampling.scaling_factors={factors}", f"output_dir={out}", "train.epochs=1", "train.val_fraction=0"]
    result = run(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert "scaling factors from 4 training runs (2 ranks in parts)" in result.stdout
    runs = sorted(setup["processed"].glob("run_*.zarr"))
    variables = {"surface": [("pMeanTrim", "scalar"), ("wallShearStressMeanTrim", "vector")],
                 "volume": [("UMeanTrim", "vector"), ("pMeanTrim", "scalar"), ("nutMeanTrim", "scalar")]}
    expected = compute_scaling_factors(runs, variables=variables)
    got = load_scaling_factors(factors)
    assert got["runs"] == expected["runs"] and got["surface"] == expected["surface"]
    assert got["volume"] == expected["volume"]
    (record,) = epochs(out)
    assert record["world_size"] == 2 and np.isfinite(record["train_loss"])


@pytest.mark.slow
def test_uncached_training_and_demo_report(setup, three_epochs):
    out = setup["work"] / "uncached"
    run(train_command(setup, out, "train.epochs=1", "train.val_fraction=0.25", config="config"))
    (record,) = epochs(out)
    first_cached = epochs(three_epochs)[0]
    assert record["samples"] == first_cached["samples"]
    # The same seed draws the same points from the cache and the datapipe: the same first epoch.
    np.testing.assert_allclose(record["train_loss"], first_cached["train_loss"], rtol=1e-5)

    report = run([PYTHON, "benchmarks/demo_report.py", "--cached", str(three_epochs), "--uncached", str(out), "--out", str(setup["work"] / "report")])
    assert "uncached / cached" in report.stdout
    summary = json.loads((setup["work"] / "report.json").read_text())
    assert summary["cached"]["epochs"] == 3 and summary["uncached"]["epochs"] == 1
    assert (setup["work"] / "report.png").stat().st_size > 0


# ---- the pieces, in-process ----

def test_split_is_deterministic_and_keeps_a_validation_run():
    runs = [Path(f"run_{i}.zarr") for i in range(1, 11)]
    split = split_with_test(runs, 0.2, seed=3)
    assert split == split_with_test(runs, 0.2, seed=3)
    assert len(split.val) == 2 and sorted(split.train + split.val) == sorted(runs)
    assert len(split_with_test(runs[:2], 0.01, seed=0).val) == 1
    assert (split_with_test(runs[:1], 0.5, seed=0).train, split_with_test(runs[:1], 0.5, seed=0).val) == (runs[:1], [])
    assert (split_with_test(runs, 0.0, seed=0).train, split_with_test(runs, 0.0, seed=0).val) == (runs, [])
    with pytest.raises(ValueError, match="no processed runs"):
        split_with_test([], 0.1, seed=0)


def test_config_errors_name_the_problem():
    assert typed_config().train.scheduler == "cosine"
    with pytest.raises(ValueError, match=r"train config: unknown keys \['epoch'\]"):
        typed_config("+train.epoch=3")
    with pytest.raises(ValueError, match="train.scheduler must be one of"):
        typed_config("train.scheduler=linear")
    with pytest.raises(ValueError, match=r"model.geometry_rep: unknown keys \['base_filter'\]"):
        model_parameters({"geometry_rep": {"base_filter": 4}}, {"geometry_rep": {"base_filters": 8}})
    with pytest.raises(ValueError, match="model_type must be one of"):
        build_model("wing", {}, torch.device("cpu"))


def test_rng_state_survives_a_weights_only_checkpoint(tmp_path):
    import random

    state = checkpointing.capture_rng_state()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    path = tmp_path / "c.pt"
    torch.save({"rng": state}, path)
    checkpointing.restore_rng_state(torch.load(path, weights_only=True)["rng"])
    got = (torch.rand(3), np.random.rand(3), random.random())
    torch.testing.assert_close(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert got[2] == expected[2]


def test_a_foreign_checkpoint_is_refused(tmp_path):
    path = tmp_path / "checkpoint-e0002-s000000.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"checkpoint-e0002-s000000.pt: no checkpoint-e0002-s000000.pt.sha256 beside it"):
        checkpointing.load_checkpoint(path)
    write_checked(path, lambda tmp: tmp.write_bytes(b"not a checkpoint"))  # whole, but not a checkpoint
    with pytest.raises(ValueError, match="checkpoint-e0002-s000000.pt: not a readable training checkpoint"):
        checkpointing.load_checkpoint(path)
    write_checked(path, lambda tmp: torch.save({"model": {}}, tmp))
    with pytest.raises(ValueError, match="checkpoint lacks"):
        checkpointing.load_checkpoint(path)
    state = {key: 0 for key in checkpointing.CHECKPOINT_KEYS} | {"model": {}, "epoch": 3}
    write_checked(path, lambda tmp: torch.save(state, tmp))
    with pytest.raises(ValueError, match="checkpoint-e0002-s000000.pt: holds epoch 3, step 0, not its name's"):
        checkpointing.load_checkpoint(path)
    with pytest.raises(ValueError, match="other \\['model'\\] settings"):
        check_same_model({"model_type": "surface", "model": {"a": 1}}, {"model_type": "surface", "model": {"a": 2}}, path)


def test_relative_l2_error_per_variable():
    from domino_pipeline.training.epochs import relative_l2_per_variable

    target = torch.tensor([[[3.0, 1.0], [4.0, 0.0]]])  # one sample, two points, two variables
    prediction = target + torch.tensor([[[0.0, 0.5], [5.0, 0.0]]])
    torch.testing.assert_close(relative_l2_per_variable(prediction, target), torch.tensor([1.0, 0.5]))


@pytest.mark.slow
def test_model_outputs_follow_the_configured_variables():
    model = build_model("combined", {"interp_res": [16, 8, 8]}, torch.device("cpu"),
                              {"surface": 1, "volume": 4})
    assert (model.output_features_surf, model.output_features_vol) == (1, 4)


class _Identity(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, index):
        return {"index": torch.tensor([float(index)])}


def test_one_persistent_loader_serves_each_pass_its_own_indices():
    loader = make_loader(_Identity(), batch_size=1, num_workers=1, device=torch.device("cpu"))
    for indices in ([3, 1, 4], [9, 2], [], [5]):
        seen = [int(batch["index"].item()) for batch in loader_over(loader, indices)]
        assert seen == indices
    assert loader.persistent_workers


# ---- one place decides the model type; the data must fit the model ----

def test_a_conflicting_model_model_type_is_an_error_naming_both_keys():
    from domino_pipeline.training.domino_model import resolve_model_type

    assert resolve_model_type("surface", {"model_type": "surface"}) == "surface"
    assert resolve_model_type("volume", {}) == "volume"
    with pytest.raises(ValueError, match=r"model.model_type='combined' conflicts with model_type='surface'"):
        resolve_model_type("surface", {"model_type": "combined"})
    with pytest.raises(ValueError, match="model.model_type='combined' conflicts"):
        build_model("surface", {"model_type": "combined"}, torch.device("cpu"))


def test_data_that_does_not_fit_the_model_is_refused_naming_both_values():
    from domino_pipeline.training.domino_model import check_data_fits_model

    data = {"interp_res": [32, 16, 16], "num_neighbors_surface": 7}
    check_data_fits_model(data, {"interp_res": (32, 16, 16), "num_neighbors_surface": 7}, "cache c")
    with pytest.raises(ValueError, match=r"cache c has geometry.interp_res=\[32, 16, 16\] but the model has "
                                         r"model.interp_res=\[16, 8, 8\]"):
        check_data_fits_model(data, {"interp_res": [16, 8, 8], "num_neighbors_surface": 7}, "cache c")
    with pytest.raises(ValueError, match=r"geometry.num_neighbors_surface=7 but the model has model.num_neighbors_surface=5"):
        check_data_fits_model(data, {"interp_res": [32, 16, 16], "num_neighbors_surface": 5}, "cache c")


@pytest.mark.slow
def test_train_refuses_a_cache_with_another_grid_before_the_first_step(setup):
    out = setup["work"] / "grid_mismatch"
    result = subprocess.run(train_command(setup, out, "train.epochs=1", "model.interp_res=[8,8,8]"),
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert f"cache {setup['cache']} has geometry.interp_res=[16, 8, 8]" in message
    assert "model.interp_res=[8, 8, 8]" in message
    assert not (out / "steps.jsonl").exists()


# ---- checkpoints in physicsnemo's format; fine-tuning from one ----

def tiny_config(paths: dict[str, Path], *extra: str):
    """conf/cached.yaml with the tests' overrides, as train.py would resolve it."""
    base = compose_files(ROOT / "conf", "cached")
    return OmegaConf.merge(base, OmegaConf.from_dotlist([*common_overrides(paths), *extra]))


def first_batch(paths: dict[str, Path]) -> dict[str, torch.Tensor]:
    from datapipe import CachedDoMINODataset, collate_items

    dataset = CachedDoMINODataset(paths["cache"], model_type="surface", surface_points=128, geometry_points=400,
                                  scaling_factors=paths["factors"], seed=0)
    return collate_items([dataset[0]])


def outputs_of(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    model.eval()
    torch.manual_seed(7)  # DoMINO draws noise from the global generator
    with torch.no_grad():
        return model(batch)[1]


@pytest.mark.slow
def test_physicsnemo_loads_the_saved_models_with_the_same_outputs(setup, three_epochs):
    from physicsnemo import Module

    cfg = tiny_config(setup)
    trained = build_model("surface", OmegaConf.to_container(cfg.model, resolve=True), torch.device("cpu"))
    trained.load_state_dict(checkpointing.load_checkpoint(checkpointing.newest_checkpoint(three_epochs))["model"])
    files = checkpointing.model_file_paths(three_epochs)
    loaded = Module.from_checkpoint(str(files["last"]))
    assert type(loaded).__name__ == "DoMINO"
    batch = first_batch(setup)
    assert torch.equal(outputs_of(loaded, batch), outputs_of(trained, batch))

    val_losses = {r["epoch"]: r["val_loss"] for r in epochs(three_epochs)}
    best = json.loads(files["best_record"].read_text())
    assert best["val_loss"] == min(val_losses.values()) and val_losses[best["epoch"]] == best["val_loss"]
    assert outputs_of(Module.from_checkpoint(str(files["best"])), batch).shape == (1, 128, 4)


@pytest.mark.slow
def test_training_starts_from_a_physicsnemo_mdlus(setup):
    from physicsnemo.models.domino import DoMINO
    from physicsnemo.models.domino.config import Config

    cfg = tiny_config(setup)
    parameters = resolved_parameters(OmegaConf.to_container(cfg.model, resolve=True))
    torch.manual_seed(123)
    foreign = DoMINO(input_features=3, output_features_surf=4, global_features=2, model_parameters=Config(parameters))
    path = setup["work"] / "foreign.mdlus"
    foreign.save(str(path))

    out = setup["work"] / "finetuned"
    result = run(train_command(setup, out, "train.epochs=1", "train.val_fraction=0", f"train.init_from={path}",
                               "train.lr=0", "train.weight_decay=0", "sampling.allow_other_split=true"))
    assert f"initialised the model from {path}" in result.stdout
    # lr 0: the trained weights are the file's, bit for bit
    state = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(out))["model"]
    for name, tensor in foreign.state_dict().items():
        assert torch.equal(state[name], tensor), name

    other = build_model("surface", {**OmegaConf.to_container(cfg.model, resolve=True), "activation": "relu"},
                              torch.device("cpu"))
    with pytest.raises(ValueError, match=r"foreign.mdlus: the model in this file differs .*\n  model_parameters.activation: "
                                         r"this config 'relu', the file 'gelu'"):
        model_files.init_weights_from(other, path)


def first_state(optimizer_state: dict) -> dict:
    """The optimizer state of the first parameter that has one (its step count and moments)."""
    return optimizer_state["state"][min(optimizer_state["state"])]


@pytest.mark.slow
def test_physicsnemos_load_checkpoint_finds_our_checkpoints(setup, three_epochs):
    """physicsnemo's own load_checkpoint, pointed at our checkpoint folder, loads the model,
    optimizer and scheduler of the last epoch and returns its 0-based index."""
    from physicsnemo import Module
    from physicsnemo.utils.checkpoint import load_checkpoint

    cfg = tiny_config(setup)
    folder = checkpointing.checkpoint_folder(three_epochs)
    assert sorted(p.name for p in folder.glob("*.0.*")) == ["DoMINO.0.2.mdlus", "DoMINO.0.2.mdlus.sha256",
                                                            "checkpoint.0.2.pt", "checkpoint.0.2.pt.sha256"]  # the latest pair only, checked
    model = build_model("surface", OmegaConf.to_container(cfg.model, resolve=True), torch.device("cpu"))
    config = load_config(cfg).train
    optimizer = build_optimizer(model, config)
    scheduler = build_scheduler(optimizer, config)
    assert load_checkpoint(str(folder), models=model, optimizer=optimizer, scheduler=scheduler) == 2
    batch = first_batch(setup)
    assert torch.equal(outputs_of(model, batch), outputs_of(Module.from_checkpoint(str(folder / "model_last.mdlus")), batch))
    ours = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(three_epochs))
    assert torch.equal(first_state(optimizer.state_dict())["exp_avg"], first_state(ours["optimizer"])["exp_avg"])
    assert scheduler.last_epoch == ours["scheduler"]["last_epoch"] == 3


def example_checkpoint(setup, folder: Path, epoch: int, steps: int) -> torch.nn.Module:
    """What the DoMINO example's train.py leaves after 0-based epoch ``epoch``: physicsnemo's
    save_checkpoint of its model, Adam, MultiStepLR and GradScaler, the optimizer ``steps`` steps in."""
    from physicsnemo.utils.checkpoint import save_checkpoint

    cfg = tiny_config(setup)
    torch.manual_seed(5)
    model = build_model("surface", OmegaConf.to_container(cfg.model, resolve=True), torch.device("cpu"))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[100, 200], gamma=0.5)
    batch = first_batch(setup)
    for _ in range(steps):
        optimizer.zero_grad()
        model(batch)[1].square().mean().backward()
        optimizer.step()
    for _ in range(epoch + 1):
        scheduler.step()
    save_checkpoint(str(folder), models=model, optimizer=optimizer, scheduler=scheduler,
                    scaler=torch.amp.GradScaler("cpu", enabled=False), epoch=epoch)
    assert sorted(p.name for p in folder.iterdir()) == [f"DoMINO.0.{epoch}.mdlus", f"checkpoint.0.{epoch}.pt"]
    return model


@pytest.mark.slow
def test_an_example_checkpoint_resumes_here_with_its_optimizer_state(setup):
    folder, out = setup["work"] / "example_checkpoint", setup["work"] / "resumed_example"
    example_checkpoint(setup, folder, epoch=1, steps=5)
    result = run(train_command(setup, out, "train.epochs=3", "train.val_fraction=0.25", f"train.resume_from={folder}"))
    assert f"resumed from {folder} (physicsnemo checkpoint of epoch index 1): epoch 3" in result.stdout
    assert "the checkpoint's scheduler" in result.stdout and "MultiStepLR" not in result.stdout  # a note, by its keys
    assert [r["epoch"] for r in epochs(out)] == [3]  # the example finished 0-based epochs 0 and 1
    state = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(out))
    assert state["epoch"] == 4
    assert first_state(state["optimizer"])["step"] == 5 + 3  # its 5 steps, then one epoch of 3 training runs
    # the run's own checkpoint now wins over train.resume_from
    again = run(train_command(setup, out, "train.epochs=3", "train.val_fraction=0.25", f"train.resume_from={folder}"))
    assert "all 3 epochs are done" in again.stdout


@pytest.mark.slow
def test_an_example_checkpoint_with_this_runs_scheduler_kind_loads_it(setup, tmp_path):
    from physicsnemo.utils.checkpoint import save_checkpoint

    cfg = tiny_config(setup)
    config = load_config(cfg).train
    model = build_model("surface", OmegaConf.to_container(cfg.model, resolve=True), torch.device("cpu"))
    optimizer = build_optimizer(model, config)
    scheduler = build_scheduler(optimizer, config)
    for _ in range(4):
        scheduler.step()
    save_checkpoint(str(tmp_path), models=model, optimizer=optimizer, scheduler=scheduler, epoch=3)
    fresh_optimizer = build_optimizer(model, config)
    fresh_scheduler = build_scheduler(fresh_optimizer, config)
    example = example_checkpoints.load_example_checkpoint(tmp_path)
    assert example.index == 3 and example.next_epoch == 5
    notes = example_checkpoints.restore_example_states(example, fresh_optimizer, fresh_scheduler,
                                                 torch.amp.GradScaler("cpu", enabled=False))
    assert notes == [] and fresh_scheduler.state_dict() == scheduler.state_dict()
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    (tmp_path / "DoMINO.0.3.mdlus").unlink()
    with pytest.raises(FileNotFoundError, match=r"DoMINO.0.3.mdlus: missing; checkpoint.0.3.pt has no model beside it"):
        example_checkpoints.load_example_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no physicsnemo checkpoint"):
        example_checkpoints.load_example_checkpoint(tmp_path / "none")



@pytest.mark.slow
def test_the_example_losses_train_and_are_logged_with_the_loss(setup):
    out = setup["work"] / "example_losses"
    result = run(train_command(setup, out, "train.epochs=1", "train.val_fraction=0.25", "loss.type=rmse",
                               "loss.area_weight=1", "loss.integral_weight=100"))
    description = "rmse: 1 x surface + 1 x surface_area + 100 x integral (area scaling 10000)"
    assert f"loss {description}" in result.stdout
    (record,) = epochs(out)
    assert record["loss_function"] == description
    terms = {t: record[f"train_loss/{t}"] for t in ("surface", "surface_area", "integral")}
    assert "train_loss/volume" not in record and all(np.isfinite(list(terms.values())))
    np.testing.assert_allclose(record["train_loss"], terms["surface"] + terms["surface_area"] + 100 * terms["integral"], rtol=1e-5)
    val_terms = [record[f"val_loss/{t}"] for t in ("surface", "surface_area", "integral")]
    np.testing.assert_allclose(record["val_loss"], val_terms[0] + val_terms[1] + 100 * val_terms[2], rtol=1e-5)


def test_scaling_factors_of_another_split_are_refused_unless_allowed(tmp_path):
    from types import SimpleNamespace

    from domino_pipeline.compute.scaling import save_scaling_factors

    factors = {"normalization": "min_max", "runs": ["run_1", "run_2"],
               "surface": {"min": [0.0] * 4, "max": [1.0] * 4, "mean": [0.5] * 4, "std": [0.1] * 4},
               "volume": {"min": [0.0] * 5, "max": [1.0] * 5, "mean": [0.5] * 5, "std": [0.1] * 5}}
    path = save_scaling_factors(tmp_path / "factors.json", factors)
    cfg = typed_config(f"sampling.scaling_factors={path}")
    info = SimpleNamespace(is_main=True, rank=0, world_size=1)
    def ensure(runs, cfg):
        ensure_scaling_factors(path, [Path(r) for r in runs], sampling=cfg.sampling, cached=False,
                               variables=cfg.variables, options=DEFAULT_OPTIONS, info=info,
                               work_timeout_s=60.0)

    ensure(["run_1.zarr", "run_2.zarr"], cfg)  # same runs
    with pytest.raises(ValueError, match=r"factors\.json: the scaling factors were computed from other runs"):
        ensure(["run_1.zarr", "run_3.zarr"], cfg)
    ensure(["run_1.zarr", "run_3.zarr"], typed_config(f"sampling.scaling_factors={path}", "sampling.allow_other_split=true"))


@pytest.mark.slow
def test_a_refused_cache_is_one_line_without_a_traceback(tiny_processed_dir, tmp_path):
    result = subprocess.run(
        [PYTHON, "train.py", "--config-name=cached", *TINY, f"data.processed_dir={tiny_processed_dir}",
         f"cache.dir={tmp_path / 'no_cache'}", f"output_dir={tmp_path / 'out'}", "train.epochs=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no_cache" in errors[0], result.stderr[-2000:]
