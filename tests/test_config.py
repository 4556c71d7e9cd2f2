"""The typed config: defaults only in the YAML, unknown / missing / mistyped keys and values outside
the choices refused with the key, the DoMINO example's keys named with ours."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import DEFAULTS, typed_config, yaml_config
from omegaconf import OmegaConf

from domino_pipeline.configuration.config import SECTIONS, PipelineConfig, load_config
from domino_pipeline.configuration.example_keys import EXAMPLE_KEYS, check_example_keys, check_example_overrides


def test_no_field_has_a_default_outside_the_yaml():
    for cls in (PipelineConfig, *SECTIONS.values()):
        defaulted = [f.name for f in dataclasses.fields(cls)
                     if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING]
        assert defaulted == [], f"{cls.__name__} has defaults {defaulted}"


def test_the_yaml_values_arrive_typed():
    assert DEFAULTS.geometry.neighbor_layout == "features"
    assert DEFAULTS.sampling.volume_window_factor == 8 and DEFAULTS.sampling.surface_window_factor == 8
    assert DEFAULTS.physics.stream_velocity == 30.0 and isinstance(DEFAULTS.physics.stream_velocity, float)
    assert DEFAULTS.model["interp_res"] == DEFAULTS.geometry.interp_res  # ${geometry.interp_res} resolved
    demo = typed_config(name="demo")
    assert (demo.cache.enabled, demo.train.epochs, demo.geometry.interp_res) == (True, 37, [32, 16, 16])
    assert demo.output_dir == "outputs/demo/surface"
    assert load_config(OmegaConf.create(demo.as_dict())) == demo


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_an_unknown_or_missing_key_of_every_section_is_refused(section):
    with pytest.raises(ValueError, match=rf"^{section} config: unknown keys \['bogus'\]$"):
        typed_config(f"+{section}.bogus=1")
    cfg = yaml_config()
    first = next(iter(cfg[section]))
    del cfg[section][first]
    with pytest.raises(ValueError, match=rf"^{section} config: missing keys \['{first}'\]$"):
        load_config(cfg)


def test_top_level_keys_are_checked_too():
    with pytest.raises(ValueError, match=r"^config: unknown keys \['extra'\]$"):
        typed_config("+extra=1")
    cfg = yaml_config()
    del cfg["seed"]
    with pytest.raises(ValueError, match=r"^config: missing keys \['seed'\]$"):
        load_config(cfg)
    cfg["extra"] = 1
    with pytest.raises(ValueError, match=r"^config: unknown keys \['extra'\], missing keys \['seed'\]$"):
        load_config(cfg)


@pytest.mark.parametrize(("override", "message"), [
    ("process.num_processes=two", "process.num_processes must be int, not 'two'"),
    ("sampling.exact=3", "sampling.exact must be bool, not 3"),
    ("physics.reference_length=long", "physics.reference_length must be float or null, not 'long'"),
    ("train.lr=[1]", r"train.lr must be float, not \[1\]"),
    ("data.raw_dir=null", "data.raw_dir must be str, not None"),
    ("seed=one", "seed must be int, not 'one'"),
])
def test_a_value_of_the_wrong_type_names_its_key(override, message):
    with pytest.raises(ValueError, match=message):
        typed_config(override)


@pytest.mark.parametrize(("override", "message"), [
    ("model_type=wing", r"model_type must be one of \['surface', 'volume', 'combined'\], not 'wing'"),
    ("geometry.neighbor_layout=rows", r"geometry.neighbor_layout must be one of \['indices', 'features'\]"),
    ("geometry.device=tpu", r"geometry.device must be one of \['auto', 'cpu', 'cuda'\] or cuda:<index>"),
    ("sampling.normalization=min_max_scaling", r"sampling.normalization must be one of \['min_max', 'mean_std'\]"),
    ("process.volume_source=faces", r"process.volume_source must be one of \['points', 'cells'\]"),
    ("train.amp=fp8", r"train.amp must be one of \['bf16', 'fp16', 'none'\]"),
    ("train.scheduler=linear", r"train.scheduler must be one of \['cosine', 'step'\]"),
    ("predict.split=holdout", r"predict.split must be one of \['train', 'val', 'test'\]"),
    ("dataset.flow.normals=outward", r"dataset.flow.normals must be one of \['into_body', 'out_of_body'\]"),
    ("loss.type=l1", r"loss.type must be one of \['mse', 'rmse'\]"),
    ("physics.air_density=0", "physics: stream_velocity, air_density and reference_length"),
    ("cache.max_open_runs=0", "cache.max_open_runs must be at least 1"),
    ("sampling.surface_points=0", "sampling.surface_points must be at least 1"),
    ("executor.kind=ray", r"executor.kind must be one of \['pool', 'dask'\], not 'ray'"),
    ("executor.address=tcp://h:8786", r"^executor.address is a Dask scheduler's; set executor.kind=dask"),
    ("cache.num_processes=0", "cache.num_processes must be at least 1"),
    ("data.shard=2/2", r"^data.shard must be <i>/<n> with 0 <= i < n"),
    ("data.runs=[10-5]", r"^data.runs: range '10-5' is empty"),
    ("data.runs=7", r"^data.runs must be list or null, not 7$"),
])
def test_a_value_outside_the_choices_lists_them(override, message):
    with pytest.raises(ValueError, match=message):
        typed_config(override)


FIVE = {  # the example's keys a DoMINO user types first, and ours
    "model.volume_points_sample": "sampling.volume_points",
    "data.input_dir": "data.processed_dir",
    "model.normalization": "sampling.normalization",
    "model.loss_function.loss_type": "loss.type",
    "data.bounding_box.min": "geometry.bounding_box_volume.min",
}


@pytest.mark.parametrize("key", sorted(FIVE))
def test_an_example_key_is_named_with_ours_on_the_command_line_and_in_a_config(key):
    with pytest.raises(ValueError, match=rf"^{key} is {FIVE[key]} here"):
        check_example_overrides([f"{key}=1"])
    with pytest.raises(ValueError, match=rf"^{key} is {FIVE[key]} here"):
        check_example_overrides([f"+{key}=1"])
    with pytest.raises(ValueError, match=rf"^{key} is {FIVE[key]} here"):
        typed_config(f"+{key}=1")


def test_every_listed_example_key_is_refused_and_none_is_ours():
    ours = set(_paths(DEFAULTS.as_dict()))
    assert not ours & set(EXAMPLE_KEYS)
    for key in EXAMPLE_KEYS:
        with pytest.raises(ValueError, match=rf"^{key} "):
            check_example_keys(OmegaConf.to_container(OmegaConf.from_dotlist([f"{key}=1"])))
    check_example_overrides(["--config-name=cached", "model_type=combined", "train.epochs=3", "model.interp_res=[8,8,8]"])


def test_several_example_keys_are_named_in_one_line():
    with pytest.raises(ValueError, match=r"^data.input_dir is data.processed_dir here .*; "
                                         r"model.volume_points_sample is sampling.volume_points here$"):
        typed_config("+data.input_dir=/x", "+model.volume_points_sample=3")


def _paths(values: dict, prefix: str = ""):
    for key, value in values.items():
        yield prefix + key
        if isinstance(value, dict):
            yield from _paths(value, prefix + key + ".")


@pytest.mark.parametrize("box", ["{min:[0,0,0],max:[1,1]}", "{min:[0,0,0],max:[1,-1,1]}", "{lo:[0,0,0],max:[1,1,1]}"])
def test_a_bounding_box_that_is_not_min_below_max_in_3d_is_refused(box):
    with pytest.raises(ValueError, match=r"geometry.bounding_box_volume must be \{min: \[x, y, z\], max"):
        typed_config(f"geometry.bounding_box_volume={box}")


def test_the_old_name_of_check_processed_stats_is_read_with_a_warning():
    cfg = yaml_config()
    values = OmegaConf.to_container(cfg)
    del values["cache"]["check_processed_stats"]
    values["cache"]["check_sources"] = False
    with pytest.warns(DeprecationWarning, match=r"cache\.check_sources is deprecated: it is now "
                                                r"cache\.check_processed_stats"):
        config = load_config(OmegaConf.create(values))
    assert config.cache.check_processed_stats is False
    assert typed_config("cache.check_processed_stats=false").cache.check_processed_stats is False


def test_a_config_composed_over_the_defaults_with_the_old_name_takes_the_old_value():
    """A user's config that sets cache.check_sources over conf/config.yaml holds both names: the old
    one is what its author wrote (the shipped files hold only the new one), so it is taken, with a warning."""
    with pytest.warns(DeprecationWarning, match=r"cache\.check_sources is deprecated"):
        config = typed_config("+cache.check_sources=false")
    assert config.cache.check_processed_stats is False
