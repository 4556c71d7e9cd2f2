"""Shared fixtures: two tiny synthetic DrivAerML runs, raw and processed, built once per session."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig

from domino_pipeline.configuration.config import PipelineConfig, load_config
from domino_pipeline.configuration.config_files import compose_files
from domino_pipeline.inputs.processing.process_options import ProcessOptions

ROOT = Path(__file__).resolve().parents[1]

TINY_RUNS = 2
TINY_SEED = 0


def yaml_config(*overrides: str, name: str = "config") -> DictConfig:
    """conf/<name>.yaml (with the files and the dataset profile its ``defaults`` name) and dotted
    overrides, as Hydra composes them (config_files.compose_files: no interpolation resolved yet;
    "+key=value" adds a key; "dataset=<name>" chooses the profile)."""
    return compose_files(ROOT / "conf", name, overrides)


def typed_config(*overrides: str, name: str = "config") -> PipelineConfig:
    """``yaml_config`` built into the typed config, as an entry point builds it."""
    return load_config(yaml_config(*overrides, name=name))


# process_run's options from the default config, as process_data.py builds them
DEFAULTS = typed_config()
PROCESS_OPTIONS = ProcessOptions.from_config(DEFAULTS.dataset, DEFAULTS.physics, DEFAULTS.process)
# the default profile's variables, as DoMINODataPipe's keyword arguments
VARIABLES = {"surface_variables": tuple(DEFAULTS.variables.surface.items()),
             "volume_variables": tuple(DEFAULTS.variables.volume.items())}


def parametrize_tiered(argnames: str, cases: list, fast=None, fast_if=None, **kwargs):
    """``pytest.mark.parametrize(argnames, cases, **kwargs)`` with every case marked slow but
    ``fast`` (the first case when neither is given) or those ``fast_if(case)`` holds for:
    `make test-fast` runs the representative or cheap cases, `make test` every case. A case of
    several arguments is a tuple."""
    several = "," in argnames
    if fast_if is None:
        fast = cases[0] if fast is None else fast
        assert fast in cases, fast
        fast_if = lambda case: case == fast  # noqa: E731

    def slow(case):
        return pytest.param(*(case if several else (case,)), marks=pytest.mark.slow)
    return pytest.mark.parametrize(argnames, [case if fast_if(case) else slow(case) for case in cases], **kwargs)


def import_benchmark(name: str):
    """Import the script ``benchmarks/<name>.py``. Benchmarks are scripts, not an installed
    package: their folder goes on ``sys.path``, as when one is run, so that the processes they
    spawn import them too."""
    folder = str(ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(name)


@pytest.fixture(scope="session")
def tiny_raw_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny synthetic runs (run_1, run_2) in DrivAerML's folder layout. Do not modify."""
    from synthetic_data import generate_runs  # here: the xdist controller loads this file too, needing no stage
    out = tmp_path_factory.mktemp("tiny_raw")
    generate_runs(out, TINY_RUNS, preset="tiny", seed=TINY_SEED)
    return out


@pytest.fixture(scope="session")
def tiny_dataset_dir(tiny_raw_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """``tiny_dataset_dir(name)``: two tiny synthetic runs of dataset ``name`` (drivaerml,
    ahmedml, windsorml) in its published layout, written once per session. Do not modify."""
    from synthetic_data import generate_runs
    made = {"drivaerml": tiny_raw_dir}

    def runs_of(name: str) -> Path:
        if name not in made:
            made[name] = tmp_path_factory.mktemp(f"tiny_{name}")
            generate_runs(made[name], TINY_RUNS, preset="tiny", seed=TINY_SEED, dataset=name)
        return made[name]

    return runs_of


@pytest.fixture(scope="session")
def tiny_processed_dir(tiny_raw_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_raw_dir`` processed with the default config: run_1.zarr, run_2.zarr. Read only."""
    from domino_pipeline.inputs.processing.process_runs import process_all
    out = tmp_path_factory.mktemp("tiny_processed")
    results = process_all(tiny_raw_dir, out, PROCESS_OPTIONS, num_processes=1)
    failed = [r for r in results if r.status != "processed"]
    if failed:
        raise RuntimeError(f"tiny runs failed to process: {failed}")
    return out


@pytest.fixture(scope="session")
def cache_dir(tiny_processed_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_processed_dir`` cached with the tiny settings (neighbour indices). Read only."""
    from cache_fixtures import build_tiny_cache
    return build_tiny_cache(tiny_processed_dir, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def features_cache_dir(tiny_processed_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_processed_dir`` cached in the ``features`` neighbour layout. Read only."""
    from cache_fixtures import build_tiny_cache, tiny_settings
    return build_tiny_cache(tiny_processed_dir, tmp_path_factory.mktemp("features"),
                            tiny_settings(neighbor_layout="features"))


@pytest.fixture(scope="session")
def s3_server():
    """An S3 server (moto) on 127.0.0.1 for this session, with test credentials and its
    endpoint in the environment (``AWS_*``), as a user's S3-compatible server would be."""
    import os

    from s3_server import CREDENTIALS, MotoServer
    server = MotoServer()
    saved = {k: os.environ.get(k) for k in [*CREDENTIALS, "AWS_ENDPOINT_URL"]}
    os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint)
    yield server
    for key, value in saved.items():
        os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    server.stop()


@pytest.fixture(scope="session")
def s3_cache(s3_server, cache_dir: Path) -> str:
    """``cache_dir`` uploaded to a bucket of ``s3_server``: its URL. Read only."""
    from domino_pipeline.store.object_cache import upload_folder
    url = f"s3://{s3_server.bucket()}/tiny/cache"
    upload_folder(cache_dir, url)
    return url


@pytest.fixture(scope="session")
def s3_features_cache(s3_server, features_cache_dir: Path) -> str:
    """``features_cache_dir`` uploaded to a bucket of ``s3_server``: its URL. Read only."""
    from domino_pipeline.store.object_cache import upload_folder
    url = f"s3://{s3_server.bucket()}/features"
    upload_folder(features_cache_dir, url)
    return url


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the imports left (torch, VTK, zarr: ~400,000 objects) is out of the garbage
    collector's sight from here (``gc.freeze``): a full collection, during the tests and the
    several pytest makes at its end, takes microseconds instead of ~0.2 s."""
    import gc

    gc.collect()
    gc.freeze()


# ---- honest markers: a test that trains, builds a cache or predicts in a subprocess is slow ----

SLOW_ENTRY_POINTS = ("train.py", "cache_data.py", "predict.py", "torch.distributed.run", "torchrun")
_running_slow = {"now": True}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _running_slow["now"] = item.get_closest_marker("slow") is not None


@pytest.fixture(scope="session", autouse=True)
def _entry_points_only_in_slow_tests():
    """Refuse, in a test not marked slow (its fixtures included), a subprocess that runs one
    of SLOW_ENTRY_POINTS: `make test-fast` stays fast by construction."""
    import subprocess

    original = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):
        words = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
        named = [w for w in words if Path(w).name in SLOW_ENTRY_POINTS or w in SLOW_ENTRY_POINTS]
        if named and not _running_slow["now"]:
            raise RuntimeError(f"a test not marked slow runs {named[0]} in a subprocess: "
                               "mark it @pytest.mark.slow")
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded
    yield
    subprocess.Popen.__init__ = original
