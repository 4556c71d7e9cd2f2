"""Dataset profiles (conf/dataset/*.yaml, domino_pipeline/configuration/dataset_profile.py): every profile loads
typed, the config composes with it as Hydra composes it, a field's name is one override, and a run
folder's files are found by the profile's patterns."""

from __future__ import annotations

from pathlib import Path

import hydra
import pytest
from conftest import ROOT, parametrize_tiered, typed_config, yaml_config
from omegaconf import OmegaConf

from domino_pipeline.configuration.config_files import compose_files
from domino_pipeline.configuration.dataset_profile import profile_from_file
from domino_pipeline.inputs.raw_files.run_folder import find_runs, run_files

PROFILES = sorted((ROOT / "conf" / "dataset").glob("*.yaml"))


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_every_profile_loads_typed_and_names_its_roles(path: Path) -> None:
    profile = profile_from_file(path)
    assert profile.name == path.stem
    assert set(profile.variables("surface").values()) <= {"scalar", "vector"}
    role = "pressure" if profile.has_field("surface", "pressure") else "pressure_coefficient"
    assert profile.field("surface", role) == profile.fields.surface[role]


@parametrize_tiered("name", ["config", "cached", "demo"])
def test_the_files_compose_as_hydra_composes_them(name: str) -> None:
    with hydra.initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        expected = hydra.compose(config_name=name, overrides=["train.epochs=3"])
    got = compose_files(ROOT / "conf", name, ["train.epochs=3"])
    assert OmegaConf.to_container(got, resolve=True) == OmegaConf.to_container(expected, resolve=True)


def test_a_config_file_rewritten_between_two_compositions_is_read_anew(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("seed: 1\n")
    assert compose_files(tmp_path, "config").seed == 1
    (tmp_path / "config.yaml").write_text("seed: 2\n")  # same size, maybe the same mtime
    assert compose_files(tmp_path, "config").seed == 2
    compose_files(tmp_path, "config").seed = 3  # a composition is the caller's to change
    assert compose_files(tmp_path, "config").seed == 2


def test_a_field_name_is_one_override_and_the_variables_follow() -> None:
    config = typed_config("dataset.fields.surface.pressure=p", "dataset.fields.volume.velocity=U")
    assert config.dataset.fields.surface == {"pressure": "p", "wall_shear_stress": "wallShearStressMeanTrim"}
    assert config.variables.surface == {"p": "scalar", "wallShearStressMeanTrim": "vector"}
    assert list(config.variables.volume) == ["U", "pMeanTrim", "nutMeanTrim"]  # the column order kept
    assert config.geometry.bounding_box_volume == config.dataset.bounding_boxes.volume


def test_a_profile_with_an_unknown_role_or_key_is_refused() -> None:
    with pytest.raises(ValueError, match=r"dataset.fields.surface: unknown roles \['temperature'\]"):
        typed_config("+dataset.fields.surface.temperature=T")
    with pytest.raises(ValueError, match=r"dataset.flow config: unknown keys \['speed'\]"):
        typed_config("+dataset.flow.speed=3")
    cfg = yaml_config()
    del cfg.dataset.files["stl"]
    with pytest.raises(ValueError, match=r"dataset.files config: missing keys \['stl'\]$"):
        from domino_pipeline.configuration.config import load_config
        load_config(cfg)


def test_an_unknown_profile_is_named_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"dataset=nosuch: no such dataset; the dataset choices are \['ahmedml', 'drivaerml', 'openfoam', 'windsorml'\]"):
        yaml_config("dataset=nosuch")


def test_run_folders_and_files_are_found_by_the_patterns(tmp_path: Path) -> None:
    profile = typed_config().dataset
    for name in ("run_2", "run_10", "run_1", "runs", "other_3"):
        (tmp_path / name).mkdir()
    assert [p.name for p in find_runs(tmp_path, profile)] == ["run_1", "run_2", "run_10"]
    run = tmp_path / "run_2"
    with pytest.raises(FileNotFoundError, match=r"run_2/drivaer_2.stl: missing file \(dataset.files.stl\)"):
        run_files(run, profile)
    for name in ("drivaer_2.stl", "boundary_2.vtp", "volume_2.vtu.00.part", "volume_2.vtu.01.part"):
        (run / name).write_bytes(b"x")
    files = run_files(run, profile)
    assert (files.index, files.volume.name, files.surface_areas) == ("2", "volume_2.vtu", None)
    assert run_files(run, profile, "surface").volume is None


def test_a_pattern_with_wildcards_must_match_one_file(tmp_path: Path) -> None:
    profile = typed_config("dataset.files.stl='*.stl'").dataset
    run = tmp_path / "run_1"
    run.mkdir()
    for name in ("boundary_1.vtp", "volume_1.vtu", "a.stl", "b.stl"):
        (run / name).write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"expected one file matching dataset.files.stl, found \['a.stl', 'b.stl'\]"):
        run_files(run, profile)
    (run / "b.stl").unlink()
    assert run_files(run, profile).stl.name == "a.stl"
