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
DrivAerML's boundary VTPs are OpenFOAM boundary output, whose face normals point out of the fluid
domain, i.e. into the car, and whose ``wallShearStress`` is the stress on the fluid; there
``F = sum (p n - tau) A``, the formula of physicsnemo's DoMINO example (test.py) and of
``physicsnemo.metrics.cae.cfd.compute_force_coefficients``. The synthetic runs of
synthetic_data.py have normals out of the car and the shear on the car.

A_ref: DrivAerML publishes each variant's frontal area (``geo_ref_<i>.csv``, aRef) and its force
coefficients with it (``force_mom_<i>.csv``); predict.py takes a run's aRef when the run folder
has one (``forces.reference_area_per_run``), else the constant ``forces.reference_area``.

The integration itself (``FreeStream``, ``ForceConvention``, ``surface_force``,
``force_coefficients``) lives in domino_pipeline/force_integration.py, which process_data.py's
per-run statistics use too; this module adds predict.py's settings and mesh helpers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domino_pipeline.config import ForcesConfig
from domino_pipeline.dataset_profile import DatasetConfig
from domino_pipeline.force_integration import (  # noqa: F401 (the integration, re-exported)
    ForceConvention,
    FreeStream,
    force_coefficients,
    surface_force,
)
from domino_pipeline.inputs.cell_geometry import polygon_vector_areas


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


@dataclass(frozen=True)
class ForceSettings:
    """How predict.py integrates drag and lift: the dataset profile's flow (conventions, free
    stream, directions), which surface variables are the pressure and the wall shear (the fields
    playing those roles), the constant reference area, and whether a run's own one is preferred."""

    reference_area: float
    convention: ForceConvention
    free_stream: FreeStream
    pressure: str
    wall_shear_stress: str
    reference_area_per_run: bool = True  # a run's own reference area, where it has one
    drag_direction: tuple[float, float, float] = (1.0, 0.0, 0.0)
    lift_direction: tuple[float, float, float] = (0.0, 0.0, 1.0)

    @classmethod
    def from_config(cls, forces: ForcesConfig, dataset: DatasetConfig) -> ForceSettings:
        """The settings of the ``forces`` section and the ``dataset`` profile. A profile whose flow
        speed comes from each run's files (``dataset.flow.velocity: null``) takes 1 m/s until a run
        gives its own."""
        flow = dataset.flow
        free_stream = FreeStream(velocity=flow.velocity or 1.0, density=flow.density, kinematic=flow.kinematic)
        return cls(reference_area=dataset.references.area, reference_area_per_run=forces.reference_area_per_run,
                   convention=ForceConvention(normals=flow.normals, wall_shear=flow.wall_shear),
                   free_stream=free_stream, pressure=dataset.field("surface", "pressure"),
                   wall_shear_stress=dataset.field("surface", "wall_shear_stress"),
                   drag_direction=tuple(flow.drag_direction), lift_direction=tuple(flow.lift_direction))

    def columns(self, variables: dict[str, str]) -> tuple[int, slice]:
        """The column of the pressure and the columns of the wall shear in the surface fields."""
        starts, start = {}, 0
        for name, kind in variables.items():
            starts[name] = (start, kind)
            start += 1 if kind == "scalar" else 3
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
                                  reference_area=reference_area, dynamic_pressure=self.free_stream.dynamic_pressure,
                                  convention=self.convention, drag_direction=self.drag_direction,
                                  lift_direction=self.lift_direction)
