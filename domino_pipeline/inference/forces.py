"""Force and moment coefficients from surface pressure and wall shear, integrated over the cells: the formulas
(OpenFOAM's forceCoeffs), conventions and references are in docs/predict.md, "Force and moment coefficients"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from domino_pipeline.configuration.config import ForcesConfig
from domino_pipeline.configuration.dataset_profile import COEFFICIENTS, DatasetConfig
from domino_pipeline.configuration.force_integration import ForceConvention, FreeStream, cell_arrays, coefficients_of_force, unit
from domino_pipeline.inputs.meshes.cell_geometry import polygon_vector_areas
from domino_pipeline.inputs.processing.published_forces import Published, References, constant_references
from domino_pipeline.inference.report import split_columns


def cell_forces(pressure: np.ndarray, wall_shear: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray,
                convention: ForceConvention) -> np.ndarray:
    """The force on the body of each cell (N, 3), float64, normals oriented as ``convention.normals`` says."""
    pressure, wall_shear, vector_areas, areas = cell_arrays(pressure, wall_shear, vector_areas, areas,
                                                            "the force integration")
    return convention.force(pressure[:, None] * vector_areas, wall_shear * areas[:, None])


@dataclass(frozen=True)
class Loads:
    """The force on a body (3,) and its moment about the origin (3,), float64."""

    force: np.ndarray
    moment: np.ndarray


def surface_loads(pressure: np.ndarray, wall_shear: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray,
                  centres: np.ndarray, convention: ForceConvention) -> Loads:
    """The force and moment (about the origin) of cells with ``centres`` (N, 3) (``cell_forces``)."""
    forces = cell_forces(pressure, wall_shear, vector_areas, areas, convention)
    centres = np.asarray(centres, dtype=np.float64)
    if centres.shape != forces.shape:
        raise ValueError(f"surface_loads: centres {centres.shape} for {len(forces)} cells")
    return Loads(forces.sum(axis=0), np.cross(centres, forces).sum(axis=0))


@dataclass(frozen=True)
class Directions:
    """The drag, lift and side directions of the coefficients; side None: lift x drag, as OpenFOAM's."""

    drag: tuple[float, float, float] = (1.0, 0.0, 0.0)
    lift: tuple[float, float, float] = (0.0, 0.0, 1.0)
    side: tuple[float, float, float] | None = None

    def axes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit (drag, side, lift) vectors."""
        drag, lift = unit(self.drag), unit(self.lift)
        return drag, unit(np.cross(lift, drag) if self.side is None else self.side), lift


def coefficients(loads: Loads, references: References, dynamic_pressure: float,
                 directions: Directions = Directions()) -> dict[str, float]:
    """Every coefficient of ``loads`` over ``references``, ``dynamic_pressure`` in the loads' pressure units."""
    if not (references.area > 0 and references.length > 0):
        raise ValueError(f"the reference area and length must be positive, not {references.area} and "
                         f"{references.length}")
    drag, side, lift = directions.axes()
    per_force = 1.0 / (dynamic_pressure * references.area)
    per_moment = per_force / references.length
    moment = loads.moment - np.cross(np.asarray(references.centre, dtype=np.float64), loads.force)  # M_c = M_0 - c x F
    values = {"cd": loads.force @ drag * per_force, "cs": loads.force @ side * per_force,
              "cl": loads.force @ lift * per_force, "cm_roll": moment @ drag * per_moment,
              "cm_pitch": moment @ side * per_moment, "cm_yaw": moment @ lift * per_moment}
    values |= {"clf": 0.5 * values["cl"] + values["cm_pitch"], "clr": 0.5 * values["cl"] - values["cm_pitch"]}
    return {name: float(values[name]) for name in COEFFICIENTS}


def force_coefficients(pressure: np.ndarray, wall_shear: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray, *,
                       reference_area: float, dynamic_pressure: float, convention: ForceConvention,
                       drag_direction: Sequence[float] = (1.0, 0.0, 0.0),
                       lift_direction: Sequence[float] = (0.0, 0.0, 1.0)) -> dict[str, float]:
    """``{"cd", "cl"}`` alone (no moments: no cell centres needed): F.e / (dynamic_pressure A_ref),
    with ``dynamic_pressure`` (0.5 rho U^2) in the units of ``pressure``."""
    return coefficients_of_force(cell_forces(pressure, wall_shear, vector_areas, areas, convention).sum(axis=0),
                                 reference_area=reference_area, dynamic_pressure=dynamic_pressure,
                                 drag_direction=drag_direction, lift_direction=lift_direction)


def mesh_vector_areas(mesh) -> np.ndarray:
    """OpenFOAM's face area vectors (``polygon_vector_areas``) of a pyvista PolyData of polygons only."""
    from vtkmodules.util.numpy_support import vtk_to_numpy

    if mesh.n_cells != mesh.GetPolys().GetNumberOfCells():
        raise ValueError(f"the surface mesh has {mesh.n_cells} cells of which only "
                         f"{mesh.GetPolys().GetNumberOfCells()} are polygons")
    polys = mesh.GetPolys()
    return polygon_vector_areas(np.asarray(mesh.points), vtk_to_numpy(polys.GetOffsetsArray()).astype(np.int64),
                                vtk_to_numpy(polys.GetConnectivityArray()).astype(np.int64))


@dataclass(frozen=True)
class ReferenceSet:
    """The references of one set of a run's coefficients, and the published ones over them (or None)."""

    references: References
    published: dict[str, float] | None


# The surface roles integrated into forces: physical stresses, or coefficients (q = 1)
STRESS_ROLES = ("pressure", "wall_shear_stress")
COEFFICIENT_ROLES = ("pressure_coefficient", "skin_friction_coefficient")


@dataclass(frozen=True)
class ForceSettings:
    """How predict.py integrates coefficients: flow, force variables (or cp and cf), references, whose are preferred."""

    constant_references: References
    convention: ForceConvention
    pressure: str
    wall_shear_stress: str
    velocity: float | None = None        # m/s; None: each run's own (its references file)
    density: float = 1.0                 # kg/m^3; unused when kinematic
    kinematic: bool = True
    reference_area_per_run: bool = True  # a run's own references, where it has them
    directions: Directions = Directions()
    fields_are_coefficients: bool = False  # pressure and wall shear are cp and cf: the dynamic pressure is 1

    @classmethod
    def from_config(cls, forces: ForcesConfig, dataset: DatasetConfig) -> ForceSettings:
        """The settings of the ``forces`` section and the ``dataset`` profile's flow and force fields."""
        flow = dataset.flow
        coefficient_fields = not all(dataset.has_field("surface", role) for role in STRESS_ROLES) and all(
            dataset.has_field("surface", role) for role in COEFFICIENT_ROLES)
        pressure, shear = COEFFICIENT_ROLES if coefficient_fields else STRESS_ROLES
        return cls(constant_references=constant_references(dataset.references),
                   convention=ForceConvention(normals=flow.normals, wall_shear=flow.wall_shear),
                   pressure=dataset.field("surface", pressure), wall_shear_stress=dataset.field("surface", shear),
                   velocity=flow.velocity, density=flow.density, kinematic=flow.kinematic,
                   reference_area_per_run=forces.reference_area_per_run,
                   directions=Directions(tuple(flow.drag_direction), tuple(flow.lift_direction),
                                         tuple(flow.side_direction)), fields_are_coefficients=coefficient_fields)

    def free_stream(self, published: Published | None) -> FreeStream | None:
        """The free stream of a run: the profile's speed, else the run's published one (None: neither)."""
        velocity = self.velocity if self.velocity is not None else (published.velocity if published else None)
        return None if velocity is None else FreeStream(velocity, self.density, self.kinematic)

    def reference_sets(self, published: Published | None) -> dict[str, ReferenceSet]:
        """``own`` (the run's references where preferred and present, else the constant ones) and ``constant``."""
        constant = (ReferenceSet(self.constant_references, None) if published is None
                    else ReferenceSet(published.constant_references, published.constant))
        if published is not None and self.reference_area_per_run and published.own_references is not None:
            return {"own": ReferenceSet(published.own_references, published.own), "constant": constant}
        return {"own": constant, "constant": constant}

    def loads(self, fields: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray, centres: np.ndarray,
              variables: dict[str, str]) -> Loads:
        """The force and moment of physical surface fields (N, C) on cells of these areas and centres."""
        for name, kind in ((self.pressure, "scalar"), (self.wall_shear_stress, "vector")):
            if variables.get(name) != kind:
                raise ValueError(f"forces: {name!r} must be a {kind} surface variable; the surface variables are "
                                 f"{variables} (dataset.fields.surface)")
        columns = split_columns(fields, variables)
        return surface_loads(columns[self.pressure], columns[self.wall_shear_stress], vector_areas, areas, centres,
                             self.convention)

    def coefficients(self, loads: Loads, references: References, free_stream: FreeStream) -> dict[str, float]:
        """Every coefficient of ``loads`` over ``references`` in ``free_stream`` (q = 1 for coefficient fields)."""
        dynamic_pressure = 1.0 if self.fields_are_coefficients else free_stream.dynamic_pressure
        return coefficients(loads, references, dynamic_pressure, self.directions)
