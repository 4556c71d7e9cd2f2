"""One model over several datasets (docs/mixtures.md): tiny synthetic DrivAerML- and AhmedML-layout
runs and the committed OpenFOAM fixture, each processed with its own profile and cached by
cache_data.py over ``data.sources``; a mixture's items against each source's own items; the
weighted sampler's shares, determinism and rank split; a training run with metrics per source;
predictions in each dataset's own units and conventions; sources that cannot share a model refused.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import typed_config, yaml_config
from test_train import TINY

from domino_pipeline.compute.nondimensional_form import form_variables, run_form
from domino_pipeline.compute.scaling import merge_statistics, run_statistics
from domino_pipeline.configuration.config import sources_from
from domino_pipeline.compute.scaling import unscale_fields
from domino_pipeline.loading.mixture import AREA_KEYS, NORMAL_KEYS, REPEAT_EPOCHS, WeightedSourceSampler
from domino_pipeline.configuration.source_configs import load_profile

OPENFOAM = Path(__file__).resolve().parent / "data" / "openfoam"
PROFILES = {"drivaer": "drivaerml", "ahmed": "ahmedml", "foam": "openfoam"}
WEIGHTS = {"drivaer": 1, "ahmed": 1, "foam": 2}


# ---- the form, against the physics written out

def test_the_form_divides_each_run_by_its_own_flow() -> None:
    """DrivAerML (kinematic, shear on the fluid, normals into the body): stored over U = 30 m/s and
    rho = 1.205, the form is Cp = p / (U^2 / 2), Cf = -tau / (U^2 / 2), u / U, nut / (U L)."""
    profile = load_profile("drivaerml")
    u_stored, rho_stored, u_run, length = 30.0, 1.205, profile.flow.velocity, 4.2
    p, tau, u, nut = 120.0, np.array([3.0, -1.0, 0.5]), np.array([20.0, 1.0, -2.0]), 0.01
    stored_surface = np.array([p, *tau]) / (rho_stored * u_stored**2)
    stored_volume = np.array([*u / u_stored, p / (rho_stored * u_stored**2), nut / (u_stored * length)])
    form = run_form(profile, stored_velocity=u_stored, stored_density=rho_stored, velocity=u_run)
    q = 0.5 * u_run**2
    np.testing.assert_allclose(form.to_form("surface", stored_surface), [p / q, *(-tau / q)], rtol=1e-6)
    np.testing.assert_allclose(form.to_form("volume", stored_volume), [*u / u_run, p / q, nut / (u_run * length)],
                               rtol=1e-6)
    assert form.normal == -1.0 and form.area == pytest.approx(1 / profile.references.length**2)
    np.testing.assert_allclose(form.to_stored("surface", form.to_form("surface", stored_surface)), stored_surface,
                               rtol=1e-6)
    assert [n for n, _ in form_variables(profile, "surface")] == ["cp", "cf"]


def test_a_dataset_of_coefficients_keeps_them_and_a_dense_one_divides_by_its_density() -> None:
    """WindsorML's fields are cp and cf already (factor 1, its shear's sign); a dataset whose
    pressure is in pascals divides by its own density."""
    windsor = load_profile("windsorml")
    form = run_form(windsor, stored_velocity=30.0, stored_density=1.205, velocity=windsor.flow.velocity)
    sign = 1.0 if windsor.flow.wall_shear == "on_body" else -1.0
    np.testing.assert_allclose(form.fields["surface"], [1.0, sign, sign, sign])
    dense = load_profile("drivaerml")
    dense = type(dense)(**{**dense.__dict__, "flow": type(dense.flow)(**{**dense.flow.__dict__, "kinematic": False,
                                                                          "density": 1.2})})
    form = run_form(dense, stored_velocity=30.0, stored_density=1.205, velocity=40.0)
    assert form.fields["surface"][0] == pytest.approx(1.205 * 30.0**2 / (0.5 * 1.2 * 40.0**2))


def test_statistics_of_the_form_are_those_of_the_converted_fields() -> None:
    profile = load_profile("drivaerml")
    form = run_form(profile, stored_velocity=30.0, stored_density=1.205, velocity=38.0)
    fields = np.random.default_rng(0).normal(size=(500, 4)).astype(np.float32)
    converted = merge_statistics([{"surface": form.statistics("surface", run_statistics(
        {"surface_fields": fields}, parts=("surface",))["surface"])}], ["a"])
    direct = merge_statistics([run_statistics({"surface_fields": form.to_form("surface", fields)},
                                              parts=("surface",))], ["a"])
    for key in ("min", "max", "mean", "std"):
        np.testing.assert_allclose(converted["surface"][key], direct["surface"][key], rtol=1e-5, atol=1e-7)


# ---- the sampler

def test_each_source_is_drawn_by_its_weight_not_its_size() -> None:
    """Sizes 40, 4 and 2 (by size: 87%, 9%, 4%), weights 1:1:2: over 300 draws (50 epochs of 6) each
    source's share is within 3 standard errors of its weight."""
    sizes, weights = [40, 4, 2], [1.0, 1.0, 2.0]
    sampler = WeightedSourceSampler(sizes, weights, seed=3, draws=6)
    starts, total = np.cumsum([0] + sizes), sum(sizes)
    draws = []
    for epoch in range(50):
        sampler.set_epoch(epoch)
        keys = list(sampler)
        assert len(set(keys)) == len(keys) == 6
        draws += [int(np.searchsorted(starts, k % total, side="right") - 1) for k in keys]
    shares = np.bincount(draws, minlength=3) / len(draws)
    expected = np.asarray(weights) / sum(weights)
    standard_error = np.sqrt(expected * (1 - expected) / len(draws))
    assert np.all(np.abs(shares - expected) <= 3 * standard_error), (shares, expected)


def test_a_small_source_is_drawn_in_rounds_with_new_points_each_repeat() -> None:
    sampler = WeightedSourceSampler([10, 2], [1.0, 1.0], seed=0, draws=12)
    sampler.set_epoch(1)
    keys = list(sampler)
    small = sorted(k for k in keys if k % 12 >= 10)
    assert small == [10, 11, 22, 23, 34, 35]  # each of its 2 runs in 3 rounds: repeats 0, 1, 2
    big = [k for k in keys if k % 12 < 10]
    assert len(big) == len(set(k % 12 for k in big)) == 6  # the large source: no run twice


def test_the_keys_of_an_epoch_are_fixed_resumable_and_split_between_ranks() -> None:
    ranks = [WeightedSourceSampler([5, 3, 2], [1.0, 1.0, 2.0], num_replicas=3, rank=r, seed=7) for r in range(3)]
    for sampler in ranks:
        sampler.set_epoch(4)
    keys = [list(s) for s in ranks]
    assert [list(s) for s in ranks] == keys  # the same on every call: a resumed epoch skips a prefix
    flat = [k for rank in keys for k in rank]
    assert len(flat) == len(set(flat)) == 12 and {len(k) for k in keys} == {4}  # 10 draws, rounded up to 3 x 4
    ranks[0].set_epoch(5)
    assert list(ranks[0]) != keys[0]


# ---- the config

def test_sources_are_read_with_defaults_and_refused_when_ambiguous() -> None:
    config = typed_config("data.sources=[{name: a, dataset: ahmedml, processed_dir: /p, cache_dir: /c}]")
    [source] = config.data.sources
    assert source.weight == 1.0 and source.runs is None and source.val_runs is None
    with pytest.raises(ValueError, match=r"names \['a'\] are given to more than one source"):
        sources_from([{"name": "a", "dataset": "x", "processed_dir": "p", "cache_dir": "c"}] * 2)
    with pytest.raises(ValueError, match="weight must be positive"):
        sources_from([{"name": "a", "dataset": "x", "processed_dir": "p", "cache_dir": "c", "weight": 0}])
    with pytest.raises(ValueError, match="no profile .*nosuch.yaml"):
        load_profile("nosuch")


def test_a_source_is_named_after_its_dataset_where_no_other_source_has_it() -> None:
    entry = {"processed_dir": "p", "cache_dir": "c"}
    sources = sources_from([{"dataset": "ahmedml", **entry}, {"dataset": "/profiles/cars.v2.yaml", **entry},
                            {"name": "w1", "dataset": "windsorml", **entry}, {"name": "w2", "dataset": "windsorml", **entry}])
    assert [s.name for s in sources] == ["ahmedml", "cars.v2", "w1", "w2"]
    assert typed_config("data.sources=[{dataset: ahmedml, processed_dir: /p, cache_dir: /c}]").data.sources[0].name == "ahmedml"
    with pytest.raises(ValueError, match=r"^data.sources\[1\] config: missing keys \['name'\]$"):
        sources_from([{"name": "a", "dataset": "ahmedml", **entry}, {"dataset": "ahmedml", **entry}])
    with pytest.raises(ValueError, match=r"^data.sources\[0\] config: unknown keys \['nme'\]$"):
        sources_from([{"nme": "a", "dataset": "ahmedml", **entry}])


# ---- three datasets end to end (slow: processing, caches, training, prediction)

def sources_override(work: Path, caches: dict[str, Path] | None = None) -> str:
    """``data.sources=[...]`` of the three fixture sources under ``work``."""
    entries = []
    for name, profile in PROFILES.items():
        cache = (caches or {}).get(name, work / name / "cache")
        entries.append(f"{{name: {name}, dataset: {profile}, processed_dir: '{work / name / 'processed'}', "
                       f"cache_dir: '{cache}', raw_dir: '{work / name / 'raw'}', weight: {WEIGHTS[name]}}}")
    return f"data.sources=[{', '.join(entries)}]"


COMMON = [*TINY, "model_type=surface", "process.parts=surface", "process.num_processes=1", "train.val_fraction=0.5",
          "train.epochs=1"]


@pytest.fixture(scope="module")
def mixture(tmp_path_factory, tiny_dataset_dir) -> dict:
    """The three datasets' raw runs, processed with their profiles, cached by one cache_data.py over
    ``data.sources``, and the config of that mixture."""
    import shutil

    import cache_data
    import process_data

    work = tmp_path_factory.mktemp("mixture")
    raws = {"drivaer": tiny_dataset_dir("drivaerml"), "ahmed": tiny_dataset_dir("ahmedml"), "foam": OPENFOAM}
    for name, raw in raws.items():
        shutil.copytree(raw, work / name / "raw")
        process_data.main(yaml_config(f"dataset={PROFILES[name]}", f"data.raw_dir={work / name / 'raw'}",
                                      f"data.processed_dir={work / name / 'processed'}", *COMMON))
    overrides = [*COMMON, sources_override(work), f"output_dir={work / 'train'}"]
    cache_data.main(yaml_config(*overrides, name="cached"))  # exits non-zero on a failure
    return {"work": work, "overrides": overrides}


def from_form(item: dict[str, torch.Tensor], form, parts: tuple[str, ...], factors: dict) -> dict[str, torch.Tensor]:
    """A mixture's item back as its source gives it, unscaled: the inverse of the mixture's conversion
    written out (unscale, form to stored units, normals' sign, areas' factor)."""
    item = dict(item)
    for part in parts:
        fields = unscale_fields(item[f"{part}_fields"].numpy(), factors, part)
        item[f"{part}_fields"] = torch.from_numpy(form.to_stored(part, fields))
    for key in NORMAL_KEYS:
        item[key] = item[key] * form.normal
    for key in AREA_KEYS:
        item[key] = item[key] / form.area
    return item


def single_source_dataset(work: Path, name: str, runs: list[str], *, train: bool):
    """The source's own cached dataset (its profile's config), unscaled, as train.py would build it."""
    from datapipe import dataset_from_config
    config = typed_config(f"dataset={PROFILES[name]}", f"data.processed_dir={work / name / 'processed'}",
                          f"cache.dir={work / name / 'cache'}", *COMMON, name="cached")
    return dataset_from_config(config, [work / name / "processed" / f"{r}.zarr" for r in runs], train=train,
                               scaled=False)


def mixture_sets(config) -> tuple:
    """The training and validation mixtures of ``config`` and their scaling factors, as train.py builds them."""
    from domino_pipeline.loading.assembly import training_sources
    from domino_pipeline.training.distributed import DistInfo
    from domino_pipeline.training.target_scaling import training_scaling_factors

    sources = training_sources(config, lambda line: None)
    factors = training_scaling_factors(sources, DistInfo(0, 0, 1, torch.device("cpu")))
    return (*sources.datasets(factors), factors)


@pytest.mark.slow
def test_a_mixture_item_is_its_source_item_in_the_form(mixture) -> None:
    """Every run's mixture item (repeat 0 and 1, training and validation draws), converted back, equals
    the item its source's own dataset draws for that run: same rows, fields to float32 rounding."""
    config = typed_config(*mixture["overrides"], name="cached")
    train_set, val_set, factors = mixture_sets(config)
    assert factors["form"] == "nondimensional" and factors["variables"]["surface"] == [["cp", "scalar"],
                                                                                       ["cf", "vector"]]
    checked = 0
    for mixed, train in ((train_set, True), (val_set, False)):
        mixed.set_epoch(3)
        for index in range(len(mixed)):
            source_index, run = mixed.locate(index)
            source = mixed.sources[source_index]
            name = source.dataset.run_origins[run][0]
            own = single_source_dataset(mixture["work"], source.name, [name], train=train)
            for repeat in (0, 1):
                back = from_form(mixed[repeat * len(mixed) + index], source.forms[run], ("surface",), factors)
                expected = own.item(0, 3 + repeat * REPEAT_EPOCHS)
                assert set(back) == set(expected)
                for key, value in expected.items():
                    np.testing.assert_allclose(back[key].numpy(), value.numpy(), rtol=2e-6, atol=1e-7,
                                               err_msg=f"{source.name}/{name} repeat {repeat}: {key}")
                checked += 1
    assert checked == 12  # 3 sources x 2 runs x 2 repeats
    first, second = (train_set[k]["surface_mesh_centers"] for k in (0, len(train_set)))
    assert not torch.equal(first, second)  # a repeat draws other points


@pytest.fixture(scope="module")
def trained(mixture) -> dict:
    """One epoch of a surface model over the three sources (one training run of each)."""
    import train

    train.main(yaml_config(*mixture["overrides"], name="cached"))
    return mixture


@pytest.mark.slow
def test_a_training_run_over_sources_logs_each_source(trained) -> None:
    out = trained["work"] / "train"
    [epoch] = [r for r in map(json.loads, (out / "epochs.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]
    split = json.loads((out / "split.json").read_text())
    assert sorted(split["sources"]) == sorted(PROFILES) and len(split["val"]) == 3
    for name in PROFILES:
        assert np.isfinite(epoch[f"val_source/{name}/loss"])
        for column in ("cp", "cf_x", "cf_y", "cf_z"):
            assert np.isfinite(epoch[f"val_source/{name}/rel_l2/surface/{column}"])
    trained_on = [s for s in map(json.loads, (out / "steps.jsonl").read_text().splitlines())]
    drawn = [name for step in trained_on for name in step["sources"]]
    assert sorted(drawn) == sorted(PROFILES)  # 3 draws (the training runs' count) at 1:1:2: 0.75, 0.75, 1.5 rounded
    assert {f"train_loss/source/{n}" for n in PROFILES} <= set(epoch)
    factors = json.loads((out / "scaling_factors.json").read_text())
    assert factors["form"] == "nondimensional" and len(factors["runs"]) == 3


@pytest.mark.slow
def test_predictions_over_sources_are_in_each_datasets_units_and_conventions(trained) -> None:
    """predict.py writes each source's validation run into <out>/<source>/, its coefficients over the
    dataset's own references and conventions: the true ones equal, to 1e-6, those the source's
    one-dataset predict.py integrates from the same files; the predicted ones are finite."""
    import predict

    work = trained["work"]
    out = work / "predictions"
    predict.main(yaml_config(*trained["overrides"], "predict.split=val", f"predict.out_dir={out}",
                             "predict.plot=false", name="cached"))
    split = json.loads((work / "train" / "split.json").read_text())["sources"]
    for name, profile in PROFILES.items():
        [run] = split[name]["val"]
        alone = work / f"alone_{name}"
        predict.main(yaml_config(f"dataset={profile}", *COMMON, f"data.processed_dir={work / name / 'processed'}",
                                 f"cache.dir={work / name / 'cache'}", f"output_dir={work / 'train'}",
                                 f"predict.runs=[{work / name / 'raw' / run}]", f"predict.out_dir={alone}",
                                 "predict.plot=false", name="cached"))
        [mixed], [single] = (list(csv.DictReader(open(folder / "predictions.csv"))) for folder in (out / name, alone))
        assert mixed["run"] == single["run"] == run
        true_columns = [c for c in single if c.endswith("_true") and single[c] not in ("", "nan")]
        assert {"cd_true", "cl_true"} <= set(true_columns)
        for column in true_columns:
            assert float(mixed[column]) == pytest.approx(float(single[column]), rel=1e-6, abs=1e-12), (name, column)
        assert np.isfinite(float(mixed["cd_pred"])) and np.isfinite(float(mixed["cl_pred"]))


def predict_the_truth(monkeypatch, factors_path: Path) -> list:
    """Make predict.py's model output each run's true fields in the trained form, scaled by the
    factors at ``factors_path``; the list fills with the form of each run predicted."""
    import predict
    from domino_pipeline.compute.scaling import load_scaling_factors, scale_fields
    from domino_pipeline.inference import predict_runs

    factors, forms, original = load_scaling_factors(factors_path), [], predict_runs.predict_run

    def remember_form(*args, **kwargs):
        forms.append(kwargs["form"])
        return original(*args, **kwargs)

    def truth(forward, items, *, part, **kwargs):
        return scale_fields(forms[-1].to_form(part, items.prepared.surface_fields), factors, part)

    monkeypatch.setattr(predict, "predict_run", remember_form)
    monkeypatch.setattr(predict_runs, "predict_part", truth)
    return forms


@pytest.mark.slow
def test_a_perfect_prediction_comes_back_as_each_datasets_truth(trained, monkeypatch, tmp_path) -> None:
    """The model replaced by the truth in the mixture's scaled form: every source's predicted fields,
    taken back through the run's form, the scaling factors and the dataset's units, integrate to its
    true coefficients: the conversion back holds for each dataset's flow and conventions."""
    import predict

    forms = predict_the_truth(monkeypatch, trained["work"] / "train" / "scaling_factors.json")
    predict.main(yaml_config(*trained["overrides"], "predict.split=val", f"predict.out_dir={tmp_path}",
                             "predict.plot=false", name="cached"))
    assert len(forms) == 3 and len({f.fields["surface"][0] for f in forms}) == 2  # AhmedML's 1 m/s, 38.889 m/s
    for name in PROFILES:
        [row] = list(csv.DictReader(open(tmp_path / name / "predictions.csv")))
        for key in ("cd", "cl", "cd_constref", "cl_constref"):
            assert float(row[f"{key}_pred"]) == pytest.approx(float(row[f"{key}_true"]), rel=1e-5, abs=1e-9), \
                (name, key)


@pytest.mark.slow
def test_a_source_cached_on_another_grid_is_refused_before_the_first_step(mixture, capsys) -> None:
    import cache_data
    import train

    work = mixture["work"]
    other = work / "ahmed" / "cache_coarse"
    cache_data.main(yaml_config("dataset=ahmedml", *COMMON, "geometry.interp_res=[8,8,8]",
                                f"data.processed_dir={work / 'ahmed' / 'processed'}", f"cache.dir={other}",
                                name="cached"))
    capsys.readouterr()
    output = work / "refused"
    with pytest.raises(SystemExit) as exit_info:
        train.main(yaml_config(*COMMON, sources_override(work, {"ahmed": other}), f"output_dir={output}",
                               name="cached"))
    assert exit_info.value.code == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "source ahmed" in line and "geometry.interp_res=[8, 8, 8]" in line
    assert "source drivaer" in line and "geometry.interp_res=[16, 8, 8]" in line
    assert not (output / "checkpoints").exists()


def _rank_keys(rank: int, world_size: int, init_file: str, out: str) -> None:
    """A gloo rank: its keys of epoch 2 of a weighted sampler, gathered on rank 0 into ``out``."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    sampler = WeightedSourceSampler([2, 2, 2], [1.0, 1.0, 2.0], num_replicas=dist.get_world_size(),
                                    rank=dist.get_rank(), seed=42, draws=12)
    sampler.set_epoch(2)
    gathered = [None] * world_size
    dist.all_gather_object(gathered, list(sampler))
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_draw_disjoint_items(trained, tmp_path) -> None:
    """Two DDP ranks (gloo) each take their share of an epoch's 12 keys over the three sources (each
    run drawn twice): no key on both, and the items the keys draw are all different."""
    import torch.multiprocessing as mp

    out = tmp_path / "keys.json"
    mp.spawn(_rank_keys, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    first, second = json.loads(out.read_text())
    assert len(first) == len(second) == 6 and not set(first) & set(second)
    config = typed_config(*trained["overrides"], "train.val_fraction=0", name="cached")
    train_set, _, _ = mixture_sets(config)
    assert train_set.sizes == [2, 2, 2]
    train_set.set_epoch(2)
    centres = [train_set[key]["surface_mesh_centers"].numpy() for key in first + second]
    assert all(not np.array_equal(a, b) for i, a in enumerate(centres) for b in centres[i + 1:])


@pytest.mark.slow
def test_one_dataset_trains_and_predicts_in_the_form(mixture, monkeypatch, tmp_path) -> None:
    """``data.nondimensional=true`` without sources: the config's own dataset is the one source; its
    factors are of the form, and its predictions come back in its units (a prediction equal to the
    truth integrates to the true coefficients)."""
    import predict
    import train
    from domino_pipeline.compute.scaling import load_scaling_factors

    work = mixture["work"]
    overrides = ["dataset=openfoam", *COMMON, f"data.raw_dir={work / 'foam' / 'raw'}",
                 f"data.processed_dir={work / 'foam' / 'processed'}", f"cache.dir={work / 'foam' / 'cache'}",
                 "data.nondimensional=true", f"output_dir={tmp_path / 'train'}"]
    train.main(yaml_config(*overrides, name="cached"))
    factors = load_scaling_factors(tmp_path / "train" / "scaling_factors.json")
    assert factors["form"] == "nondimensional" and [n for n, _ in factors["variables"]["surface"]] == ["cp", "cf"]
    assert list(json.loads((tmp_path / "train" / "split.json").read_text())["sources"]) == ["openfoam"]
    forms = predict_the_truth(monkeypatch, tmp_path / "train" / "scaling_factors.json")
    predict.main(yaml_config(*overrides, "predict.split=val", f"predict.out_dir={tmp_path / 'out'}",
                             "predict.plot=false", name="cached"))
    [row] = list(csv.DictReader(open(tmp_path / "out" / "openfoam" / "predictions.csv")))
    assert float(row["cd_pred"]) == pytest.approx(float(row["cd_true"]), rel=1e-5)
    assert forms[0].fields["surface"][0] != 1.0  # the form, not the stored units


@pytest.mark.slow
def test_torchrun_two_ranks_train_over_sources(mixture) -> None:
    """train.py over the three sources under torchrun (2 gloo ranks): the epoch's draws split between
    the ranks, validation summed over both, per source."""
    import os
    import sys

    from test_train import run

    out = mixture["work"] / "ddp"
    overrides = [o for o in mixture["overrides"] if not o.startswith("output_dir=")]
    run([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node=2", "train.py",
         "--config-name=cached", *overrides, f"output_dir={out}"], env={**os.environ, "OMP_NUM_THREADS": "1"})
    [epoch] = [r for r in map(json.loads, (out / "epochs.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]
    assert epoch["world_size"] == 2 and all(len(runs) == 2 for runs in epoch["runs_by_rank"])
    split = json.loads((out / "split.json").read_text())
    assert {run for runs in epoch["runs_by_rank"] for run in runs} == set(split["train"])  # <source>/<run>
    for name in PROFILES:
        assert np.isfinite(epoch[f"val_source/{name}/loss"]) and np.isfinite(epoch[f"train_loss/source/{name}"])


def test_predict_refuses_runs_over_sources_without_their_source(tmp_path, capsys) -> None:
    """predict.runs over data.sources without predict.source: one line, before any model is loaded."""
    import predict

    sources = ("data.sources=[{name: a, dataset: ahmedml, processed_dir: /p, cache_dir: /c}, "
               "{name: b, dataset: drivaerml, processed_dir: /q, cache_dir: /d}]")
    with pytest.raises(SystemExit):
        predict.main(yaml_config(sources, f"predict.runs=[{tmp_path / 'run_1'}]",
                                 f"predict.checkpoint={tmp_path / 'none.mdlus'}", name="cached"))
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "set predict.source to one of ['a', 'b']" in line
