"""What every command shares: the typed config built once, refusals in one line.

    @entry_point
    def main(config: PipelineConfig) -> int:     # the exit code (0 or None: success)
        ...

    if __name__ == "__main__":
        main()

``entry_point`` puts Hydra's ``main`` (conf/config.yaml beside the script, ``--config-name`` and
overrides from the command line) around the function, builds the ``PipelineConfig``, and turns a
refusal or bad input (OSError, ValueError and the errors derived from them, a config that does
not resolve) into one line ``error: <file>: <problem>`` on stderr and exit code 1, without a
traceback. A key of physicsnemo's DoMINO example given on the command line is named with the key
it has here before Hydra refuses it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import hydra
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from domino_pipeline.config import PipelineConfig, load_config
from domino_pipeline.example_keys import check_example_overrides

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


def entry_point(task: Callable[[PipelineConfig], int | None]) -> Callable[..., None]:
    """The command-line entry of ``task`` (module docstring). The returned ``main`` takes an
    already composed DictConfig too (``main(cfg)``, as Hydra's ``main`` does), so that tests run
    it in-process."""

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
                check_example_overrides(sys.argv[1:])
        hydra_main(cfg)

    return main
