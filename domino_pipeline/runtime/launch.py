"""Where this process sits in a job, by the one rule every stage follows: torchrun's variables,
else Slurm's, else a single process (docs/scaling.md, "On a Slurm cluster"). Nothing here
imports torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

LAUNCHERS = ("torchrun", "slurm", "single")
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
NODELIST_VARIABLES = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST")
# Ports derived from SLURM_JOB_ID: unprivileged, and below Linux's ephemeral range (32768-60999)
# from which the system hands out ports for outgoing connections.
SLURM_PORTS = (15000, 30000)
_ENTRY = re.compile(r"(?:[^,\[\]]|\[[^\[\]]*\])+")  # up to the first comma outside brackets
_GROUP = re.compile(r"\[(\d+)(?:-\d+)?(?:,\d+(?:-\d+)?)*\]")  # [01-04,07]: its first number


@dataclass(frozen=True)
class Launch:
    """This process's place in its job: rank, world size, local rank, where rank 0 listens (None: single)."""

    launcher: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, not {self.launcher!r}")

    @property
    def init_method(self) -> str:
        """torch.distributed's ``init_method`` for joining the job's process group."""
        if self.launcher == "torchrun":
            return "env://"
        if self.master_addr is None or self.master_port is None:
            raise ValueError(f"a {self.launcher} process of world size {self.world_size} has no master address")
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr  # IPv6
        return f"tcp://{host}:{self.master_port}"


def launch_environment(environ: Mapping[str, str] | None = None) -> Launch:
    """This process's ``Launch`` from ``environ`` (default ``os.environ``); ValueError on bad variables."""
    env = os.environ if environ is None else environ
    if any(name in env for name in TORCHRUN_VARIABLES):
        return _torchrun(env)
    if _integer(env, "SLURM_NTASKS", default=1) > 1:
        return _slurm(env)
    return Launch("single")


def _torchrun(env: Mapping[str, str]) -> Launch:
    """A torchrun process: its three rank variables, and rank 0's address in a world of several."""
    missing = [name for name in TORCHRUN_VARIABLES if name not in env]
    if missing:
        present = [f"{name}={env[name]}" for name in TORCHRUN_VARIABLES if name in env]
        raise ValueError(f"{_listed(present)} set but {_listed(missing)} not set: torchrun sets "
                         f"all of {', '.join(TORCHRUN_VARIABLES)}")
    world_size = _integer(env, "WORLD_SIZE", minimum=1)
    rank, local_rank = _ranks(env, "RANK", "LOCAL_RANK", ("WORLD_SIZE", world_size))
    if world_size == 1:
        return Launch("torchrun", rank, world_size, local_rank)
    absent = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not env.get(name)]
    if absent:
        raise ValueError(f"WORLD_SIZE={world_size} but {_listed(absent)} not set")
    return Launch("torchrun", rank, world_size, local_rank, env["MASTER_ADDR"], _port(env))


def _slurm(env: Mapping[str, str]) -> Launch:
    """A task that srun started, one of ``SLURM_NTASKS`` (> 1)."""
    world_size = _integer(env, "SLURM_NTASKS", minimum=1)
    absent = [name for name in ("SLURM_PROCID", "SLURM_LOCALID") if name not in env]
    if absent:
        raise ValueError(f"SLURM_NTASKS={world_size} but {_listed(absent)} not set: this shell "
                         "holds an allocation of several tasks; start each task with srun "
                         "(srun python train.py ...), or run one process with SLURM_NTASKS=1")
    rank, local_rank = _ranks(env, "SLURM_PROCID", "SLURM_LOCALID", ("SLURM_NTASKS", world_size))
    return Launch("slurm", rank, world_size, local_rank, _slurm_master(env), _slurm_port(env))


def _ranks(env: Mapping[str, str], rank_name: str, local_name: str, world: tuple[str, int]) -> tuple[int, int]:
    """The rank and the local rank, each below the world size, the local one at most the rank."""
    world_name, world_size = world
    rank = _integer(env, rank_name, minimum=0)
    local_rank = _integer(env, local_name, minimum=0)
    if rank >= world_size:
        raise ValueError(f"{rank_name}={rank} is not below {world_name}={world_size}")
    if local_rank > rank:
        raise ValueError(f"{local_name}={local_rank} is above {rank_name}={rank}: a process's rank on "
                         "its machine cannot exceed its rank in the job")
    return rank, local_rank


def _slurm_master(env: Mapping[str, str]) -> str:
    """Rank 0's host: ``MASTER_ADDR``, else the first node of the step's or the job's node list."""
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    for name in NODELIST_VARIABLES:
        if env.get(name):
            return first_host(env[name], name)
    raise ValueError(f"SLURM_NTASKS={env['SLURM_NTASKS']} but none of MASTER_ADDR, "
                     f"{', '.join(NODELIST_VARIABLES)} is set: rank 0's host is unknown")


def _slurm_port(env: Mapping[str, str]) -> int:
    """``MASTER_PORT``, else a port in ``SLURM_PORTS`` derived from ``SLURM_JOB_ID``."""
    if env.get("MASTER_PORT"):
        return _port(env)
    if not env.get("SLURM_JOB_ID"):
        raise ValueError(f"SLURM_NTASKS={env['SLURM_NTASKS']} but neither MASTER_PORT nor SLURM_JOB_ID "
                         "is set: rank 0's port is unknown")
    low, high = SLURM_PORTS
    return low + _integer(env, "SLURM_JOB_ID", minimum=0) % (high - low)


def _port(env: Mapping[str, str]) -> int:
    port = _integer(env, "MASTER_PORT", minimum=1)
    if port > 65535:
        raise ValueError(f"MASTER_PORT={port} is not a port (1 to 65535)")
    return port


def _listed(names: list[str]) -> str:
    """``A is`` or ``A and B are``, for messages."""
    return f"{' and '.join(names)} {'is' if len(names) == 1 else 'are'}"


def _integer(env: Mapping[str, str], name: str, *, default: int | None = None, minimum: int | None = None) -> int:
    """``env[name]`` as an integer (``default`` when unset), at least ``minimum``."""
    if name not in env and default is not None:
        return default
    text = env[name]
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}={value} is below {minimum}")
    return value


def first_host(nodelist: str, name: str = "SLURM_JOB_NODELIST") -> str:
    """The first host of a Slurm node list in its compact form (``node[01-04,07],gpu3`` -> ``node01``);
    a ValueError naming the variable ``name`` when the list is malformed."""
    entry = _ENTRY.match(nodelist)
    host = _GROUP.sub(lambda group: group.group(1), entry.group(0)) if entry else ""
    if not host or nodelist[entry.end():entry.end() + 1] not in ("", ",") or re.search(r"[\[\]\s]", host):
        raise ValueError(f"{name}={nodelist!r} is not a Slurm node list (e.g. node[01-04,07],gpu3)")
    return host
