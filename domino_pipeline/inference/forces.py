"""Drag and lift coefficients from surface pressure and wall shear, integrated over the cells.

The force the flow exerts on the car, summed over the surface cells i with area A_i:

    F = sum_i (-p_i n_i + tau_i) A_i        n_i: unit normal pointing out of the car, into the fluid
                                            tau_i: wall shear stress the fluid exerts on the car

    C_d = F . e_drag / (0.5 rho_inf U_inf^2 A_ref)      C_l = F . e_lift / (0.5 rho_inf U_inf^2 A_ref)

with the flow along +x (e_drag = +x) and lift along +z. The fields are the physical ones, as the
source files hold them: process_data.py stores p / (rho U^2) with the *scaling* references
(config ``physics.stream_velocity``, ``physics.air_density``; the DoMINO example's 30 m/s and
1.205 kg/m^3), and the caller multiplies them back before integrating. The coefficients use the
*flow's* free stream (``FreeStream``: DrivAerML's 38.89 m/s), which need not be the scaling
reference. DrivAerML's pressure and wall shear are kinematic (divided by the density, m^2/s^2):
there F is a force per density and rho_inf is 1, so neither density enters its coefficients.

Data sets state their normals and shear the other way round, which ``ForceConvention`` records:
DrivAerML's and AhmedML's boundary VTPs are OpenFOAM boundary output, whose face normals point out
of the fluid domain, i.e. into the car, and whose ``wallShearStress`` is the stress on the fluid;
there ``F = sum (p n - tau) A``, the formula of physicsnemo's DoMINO example (test.py) and of
``physicsnemo.metrics.cae.cfd.compute_force_coefficients``. synthetic_data.py writes each
dataset's own convention.

A dataset whose surface fields are already coefficients (WindsorML's pressure and skin friction
coefficients, the roles ``pressure_coefficient`` and ``skin_friction_coefficient``) integrates
them the same way with a dynamic pressure of 1: ``C = sum (-cp n + cf) A . e / A_ref``.

A_ref: DrivAerML publishes each variant's frontal area (``geo_ref_<i>.csv``, aRef) and its force
coefficients with it (``force_mom_<i>.csv``); predict.py takes a run's aRef when the run folder
has one (``forces.reference_area_per_run``), else the constant ``forces.reference_area``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from domino_pipeline.config import ForcesConfig, check_choice
from domino_pipeline.dataset_profile import NORMALS, WALL_SHEAR, DatasetConfig
from domino_pipeline.inputs.cell_geometry import polygon_vector_areas
from domino_pipeline.variables import VARIABLE_WIDTH


@dataclass(frozen=True)
class FreeStream:
    """The flow the coefficients refer to: its speed, its density, and whether the pressure and
    wall shear are kinematic (already divided by the density, as DrivAerML's are)."""

    velocity: float            # m/s
    density: float             # kg/m^3; unused when kinematic
    kinematic: bool = True

    def __post_init__(self) -> None:
        if not (self.velocity > 0 and self.density > 0):
            raise ValueError(f"dataset.flow.velocity and density must be positive, not "
                             f"{self.velocity} and {self.density}")

    @property
    def dynamic_pressure(self) -> float:
        """0.5 rho_inf U_inf^2 in the fields' units (rho_inf = 1 for kinematic fields)."""
        return 0.5 * (1.0 if self.kinematic else self.density) * self.velocity**2


@dataclass(frozen=True)
class ForceConvention:
    """Which way a data set's surface normals point, and on what its wall shear stress acts."""

    normals: str = "into_body"   # DrivAerML (OpenFOAM): into the car
    wall_shear: str = "on_fluid"  # DrivAerML (OpenFOAM wallShearStress): the stress on the fluid

    def __post_init__(self) -> None:
        check_choice("dataset.flow.normals", self.normals, NORMALS)
        check_choice("dataset.flow.wall_shear", self.wall_shear, WALL_SHEAR)

    @property
    def outward_sign(self) -> float:
        """+1 when the normals point out of the car, -1 when into it."""
        return 1.0 if self.normals == "out_of_body" else -1.0

    @property
    def shear_on_body_sign(self) -> float:
        """+1 when the wall shear is the stress on the car, -1 when on the fluid."""
        return 1.0 if self.wall_shear == "on_body" else -1.0


def surface_force(pressure: np.ndarray, wall_shear: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray,
                  convention: ForceConvention) -> np.ndarray:
    """The force on the car (3,), in the units of pressure x area, summed in float64.

    ``pressure`` (N,), ``wall_shear`` (N, 3), ``vector_areas`` (N, 3): each cell's area times its
    unit normal (oriented as ``convention.normals`` says), ``areas`` (N,).
    """
    pressure, areas = np.asarray(pressure, np.float64), np.asarray(areas, np.float64)
    vector_areas, wall_shear = np.asarray(vector_areas, np.float64), np.asarray(wall_shear, np.float64)
    if not (pressure.shape == areas.shape == vector_areas.shape[:1] == wall_shear.shape[:1]) or vector_areas.shape[1:] != (3,):
        raise ValueError(f"surface_force: pressure {pressure.shape}, wall_shear {wall_shear.shape}, vector areas "
                         f"{vector_areas.shape} and areas {areas.shape} must describe the same N cells")
    outward = convention.outward_sign * vector_areas
    shear_on_body = convention.shear_on_body_sign * wall_shear
    return (-pressure[:, None] * outward + shear_on_body * areas[:, None]).sum(axis=0)


def force_coefficients(pressure: np.ndarray, wall_shear: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray, *,
                       reference_area: float, dynamic_pressure: float, convention: ForceConvention,
                       drag_direction: Sequence[float] = (1.0, 0.0, 0.0),
                       lift_direction: Sequence[float] = (0.0, 0.0, 1.0)) -> dict[str, float]:
    """``{"cd", "cl"}``: F.e / (dynamic_pressure A_ref), with ``dynamic_pressure`` (0.5 rho U^2)
    in the units of ``pressure``."""
    if reference_area <= 0:
        raise ValueError(f"the reference area must be positive, not {reference_area}")
    force = surface_force(pressure, wall_shear, vector_areas, areas, convention)
    coefficient = 1.0 / (dynamic_pressure * reference_area)
    return {"cd": float(coefficient * force @ _unit(drag_direction)),
            "cl": float(coefficient * force @ _unit(lift_direction))}


def mesh_vector_areas(mesh) -> np.ndarray:
    """``cell_geometry.polygon_vector_areas`` (OpenFOAM's face area vectors) of a pyvista
    PolyData made of polygons only."""
    from vtkmodules.util.numpy_support import vtk_to_numpy

    if mesh.n_cells != mesh.GetPolys().GetNumberOfCells():
        raise ValueError(f"the surface mesh has {mesh.n_cells} cells of which only "
                         f"{mesh.GetPolys().GetNumberOfCells()} are polygons")
    polys = mesh.GetPolys()
    return polygon_vector_areas(np.asarray(mesh.points), vtk_to_numpy(polys.GetOffsetsArray()).astype(np.int64),
                                vtk_to_numpy(polys.GetConnectivityArray()).astype(np.int64))


def _unit(direction: Sequence[float]) -> np.ndarray:
    vector = np.asarray(direction, dtype=np.float64)
    if vector.shape != (3,) or not np.linalg.norm(vector) > 0:
        raise ValueError(f"a force direction needs 3 values, not all zero; got {list(direction)}")
    return vector / np.linalg.norm(vector)


# The surface roles integrated into forces: physical stresses, or coefficients (q = 1)
STRESS_ROLES = ("pressure", "wall_shear_stress")
COEFFICIENT_ROLES = ("pressure_coefficient", "skin_friction_coefficient")


@dataclass(frozen=True)
class ForceSettings:
    """How predict.py integrates drag and lift: the dataset profile's flow (conventions, free
    stream, directions), which surface variables are the pressure and the wall shear (the fields
    playing those roles; or the pressure and skin friction coefficients, ``fields_are_coefficients``),
    the constant reference area, and whether a run's own one is preferred."""

    reference_area: float
    convention: ForceConvention
    free_stream: FreeStream
    pressure: str
    wall_shear_stress: str
    reference_area_per_run: bool = True  # a run's own reference area, where it has one
    drag_direction: tuple[float, float, float] = (1.0, 0.0, 0.0)
    lift_direction: tuple[float, float, float] = (0.0, 0.0, 1.0)
    fields_are_coefficients: bool = False  # pressure and wall shear are cp and cf: the dynamic pressure is 1

    @classmethod
    def from_config(cls, forces: ForcesConfig, dataset: DatasetConfig) -> ForceSettings:
        """The settings of the ``forces`` section and the ``dataset`` profile: its surface fields
        playing the roles pressure and wall_shear_stress, or else pressure_coefficient and
        skin_friction_coefficient. A profile whose flow speed comes from each run's files
        (``dataset.flow.velocity: null``) takes 1 m/s until a run gives its own."""
        flow = dataset.flow
        free_stream = FreeStream(velocity=flow.velocity or 1.0, density=flow.density, kinematic=flow.kinematic)
        coefficients = not all(dataset.has_field("surface", role) for role in STRESS_ROLES) and all(
            dataset.has_field("surface", role) for role in COEFFICIENT_ROLES)
        pressure, shear = COEFFICIENT_ROLES if coefficients else STRESS_ROLES
        return cls(reference_area=dataset.references.area, reference_area_per_run=forces.reference_area_per_run,
                   convention=ForceConvention(normals=flow.normals, wall_shear=flow.wall_shear),
                   free_stream=free_stream, pressure=dataset.field("surface", pressure),
                   wall_shear_stress=dataset.field("surface", shear), fields_are_coefficients=coefficients,
                   drag_direction=tuple(flow.drag_direction), lift_direction=tuple(flow.lift_direction))

    @property
    def dynamic_pressure(self) -> float:
        """What the integrated force is divided by besides A_ref: 0.5 rho U^2 in the fields'
        units, or 1 for coefficient fields."""
        return 1.0 if self.fields_are_coefficients else self.free_stream.dynamic_pressure

    def columns(self, variables: dict[str, str]) -> tuple[int, slice]:
        """The column of the pressure and the columns of the wall shear in the surface fields."""
        starts, start = {}, 0
        for name, kind in variables.items():
            starts[name] = (start, kind)
            start += VARIABLE_WIDTH[kind]
        for name, kind in ((self.pressure, "scalar"), (self.wall_shear_stress, "vector")):
            if starts.get(name, (0, None))[1] != kind:
                raise ValueError(f"forces: {name!r} must be a {kind} surface variable; the surface variables are "
                                 f"{variables} (dataset.fields.surface)")
        first = starts[self.wall_shear_stress][0]
        return starts[self.pressure][0], slice(first, first + 3)

    def area_for(self, run_reference_area: float | None) -> float:
        """The reference area of a run whose own (geo_ref) area is ``run_reference_area``."""
        return run_reference_area if self.reference_area_per_run and run_reference_area else self.reference_area

    def coefficients(self, fields: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray,
                     variables: dict[str, str], reference_area: float) -> dict[str, float]:
        """``{"cd", "cl"}`` of physical surface fields (N, C), in the source files' units, on cells
        with these vector areas and areas."""
        pressure, shear = self.columns(variables)
        return force_coefficients(fields[:, pressure], fields[:, shear], vector_areas, areas,
                                  reference_area=reference_area, dynamic_pressure=self.dynamic_pressure,
                                  convention=self.convention, drag_direction=self.drag_direction,
                                  lift_direction=self.lift_direction)
