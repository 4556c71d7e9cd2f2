"""What every command shares: the typed config built once, refusals in one line.

``entry_point`` puts Hydra's ``main`` around ``main(config: PipelineConfig) -> int | None`` (the
exit code) and turns a refusal (``REFUSALS``) into one line ``error: <file>: <problem>`` on
stderr and exit code 1; an unknown command-line key is named with its key here (docs/example_keys.md)
or the closest ones, before Hydra refuses it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from domino_pipeline.configuration.config import RENAMED_KEYS, PipelineConfig, load_config, renamed_message
from domino_pipeline.configuration.example_keys import check_example_overrides

REFUSALS = (OSError, ValueError, OmegaConfBaseException)


def one_line(err: BaseException) -> str:
    """The first line of an error's message; an OSError as ``<file>: <reason>``."""
    if isinstance(err, OSError) and err.filename and str(err.filename) not in str(err.strerror):
        return f"{err.filename}: {err.strerror}"
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


@contextmanager
def refusals_in_one_line() -> Iterator[None]:
    """Exit with code 1 and one line on stderr on a refusal (REFUSALS) inside the block."""
    try:
        yield
    except REFUSALS as err:
        print(f"error: {one_line(err)}", file=sys.stderr, flush=True)
        sys.exit(1)


def config_name(arguments: Sequence[str]) -> str:
    """The ``--config-name`` (``-cn``) the command line gives, else ``config``."""
    for i, argument in enumerate(arguments):
        for flag in ("--config-name", "-cn"):
            if argument.startswith(flag + "="):
                return argument.split("=", 1)[1]
            if argument == flag and i + 1 < len(arguments):
                return arguments[i + 1]
    return "config"


def check_override_keys(arguments: Sequence[str], conf_dir: Path) -> None:
    """Refuse a ``key=value`` override of a key the config does not have, naming the closest
    keys, before Hydra refuses it in several lines ("not in struct")."""
    keys = [a.split("=", 1)[0] for a in arguments
            if "=" in a and not a.startswith(("-", "+", "~", "hydra."))]
    keys = [k for k in keys if "/" not in k and "@" not in k]  # config-group choices are Hydra's
    if not keys:
        return
    with hydra.initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = hydra.compose(config_name=config_name(arguments))
    missing = object()
    for key in keys:
        if OmegaConf.select(cfg, key, default=missing) is missing:
            parent = key.rpartition(".")[0]
            siblings = OmegaConf.select(cfg, parent, default=None) if parent else cfg
            names = [f"{parent}.{k}" if parent else str(k) for k in (siblings or {})]
            close = difflib.get_close_matches(key, names, n=1)
            raise ValueError(f"{key} is not a setting" + (f"; did you mean {', '.join(close)}?" if close else ""))


def with_new_override_names(arguments: Sequence[str]) -> list[str]:
    """The command line with each override (``key=value``, ``+key=value``) of an old key of
    RENAMED_KEYS under its new name, a one-line warning on stderr for each; ValueError when an
    old key and its new name are both given."""
    keys = {a.split("=", 1)[0].lstrip("+~") for a in arguments if "=" in a and not a.startswith("-")}
    renamed = []
    for argument in arguments:
        key, equals, value = argument.partition("=")
        old = key.lstrip("+~")
        if not equals or argument.startswith("-") or old not in RENAMED_KEYS:
            renamed.append(argument)
            continue
        new = RENAMED_KEYS[old]
        if new in keys:
            raise ValueError(f"{old} and {new} are both given: {old} is the old name of {new}; give only {new}")
        print(f"warning: {renamed_message(old, new)}", file=sys.stderr, flush=True)
        renamed.append(f"{new}={value}")
    return renamed


def entry_point(task: Callable[[PipelineConfig], int | None]) -> Callable[..., None]:
    """The command-line entry of ``task`` (module docstring); the returned ``main`` takes an already
    composed DictConfig too, so that tests run it in-process."""

    @functools.wraps(task)
    def run(cfg: DictConfig) -> None:
        with refusals_in_one_line():
            code = task(load_config(cfg))
        if code:
            sys.exit(code)

    hydra_main = hydra.main(version_base="1.3", config_path="conf", config_name="config")(run)

    @functools.wraps(task)
    def main(cfg: DictConfig | None = None) -> None:
        if cfg is None:
            with refusals_in_one_line():
                sys.argv[1:] = with_new_override_names(sys.argv[1:])
                check_example_overrides(sys.argv[1:])
                check_override_keys(sys.argv[1:], Path(inspect.getfile(task)).parent / "conf")
        hydra_main(cfg)

    return main
