"""Check the committed OpenFOAM fixture with VTK alone and print what it measures.

For each tests/data/openfoam/run_*/ folder:
- cells of internal.vtu by VTK cell type (42 = polyhedron, kept whole by foamToVTK);
- boundary.vtp faces by vertex count and how far faces with 4+ / 5+ vertices are from planar;
- total boundary area: VTK's compute_cell_sizes (sum of triangle areas of a triangulation)
  versus OpenFOAM's face area |0.5 * sum p_i x p_i+1|, and OpenFOAM's own total printed by
  surfaceFieldValue (reference/openfoam_reference.txt);
- force coefficients integrated from the face values p and wallShearStress of boundary.vtp,
  F = sum(p Sf - wallShearStress |Sf|) with Sf pointing out of the fluid (into the body), as
  OpenFOAM's forces function object does, against the last line of coefficient.dat;
- cell centres rebuilt from internal.vtu with OpenFOAM's pyramid decomposition, against
  reference/cell_centers.npy (postProcess -func writeCellCentres), relative to the cell size.
Usage: python check_fixture.py [FIXTURE_DIR]   (default tests/data/openfoam)
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import numpy as np
import pyvista as pv
import vtk

COEFFS = ("Cd", "Cs", "Cl", "CmRoll", "CmPitch", "CmYaw", "Cd(f)", "Cd(r)", "Cs(f)", "Cs(r)",
          "Cl(f)", "Cl(r)")


def read_coefficients(path: Path) -> tuple[dict[str, object], dict[str, float]]:
    """Header entries (vectors as arrays) and the last row of a v1912 coefficient.dat."""
    header: dict[str, object] = {}
    names: list[str] = []
    last: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("# Time"):
            names = line[1:].split()
        elif line.startswith("#") and ":" in line:
            key, value = (s.strip() for s in line[1:].split(":", 1))
            nums = [float(x) for x in value.strip("()").split()]
            header[key] = np.array(nums) if value.startswith("(") else nums[0]
        elif line.strip():
            last = line.split()
    return header, {n: float(v) for n, v in zip(names, last)}


def polygons(mesh: pv.PolyData) -> list[np.ndarray]:
    """Point-id arrays of each polygon of a PolyData (any vertex count)."""
    faces = mesh.faces
    out, i = [], 0
    while i < len(faces):
        n = faces[i]
        out.append(faces[i + 1:i + 1 + n])
        i += n + 1
    return out


def face_geometry(pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OpenFOAM's face area vector and centre (triangles about the vertex average)."""
    if len(pts) == 3:
        return 0.5 * np.cross(pts[1] - pts[0], pts[2] - pts[0]), pts.mean(axis=0)
    centre = pts.mean(axis=0)
    nxt = np.roll(pts, -1, axis=0)
    n = np.cross(nxt - pts, centre - pts)
    a = np.linalg.norm(n, axis=1)
    c = pts + nxt + centre
    return 0.5 * n.sum(axis=0), (a[:, None] * c).sum(axis=0) / (3.0 * a.sum())


def boundary_report(mesh: pv.PolyData) -> tuple[np.ndarray, np.ndarray]:
    """Print face statistics and areas; return OpenFOAM face area vectors and centres."""
    pts = mesh.points.astype(np.float64)
    polys = polygons(mesh)
    sizes = collections.Counter(len(p) for p in polys)
    print(f"  boundary.vtp: {mesh.n_cells} faces, {mesh.n_points} points; faces by vertex count "
          f"{dict(sorted(sizes.items()))}")
    sf = np.empty((len(polys), 3))
    cf = np.empty((len(polys), 3))
    warp = np.zeros(len(polys))
    for k, ids in enumerate(polys):
        p = pts[ids]
        sf[k], cf[k] = face_geometry(p)
        if len(ids) > 3:
            normal = sf[k] / np.linalg.norm(sf[k])
            warp[k] = np.abs((p - cf[k]) @ normal).max() / np.sqrt(np.linalg.norm(sf[k]))
    nverts = np.array([len(p) for p in polys])
    for lo in (4, 5):
        w = warp[nverts >= lo]
        print(f"  faces with {lo}+ vertices: {w.size}; out-of-plane distance / sqrt(area): "
              f"max {w.max():.3e}, 99th pct {np.percentile(w, 99):.3e}, median {np.median(w):.3e}, "
              f"> 1e-3: {(w > 1e-3).sum()}")
    vtk_area = mesh.compute_cell_sizes(length=False, volume=False).cell_data["Area"].astype(float)
    foam_area = np.linalg.norm(sf, axis=1)
    print(f"  total area: VTK compute_cell_sizes {vtk_area.sum():.9g}, vector area "
          f"{foam_area.sum():.9g} (relative difference {vtk_area.sum() / foam_area.sum() - 1:.3e}; "
          f"largest per face {np.max(vtk_area / foam_area - 1):.3e})")
    return sf, cf


def openfoam_areas(text: str) -> dict[str, float]:
    """Patch areas surfaceFieldValue printed ('areaIntegrate_<patch> ... total area = A')."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r"surfaceFieldValue areaIntegrate_(\S+) write:\n\s+total faces\s+=\s+\d+\n"
        r"\s+total area\s+=\s+(\S+)", text)}


def coefficients(force: np.ndarray, moment: np.ndarray, header: dict[str, object]) -> dict[str, float]:
    """forceCoeffs' definitions (v1912) applied to a total force and moment about CofR."""
    q = 0.5 * header["magUInf"] ** 2 * header["Aref"]  # rhoInf = 1
    ql = q * header["lRef"]
    c = {"Cd": force @ header["dragDir"] / q, "Cs": force @ header["sideDir"] / q,
         "Cl": force @ header["liftDir"] / q, "CmRoll": moment @ header["rollAxis"] / ql,
         "CmPitch": moment @ header["pitchAxis"] / ql, "CmYaw": moment @ header["yawAxis"] / ql}
    for f, m in (("Cd", "CmRoll"), ("Cs", "CmYaw"), ("Cl", "CmPitch")):
        c[f"{f}(f)"] = 0.5 * c[f] + c[m]
        c[f"{f}(r)"] = 0.5 * c[f] - c[m]
    return c


def force_report(mesh: pv.PolyData, sf: np.ndarray, cf: np.ndarray, coeff_path: Path) -> None:
    """Integrate the coefficients from the face values and compare with coefficient.dat."""
    header, ref = read_coefficients(coeff_path)
    p = mesh.cell_data["p"].astype(float)
    tau = mesh.cell_data["wallShearStress"].astype(float)
    f_face = p[:, None] * sf - tau * np.linalg.norm(sf, axis=1)[:, None]
    cofr = header["CofR"]
    ours = coefficients(f_face.sum(0), np.cross(cf - cofr, f_face).sum(0), header)
    centroid = np.array([mesh.points[ids].astype(float).mean(0) for ids in polygons(mesh)])
    vertex_avg = coefficients(f_face.sum(0), np.cross(centroid - cofr, f_face).sum(0), header)
    normals = mesh.compute_normals(cell_normals=True, point_normals=False, auto_orient_normals=False,
                                   consistent_normals=False, split_vertices=False).cell_data["Normals"]
    area = mesh.compute_cell_sizes(length=False, volume=False).cell_data["Area"].astype(float)
    sf_vtk = normals.astype(float) * area[:, None]
    f_vtk = p[:, None] * sf_vtk - tau * area[:, None]
    vtk_based = coefficients(f_vtk.sum(0), np.cross(centroid - cofr, f_vtk).sum(0), header)
    print(f"  coefficients at time {ref['Time']:g}: name, coefficient.dat, from boundary.vtp "
          "(OpenFOAM face areas and centres), relative error; same with vertex-average centres; "
          "with VTK normals x compute_cell_sizes areas")
    for name in COEFFS:
        r = ref[name]
        print(f"    {name:8s} {r: .9e} {ours[name]: .9e} {ours[name] / r - 1: .2e}   "
              f"{vertex_avg[name] / r - 1: .2e}   {vtk_based[name] / r - 1: .2e}")


def cell_faces(grid: vtk.vtkUnstructuredGrid, i: int) -> list[list[int]]:
    """Point ids of each face of cell i, as VTK orders them (outward for standard cells)."""
    cell = grid.GetCell(i)
    faces = []
    for j in range(cell.GetNumberOfFaces()):
        ids = cell.GetFace(j).GetPointIds()
        faces.append([ids.GetId(k) for k in range(ids.GetNumberOfIds())])
    return faces


def cell_centre(pts: np.ndarray, faces: list[list[int]]) -> tuple[np.ndarray, float]:
    """OpenFOAM's cell centre and volume: pyramids from each face to the mean face centre."""
    geo = [face_geometry(pts[f]) for f in faces]
    sf = np.array([g[0] for g in geo])
    cf = np.array([g[1] for g in geo])
    est = cf.mean(axis=0)
    vol3 = np.einsum("ij,ij->i", sf, cf - est)
    if vol3.sum() < 0.0:
        vol3 = -vol3  # faces listed inward: flip all (consistent orientation assumed)
    centre = ((0.75 * cf + 0.25 * est) * vol3[:, None]).sum(0) / vol3.sum()
    return centre, vol3.sum() / 3.0


def centres_report(grid: pv.UnstructuredGrid, reference: np.ndarray, text: str) -> None:
    """Rebuild every cell centre from internal.vtu and compare with OpenFOAM's C."""
    pts = grid.points.astype(np.float64)
    centres = np.empty((grid.n_cells, 3))
    vols = np.empty(grid.n_cells)
    for i in range(grid.n_cells):
        centres[i], vols[i] = cell_centre(pts, cell_faces(grid, i))
    size = np.cbrt(np.abs(vols))
    err = np.linalg.norm(centres - reference, axis=1) / size
    poly = grid.celltypes == 42
    print(f"  cell centres vs reference/cell_centers.npy ({len(reference)} cells): |dC| / cell size "
          f"max {err.max():.2e} (polyhedra {err[poly].max():.2e}, others {err[~poly].max():.2e}), "
          f"mean {err.mean():.2e}")
    vtk_centres = grid.cell_centers().points.astype(float)
    err_vtk = np.linalg.norm(vtk_centres - reference, axis=1) / size
    print(f"  (VTK cell_centers, for contrast: max {err_vtk.max():.2e}, polyhedra "
          f"{err_vtk[poly].max():.2e})")
    total = re.search(r"Total volume = (\S+)\.\s", text)
    print(f"  total volume: pyramids {vols.sum():.9g}, checkMesh {total.group(1) if total else '?'}")


def check_run(run: Path) -> None:
    """Print every check of one run folder."""
    print(run)
    text = (run / "reference/openfoam_reference.txt").read_text()
    grid = pv.read(run / "internal.vtu")
    types = collections.Counter(grid.celltypes.tolist())
    print(f"  internal.vtu: {grid.n_cells} cells, {grid.n_points} points; cells by VTK type "
          f"{dict(sorted(types.items()))}; cell data {list(grid.cell_data)}, point data "
          f"{list(grid.point_data)}")
    boundary = pv.read(run / "boundary.vtp")
    print(f"  boundary.vtp: cell data {list(boundary.cell_data)}, point data {list(boundary.point_data)}")
    sf, cf = boundary_report(boundary)
    areas = openfoam_areas(text)
    total = sum(areas.values())
    print(f"  OpenFOAM patch areas {areas}: total {total:.12g}; vector area / OpenFOAM - 1 = "
          f"{np.linalg.norm(sf, axis=1).sum() / total - 1:.3e}")
    force_report(boundary, sf, cf, run / "coefficient.dat")
    centres_report(grid, np.load(run / "reference/cell_centers.npy"), text)
    stl = pv.read(run / "body.stl")
    print(f"  body.stl: {stl.n_cells} triangles, {stl.n_points} points, bounds "
          f"{np.round(stl.bounds, 4).tolist()}")


def main() -> None:
    """Check every run folder of the fixture."""
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/data/openfoam")
    for run in sorted(root.glob("run_*")):
        check_run(run)


if __name__ == "__main__":
    main()
