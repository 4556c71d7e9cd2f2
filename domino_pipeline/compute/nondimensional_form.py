"""The non-dimensional form in which runs of several datasets share one model (docs/mixtures.md). Stored fields are
divided by the configured references (``physics``: one U, rho for every run); the form divides each run by its own
flow: pressure and wall shear by its dynamic pressure (Cp, Cf, shear as the stress on the body), velocity by its
free-stream speed, turbulent viscosity by U_inf L; normals point out of the body; areas are over the reference length
squared. ``RunForm``: one run's factors, a product per column, so conversions and statistics are exact to rounding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.configuration.variables import FIELD_ROLES, VARIABLE_WIDTH

# role -> the variable's name in the form; roles not named keep their own name
FORM_NAMES = {"pressure": "cp", "pressure_coefficient": "cp", "wall_shear_stress": "cf",
              "skin_friction_coefficient": "cf", "velocity": "u_over_u_inf",
              "turbulent_viscosity": "nut_over_u_inf_l", "total_pressure_coefficient": "cp_total"}
SHEAR_ROLES = ("wall_shear_stress", "skin_friction_coefficient")  # signed by what the stress acts on


def form_variables(dataset: DatasetConfig, part: str) -> list[list[str]]:
    """[[name, kind], ...] of ``part``'s variables in the form, in the profile's column order."""
    return [[FORM_NAMES.get(role, role), FIELD_ROLES[role][0]] for role in dataset.roles(part).values()]


@dataclass(frozen=True)
class RunForm:
    """One run's factors: ``fields[part]`` per column, ``area`` and ``normal`` (a sign); form = stored x factor."""

    fields: dict[str, np.ndarray]
    area: float
    normal: float

    def to_form(self, part: str, stored: np.ndarray) -> np.ndarray:
        """``stored`` fields (..., C) of ``part`` in the form."""
        return stored * self.fields[part].astype(np.float32)

    def to_stored(self, part: str, form: np.ndarray) -> np.ndarray:
        """The inverse of ``to_form``: fields in the form back in the stored units."""
        return form / self.fields[part].astype(np.float32)

    def statistics(self, part: str, stats: Mapping) -> dict:
        """``run_statistics`` sums (n, lo, hi, s1, s2 per column) of the stored fields, of the form."""
        factor = self.fields[part].astype(np.float64)
        lo, hi = factor * np.asarray(stats["lo"]), factor * np.asarray(stats["hi"])
        return {"n": stats["n"], "lo": np.minimum(lo, hi).tolist(), "hi": np.maximum(lo, hi).tolist(),
                "s1": (factor * np.asarray(stats["s1"])).tolist(), "s2": (factor**2 * np.asarray(stats["s2"])).tolist()}


def stored_run_form(dataset: DatasetConfig, global_params: Sequence[float], published_velocity: float | None,
                    run: str, nondimensional: bool = True) -> RunForm:
    """The form of a run stored over ``global_params`` (U, rho), its free-stream speed the profile's, else the one its
    files publish (ValueError naming the run without either); not ``nondimensional``: the stored units themselves."""
    if not nondimensional:
        return RunForm({part: np.ones(sum(VARIABLE_WIDTH[k] for k in dataset.variables(part).values()))
                        for part in ("surface", "volume")}, 1.0, 1.0)
    stored_velocity, stored_density = (float(v) for v in global_params[:2])
    velocity = dataset.flow.velocity if dataset.flow.velocity is not None else published_velocity
    if velocity is None or not velocity > 0:
        raise ValueError(f"{run}: no free-stream speed (dataset {dataset.name}: flow.velocity is null and the "
                         "run records none); rebuild its cache run with this version of cache_data.py")
    return run_form(dataset, stored_velocity=stored_velocity, stored_density=stored_density, velocity=float(velocity))


def run_form(dataset: DatasetConfig, *, stored_velocity: float, stored_density: float, velocity: float) -> RunForm:
    """The factors of a run stored over ``stored_velocity`` and ``stored_density``, its free stream ``velocity``."""
    flow = dataset.flow
    dynamic = 0.5 * (1.0 if flow.kinematic else flow.density) * velocity**2
    stored_dynamic = stored_density * stored_velocity**2
    ratio = stored_velocity / velocity
    per_scale = {"rho_u2": stored_dynamic / dynamic, "rho_u2_squared": (stored_dynamic / dynamic) ** 2,
                 "u": ratio, "u2": ratio**2, "u_l": ratio, "u_per_l": ratio, "one": 1.0}
    shear_sign = 1.0 if flow.wall_shear == "on_body" else -1.0
    fields = {}
    for part in ("surface", "volume"):
        columns = []
        for role in dataset.roles(part).values():
            kind, scale = FIELD_ROLES[role]
            sign = shear_sign if role in SHEAR_ROLES else 1.0
            columns += [sign * per_scale[scale]] * VARIABLE_WIDTH[kind]
        fields[part] = np.asarray(columns, dtype=np.float64)
    return RunForm(fields, area=1.0 / dataset.references.length**2,
                   normal=1.0 if flow.normals == "out_of_body" else -1.0)
