"""The pressure and viscous parts of a body's drag, and the regime figures of a family.

Drag is the sum of two integrals over the body: the pressure's (form drag) and the wall shear's
(skin friction). Which one dominates says what a surrogate is judged on: where the viscous part
dominates, Cd follows the wetted area; where the pressure part dominates, it follows the wake.

Two sources, which agree to OpenFOAM's printed digits (tests/test_openfoam_family.py):

- a case's simpleFoam log: forceCoeffs prints ``Cd : total (pressure: p viscous: v)`` at each
  iteration (``log_split``; build_family.py records the last one per case, no extra package);
- a run folder's boundary.vtp: p and wallShearStress integrated over the faces
  (``surface_split``; domino_pipeline/inference/forces.py, needs the project's .venv), for a
  family whose case folders are gone.

The Reynolds number is U * length / nu: the free stream (coefficient.dat's magUInf), the body's
length (its record's shape) and the family's kinematic viscosity (family.json).

    PYTHONPATH=$PWD .venv/bin/python tools/openfoam_family/drag_shares.py /work/data/five88 [--json F]

With ``--predictions DIR [DIR ...]`` (predict.py's output folders, whose surfaces carry the solver's
and the model's fields), the same integrals say where a model's drag error comes from: the error of
its pressure part and of its viscous part, each in percent of the solver's Cd:

    PYTHONPATH=$PWD .venv/bin/python tools/openfoam_family/drag_shares.py --predictions W/predictions/*/test
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

AIR_NU = 1.5e-5  # sampling.RANS.nu: family.json's solver words name nu only where it is not air's
CD_LINE = re.compile(r"^\s*Cd\s*:\s*(\S+)\s*\(pressure:\s*(\S+)\s+viscous:\s*(\S+)\)", re.M)
HEADER_VALUE = re.compile(r"^#\s*(\w+)\s*:\s*(\S+)\s*$", re.M)


@dataclass(frozen=True)
class DragSplit:
    """A body's drag coefficient in its pressure and viscous parts (same references as forceCoeffs)."""

    pressure: float
    viscous: float

    @property
    def total(self) -> float:
        """Cd: the two parts summed."""
        return self.pressure + self.viscous

    @property
    def pressure_share(self) -> float:
        """The pressure part's fraction of the drag."""
        return self.pressure / self.total

    def record(self) -> dict[str, float]:
        """The figures a case's record and convergence.csv keep."""
        return {"cd_pressure": self.pressure, "cd_viscous": self.viscous, "cd_pressure_share": self.pressure_share}


def log_split(log_text: str) -> DragSplit:
    """The drag's parts at the last iteration forceCoeffs printed in a simpleFoam log."""
    found = CD_LINE.findall(log_text)
    if not found:
        raise ValueError("simpleFoam log: no forceCoeffs line 'Cd : ... (pressure: ... viscous: ...)' "
                         "(forceCoeffs1 needs 'log yes')")
    total, pressure, viscous = (float(x) for x in found[-1])
    split = DragSplit(pressure, viscous)
    if abs(split.total - total) > 1e-6 * max(abs(total), 1e-12):
        raise ValueError(f"simpleFoam log: Cd {total} is not its pressure {pressure} plus viscous {viscous}")
    return split


def coefficient_header(coefficient_text: str) -> dict[str, float]:
    """The scalar references of a coefficient.dat header (magUInf, lRef, Aref) by name."""
    values = {}
    for name, value in HEADER_VALUE.findall(coefficient_text):
        try:
            values[name] = float(value)
        except ValueError:
            continue  # vectors such as (1 0 0)
    missing = [k for k in ("magUInf", "Aref") if k not in values]
    if missing:
        raise ValueError(f"coefficient.dat: no {', '.join(missing)} in its header")
    return values


def surface_split(run: Path) -> DragSplit:
    """The drag's parts from a run folder's boundary.vtp (p and wallShearStress on the body's faces,
    OpenFOAM's face area vectors) over coefficient.dat's magUInf and Aref, as forceCoeffs does."""
    import pyvista

    header = coefficient_header((run / "coefficient.dat").read_text())
    [split] = fields_splits(pyvista.read(run / "boundary.vtp"), [("p", "wallShearStress")], header["magUInf"],
                            header["Aref"], run / "boundary.vtp")
    return split


def fields_splits(mesh, pairs: list[tuple[str, str]], speed: float, reference_area: float,
                  where: Path) -> list[DragSplit]:
    """The drag's parts of each (pressure, shear) pair of kinematic cell fields of a surface ``mesh``
    (``where`` names it in errors) over ``speed`` and ``reference_area``, forceCoeffs' conventions;
    the face area vectors computed once for every pair."""
    import numpy as np

    from domino_pipeline.configuration.force_integration import ForceConvention
    from domino_pipeline.inference.forces import mesh_vector_areas

    missing = [k for pair in pairs for k in pair if k not in mesh.cell_data]
    if missing:
        raise ValueError(f"{where}: no cell field {', '.join(missing)}")
    vector_areas = mesh_vector_areas(mesh)
    areas = np.linalg.norm(vector_areas, axis=1)
    convention = ForceConvention(normals="into_body", wall_shear="on_fluid")  # foamToVTK: conf/dataset/openfoam.yaml
    per_force = 1.0 / (0.5 * speed ** 2 * reference_area)  # kinematic fields, rhoInf 1
    splits = []
    for pressure, shear in pairs:
        pressure_force = np.asarray(mesh.cell_data[pressure], np.float64) @ vector_areas
        shear_force = areas @ np.asarray(mesh.cell_data[shear], np.float64)
        splits.append(DragSplit(float(convention.force(pressure_force, np.zeros(3))[0] * per_force),
                                float(convention.force(np.zeros(3), shear_force)[0] * per_force)))
    return splits


def prediction_errors(folder: Path) -> list[dict]:
    """Per body of a predict.py folder (predictions.csv, <run>_surface.vtp with p, p_pred,
    wallShearStress and wallShearStress_pred): the solver's and the model's drag parts, and each
    part's error in percent of the solver's Cd, to say where a model's drag error comes from."""
    import csv

    import pyvista

    table = folder / "predictions.csv"
    if not table.is_file():
        raise ValueError(f"{folder}: no predictions.csv (predict.py's output folder)")
    rows = []
    with open(table, newline="") as f:
        for row in csv.DictReader(f):
            surface = folder / f"{row['run']}_surface.vtp"
            if not surface.is_file():
                raise ValueError(f"{surface}: missing (predict.py writes one per body)")
            true, predicted = fields_splits(pyvista.read(surface), [("p", "wallShearStress"),
                                                                    ("p_pred", "wallShearStress_pred")],
                                            float(row["u_inf"]), float(row["a_ref"]), surface)
            percent = 100.0 / true.total
            rows.append({"run": row["run"], "cd": true.total, "cd_pred": predicted.total,
                         "pressure_share": true.pressure_share,
                         "pressure_error_percent": (predicted.pressure - true.pressure) * percent,
                         "viscous_error_percent": (predicted.viscous - true.viscous) * percent,
                         "error_percent": (predicted.total - true.total) * percent})
    return rows


def describe_errors(rows: list[dict]) -> str:
    """The mean absolute error of the model's Cd and of its two parts, in percent of the solver's Cd."""
    def mean_abs(key: str) -> float:
        return statistics.fmean(abs(r[key]) for r in rows)

    return (f"{len(rows)} bodies: Cd mean abs. error {mean_abs('error_percent'):.2f}%, of which the pressure part "
            f"{mean_abs('pressure_error_percent'):.2f}% and the viscous part {mean_abs('viscous_error_percent'):.2f}% "
            f"(each in percent of the solver's Cd; median pressure share "
            f"{statistics.median(r['pressure_share'] for r in rows):.0%})")


def reynolds(speed: float, length: float, nu: float) -> float:
    """Re = U * length / nu."""
    return speed * length / nu


def family_viscosity(family: dict) -> float:
    """The kinematic viscosity of a family from family.json (its ``openfoam`` words name nu unless it is air's)."""
    words = family.get("openfoam", "")
    found = re.search(r"\bnu (\S+)", words)
    return float(found.group(1)) if found else AIR_NU


def spread(values: list[float]) -> dict[str, float]:
    """min, median and max."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def family_regime(root: Path, names: list[str] | None = None, split_of=surface_split) -> dict:
    """Each run's Cd, its parts and Re, and their spreads over the family at ``root`` (every run_<i>
    folder, or those ``names``). Re needs the family's nu (family.json) and each body's length (its
    record); a run folder without them still gives Cd and its parts, and ``re_spread`` is then absent."""
    family_json = root / "family.json"
    family = json.loads(family_json.read_text()) if family_json.is_file() else None
    nu = family_viscosity(family) if family is not None else None
    runs = sorted((root / n for n in names) if names is not None else (p for p in root.glob("run_*") if p.is_dir()),
                  key=lambda p: int(p.name.split("_")[1]))
    if not runs:
        raise ValueError(f"{root}: no run_<i> folder")
    rows = []
    for run in runs:
        split = split_of(run)
        row = {"run": run.name, **split.record(), "cd": split.total}
        record_path = root / "records" / f"case_{run.name.split('_')[1]}.json"
        if nu is not None and record_path.is_file():
            record = json.loads(record_path.read_text())
            speed = coefficient_header((run / "coefficient.dat").read_text())["magUInf"]
            row |= {"cd_recorded": record["cd"], "length": record["shape"]["length"],
                    "re": reynolds(speed, record["shape"]["length"], nu)}
        rows.append(row)
    keys = ["cd", "cd_pressure", "cd_viscous", "cd_pressure_share"] + (["re"] if all("re" in r for r in rows) else [])
    solver = ("solver not recorded (no family.json)" if family is None else
              family.get("openfoam", "solver not recorded in family.json"))
    return {"root": str(root), "nu": nu, "solver": solver, "runs": rows,
            **{f"{key}_spread": spread([r[key] for r in rows]) for key in keys}}


def describe(regime: dict) -> str:
    """The regime in one paragraph: the solver, Re, Cd and the pressure share over the family."""
    cd, share = regime["cd_spread"], regime["cd_pressure_share_spread"]
    re_ = regime.get("re_spread")
    flow = (f"Re (U length / nu) {re_['min']:,.0f} .. {re_['max']:,.0f} (median {re_['median']:,.0f})"
            if re_ else "Re not known (no family.json or records)")
    return (f"{len(regime['runs'])} runs ({regime['solver']}): {flow}; Cd {cd['min']:.4f} .. {cd['max']:.4f}; "
            f"pressure share of drag min {share['min']:.1%}, median {share['median']:.1%}, max {share['max']:.1%} "
            f"(viscous {1 - share['max']:.1%} .. {1 - share['min']:.1%})")


def main() -> None:
    """Integrate every converged run of a family and print its regime; or, with ``--predictions``,
    split a model's drag error into its pressure and viscous parts."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, nargs="?", help="a family's folder (family.json, run_<i>/, records/)")
    parser.add_argument("--predictions", type=Path, nargs="+", metavar="DIR",
                        help="predict.py output folders instead of a family: the model's drag error by part")
    parser.add_argument("--json", type=Path, help="write the per-run figures and the spreads here")
    args = parser.parse_args()
    if (args.root is None) == (args.predictions is None):
        parser.error("give a family's folder or --predictions, one of them")
    if args.predictions:
        rows = [row | {"folder": str(folder)} for folder in args.predictions for row in prediction_errors(folder)]
        for row in rows:
            print(f"{row['run']:>10}  Cd {row['cd']:.4f}  error {row['error_percent']:+.2f}%  pressure part "
                  f"{row['pressure_error_percent']:+.2f}%  viscous part {row['viscous_error_percent']:+.2f}%")
        print(describe_errors(rows))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return
    regime = family_regime(args.root)
    print(describe(regime))
    recorded = [r for r in regime["runs"] if "cd_recorded" in r]
    if recorded:
        worst = max(abs(r["cd"] / r["cd_recorded"] - 1) for r in recorded)
        print(f"integrated Cd against forceCoeffs' recorded Cd: largest relative difference {worst:.1e}")
    if args.json:
        args.json.write_text(json.dumps(regime, indent=1) + "\n")


if __name__ == "__main__":
    main()
