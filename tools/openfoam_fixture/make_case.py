"""Write a small OpenFOAM case of a car-like body: STL surface and all case dictionaries.

The body is a closed superellipse loft (rounded nose, blunt tail, cabin bump) over a ground
plane z = 0, flow along +x.  The case meshes with blockMesh + snappyHexMesh and solves steady
incompressible RANS (simpleFoam, kOmegaSST) with forceCoeffs and wallShearStress function
objects.  Usage: python make_case.py CASE_DIR --variant 1|2
"""

from __future__ import annotations

import argparse
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER = """/*--------------------------------*- C++ -*----------------------------------*\\
| =========                 |                                                 |
| \\\\      /  F ield         | OpenFOAM: The Open Source CFD Toolbox           |
|  \\\\    /   O peration     | Version:  v1912                                 |
|   \\\\  /    A nd           | Website:  www.openfoam.com                      |
|    \\\\/     M anipulation  |                                                 |
\\*---------------------------------------------------------------------------*/
FoamFile
{{
    version     2.0;
    format      ascii;
    class       {cls};
    object      {obj};
}}
// * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * //
"""


@dataclass(frozen=True)
class Variant:
    """Body shape, mesh resolution and run length of one case (the fixture's two variants, and
    each body of tools/openfoam_family). ``cabin_exponent``: the cabin bump's profile
    sin(pi t) ** cabin_exponent (small: a boxy cabin with steep screens, 1: a round one);
    ``cabin_peak``: where the roof is highest, as a fraction of the cabin (below 0.5 a short
    steep windscreen and a long rear slant); ``underside_lift``: how far the underside rises towards nose and tail (m);
    ``layers``: prism layers snappyHexMesh adds on the body (0: none, the fixture's and family's mesh);
    ``nu``: kinematic viscosity (m^2/s); ``turbulence``: the RAS model, or "laminar" (no model)."""

    x_nose: float
    length: float
    width: float
    z_bottom: float
    z_belt: float
    z_roof: float
    cabin_start: float
    cabin_end: float
    nose_exponent: float
    tail_exponent: float
    section_exponent: float
    n_along: int
    n_around: int
    base_cells: tuple[int, int, int]
    surface_levels: tuple[int, int]
    box_level: int
    end_time: int
    cabin_exponent: float = 0.6
    underside_lift: float = 0.25
    cabin_peak: float = 0.5
    layers: int = 0
    nu: float = 1.5e-5
    turbulence: str = "kOmegaSST"


VARIANTS = {
    1: Variant(x_nose=-0.8, length=4.0, width=1.8, z_bottom=0.15, z_belt=0.85, z_roof=1.35,
               cabin_start=0.30, cabin_end=0.80, nose_exponent=2.5, tail_exponent=6.0,
               section_exponent=4.0, n_along=60, n_around=48, base_cells=(48, 20, 12),
               surface_levels=(2, 3), box_level=1, end_time=300),
    2: Variant(x_nose=-0.7, length=3.6, width=1.7, z_bottom=0.17, z_belt=0.80, z_roof=1.30,
               cabin_start=0.25, cabin_end=0.92, nose_exponent=2.0, tail_exponent=10.0,
               section_exponent=5.0, n_along=48, n_around=40, base_cells=(28, 12, 7),
               surface_levels=(2, 3), box_level=1, end_time=300),
}

DOMAIN_MIN = (-8.0, -5.0, 0.0)
DOMAIN_MAX = (16.0, 5.0, 6.0)
U_INF = 38.889
PATCHES = ("body_upper", "body_lower")


def _envelope(s: np.ndarray, v: Variant) -> np.ndarray:
    """Planform factor in [0, 1]: 0 at nose and tail, rounder at the nose than at the tail."""
    front = np.clip(1.0 - np.abs(1.0 - 2.0 * s) ** v.nose_exponent, 0.0, None) ** (1.0 / v.nose_exponent)
    rear = np.clip(1.0 - np.abs(2.0 * s - 1.0) ** v.tail_exponent, 0.0, None) ** (1.0 / v.tail_exponent)
    return np.where(s < 0.5, front, rear)


def _roof(s: np.ndarray, v: Variant) -> np.ndarray:
    """Top height along the body: belt line plus a smooth cabin bump."""
    t = np.clip((s - v.cabin_start) / (v.cabin_end - v.cabin_start), 0.0, 1.0)
    a = v.cabin_peak  # t = a maps to 0.5; a = 0.5 leaves t unchanged, bit for bit
    t = np.where(t < a, 0.5 * t / a, 0.5 + 0.5 * (t - a) / (1.0 - a))
    return v.z_belt + (v.z_roof - v.z_belt) * np.sin(math.pi * t) ** v.cabin_exponent


def body_triangles(v: Variant) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Closed, outward-oriented triangulation of the body: (points, triangles, region ids).

    Region 0 is the upper half of each cross-section (body_upper), region 1 the lower half.
    """
    s = 0.5 * (1.0 - np.cos(np.linspace(0.0, math.pi, v.n_along + 1)))[1:-1]
    env = _envelope(s, v)
    z_top = _roof(s, v)
    z_bot = v.z_bottom + v.underside_lift * (1.0 - env)  # underside lifts towards nose and tail
    zc = 0.5 * (z_top + z_bot)
    half_h = 0.5 * (z_top - z_bot) * env
    half_w = 0.5 * v.width * env
    theta = np.linspace(0.0, 2.0 * math.pi, v.n_around, endpoint=False)
    p = 2.0 / v.section_exponent
    cy = np.sign(np.cos(theta)) * np.abs(np.cos(theta)) ** p
    cz = np.sign(np.sin(theta)) * np.abs(np.sin(theta)) ** p
    x = v.x_nose + v.length * s
    rings = np.stack([
        np.repeat(x[:, None], v.n_around, axis=1),
        half_w[:, None] * cy[None, :],
        zc[:, None] + half_h[:, None] * cz[None, :],
    ], axis=-1).reshape(-1, 3)
    nose = np.array([[v.x_nose, 0.0, zc[0]]])
    tail = np.array([[v.x_nose + v.length, 0.0, zc[-1]]])
    points = np.concatenate([rings, nose, tail])
    i_nose, i_tail = len(rings), len(rings) + 1
    m = v.n_around
    tris, upper = [], []
    for j in range(m):
        k = (j + 1) % m
        on_top = bool(np.sin(theta[j]) + np.sin(theta[k]) > 0.0)
        tris.append((i_nose, k, j))
        upper.append(on_top)
        for i in range(len(s) - 1):
            a, b = i * m + j, i * m + k
            c, d = a + m, b + m
            tris += [(a, b, d), (a, d, c)]
            upper += [on_top, on_top]
        last = (len(s) - 1) * m
        tris.append((i_tail, last + j, last + k))
        upper.append(on_top)
    tris = np.asarray(tris, dtype=np.int64)
    regions = np.where(np.asarray(upper), 0, 1)
    _orient_outward(points, tris)
    return points, tris, regions


def _orient_outward(points: np.ndarray, tris: np.ndarray) -> None:
    """Flip all triangles in place if the enclosed signed volume is negative."""
    a, b, c = (points[tris[:, i]] for i in range(3))
    volume = np.einsum("ij,ij->", a, np.cross(b, c)) / 6.0
    if volume < 0.0:
        tris[:, [1, 2]] = tris[:, [2, 1]]


def write_ascii_stl(path: Path, points: np.ndarray, tris: np.ndarray, regions: np.ndarray) -> None:
    """Write one ASCII STL with one solid per region (snappyHexMesh makes one patch each)."""
    with path.open("w") as f:
        for r, name in enumerate(("upper", "lower")):
            f.write(f"solid {name}\n")
            for t in tris[regions == r]:
                a, b, c = points[t]
                n = np.cross(b - a, c - a)
                n /= np.linalg.norm(n)
                f.write(f"  facet normal {n[0]:.9e} {n[1]:.9e} {n[2]:.9e}\n    outer loop\n")
                for q in (a, b, c):
                    f.write(f"      vertex {q[0]:.9e} {q[1]:.9e} {q[2]:.9e}\n")
                f.write("    endloop\n  endfacet\n")
            f.write(f"endsolid {name}\n")


def write_binary_stl(path: Path, points: np.ndarray, tris: np.ndarray) -> None:
    """Write a single-solid binary STL of the same triangles (the fixture's geometry file)."""
    a, b, c = (points[tris[:, i]] for i in range(3))
    n = np.cross(b - a, c - a)
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    rec = np.zeros(len(tris), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    rec["n"] = n
    rec["v"] = np.stack([a, b, c], axis=1)
    with path.open("wb") as f:
        f.write(b"car-like body".ljust(80, b" "))
        f.write(struct.pack("<I", len(tris)))
        f.write(rec.tobytes())


def frontal_area(points: np.ndarray, tris: np.ndarray) -> float:
    """Projected area of the body on the y-z plane (half the sum of |n_x| * area)."""
    a, b, c = (points[tris[:, i]] for i in range(3))
    return 0.25 * float(np.abs(np.cross(b - a, c - a)[:, 0]).sum())


def _write(case: Path, rel: str, cls: str, body: str) -> None:
    path = case / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER.format(cls=cls, obj=path.name) + body)


def block_mesh_dict(v: Variant) -> str:
    """blockMeshDict of the tunnel box: inlet, outlet, ground (wall), top and sides (slip)."""
    (x0, y0, z0), (x1, y1, z1) = DOMAIN_MIN, DOMAIN_MAX
    nx, ny, nz = v.base_cells
    return f"""
scale 1;
vertices
(
    ({x0} {y0} {z0}) ({x1} {y0} {z0}) ({x1} {y1} {z0}) ({x0} {y1} {z0})
    ({x0} {y0} {z1}) ({x1} {y0} {z1}) ({x1} {y1} {z1}) ({x0} {y1} {z1})
);
blocks ( hex (0 1 2 3 4 5 6 7) ({nx} {ny} {nz}) simpleGrading (1 1 1) );
edges ();
boundary
(
    inlet  {{ type patch; faces ((0 4 7 3)); }}
    outlet {{ type patch; faces ((2 6 5 1)); }}
    ground {{ type wall;  faces ((0 3 2 1)); }}
    top    {{ type patch; faces ((4 5 6 7)); }}
    sides  {{ type patch; faces ((3 7 6 2) (1 5 4 0)); }}
);
"""


def snappy_dict(v: Variant) -> str:
    """snappyHexMeshDict: castellate and snap to the body (``v.layers`` prism layers on it), with a wake box."""
    lo, hi = v.surface_levels
    bx0, bx1 = v.x_nose - 1.0, v.x_nose + v.length + 4.0
    by = 0.5 * v.width + 1.0
    bz = v.z_roof + 0.8
    return f"""
castellatedMesh true;
snap            true;
addLayers       {"true" if v.layers else "false"};
geometry
{{
    body.stl
    {{
        type triSurfaceMesh;
        name body;
        regions {{ upper {{ name body_upper; }} lower {{ name body_lower; }} }}
    }}
    wakeBox {{ type searchableBox; min ({bx0} {-by} 0); max ({bx1} {by} {bz}); }}
}}
castellatedMeshControls
{{
    maxLocalCells 1000000;
    maxGlobalCells 2000000;
    minRefinementCells 0;
    maxLoadUnbalance 0.10;
    nCellsBetweenLevels 2;
    features ();
    refinementSurfaces
    {{
        body
        {{
            level ({lo} {hi});
            patchInfo {{ type wall; inGroups (bodyGroup); }}
        }}
    }}
    resolveFeatureAngle 30;
    refinementRegions {{ wakeBox {{ mode inside; levels ((1e15 {v.box_level})); }} }}
    locationInMesh (-5.0123 3.0123 4.0123);
    allowFreeStandingZoneFaces true;
}}
snapControls
{{
    nSmoothPatch 3;
    tolerance 2.0;
    nSolveIter 50;
    nRelaxIter 5;
    nFeatureSnapIter 10;
    implicitFeatureSnap true;
    explicitFeatureSnap false;
    multiRegionFeatureSnap false;
}}
addLayersControls
{{
    relativeSizes true;
    layers {{{f' "body.*" {{ nSurfaceLayers {v.layers}; }} ' if v.layers else ''}}}
    expansionRatio 1.0;
    finalLayerThickness 0.3;
    minThickness 0.1;
    nGrow 0;
    featureAngle 60;
    nRelaxIter 3;
    nSmoothSurfaceNormals 1;
    nSmoothNormals 3;
    nSmoothThickness 10;
    maxFaceThicknessRatio 0.5;
    maxThicknessToMedialRatio 0.3;
    minMedialAxisAngle 90;
    nBufferCellsNoExtrude 0;
    nLayerIter 50;
}}
meshQualityControls
{{
    #includeEtc "caseDicts/meshQualityDict"
    minFaceWeight 0.02;
    nSmoothScale 4;
    errorReduction 0.75;
}}
mergeTolerance 1e-6;
"""


def force_coeffs(v: Variant, aref: float) -> str:
    """forceCoeffs, wallShearStress and residuals function objects of the controlDict."""
    lref = 0.7 * v.length
    cofr = v.x_nose + 0.15 * v.length + 0.5 * lref
    return f"""
    forceCoeffs1
    {{
        type            forceCoeffs;
        libs            (forces);
        writeControl    timeStep;
        writeInterval   1;
        log             yes;
        patches         (bodyGroup);
        rho             rhoInf;
        rhoInf          1;
        liftDir         (0 0 1);
        dragDir         (1 0 0);
        CofR            ({cofr:.6g} 0 0);
        pitchAxis       (0 1 0);
        magUInf         {U_INF};
        lRef            {lref:.6g};
        Aref            {aref:.6g};
    }}
    forces1
    {{
        type            forces;
        libs            (forces);
        writeControl    writeTime;
        log             yes;
        patches         (bodyGroup);
        rho             rhoInf;
        rhoInf          1;
        CofR            ({cofr:.6g} 0 0);
    }}
    wallShearStress1
    {{
        type            wallShearStress;
        libs            (fieldFunctionObjects);
        patches         (bodyGroup);
        writeControl    writeTime;
    }}
"""


def control_dict(v: Variant, aref: float) -> str:
    """controlDict: simpleFoam, write only the final time, double-precision ascii fields."""
    return f"""
application     simpleFoam;
startFrom       startTime;
startTime       0;
stopAt          endTime;
endTime         {v.end_time};
deltaT          1;
writeControl    timeStep;
writeInterval   {v.end_time};
purgeWrite      0;
writeFormat     ascii;
writePrecision  12;
writeCompression off;
timeFormat      general;
timePrecision   6;
runTimeModifiable false;
functions
{{
{force_coeffs(v, aref)}
}}
"""


FV_SCHEMES = """
ddtSchemes { default steadyState; }
gradSchemes { default Gauss linear; grad(U) cellLimited Gauss linear 1; }
divSchemes
{
    default         none;
    div(phi,U)      bounded Gauss linearUpwindV grad(U);
    div(phi,k)      bounded Gauss upwind;
    div(phi,omega)  bounded Gauss upwind;
    div((nuEff*dev2(T(grad(U))))) Gauss linear;
}
laplacianSchemes { default Gauss linear limited corrected 0.5; }
interpolationSchemes { default linear; }
snGradSchemes { default limited corrected 0.5; }
wallDist { method meshWave; }
"""

FV_SOLUTION = """
solvers
{
    p { solver GAMG; smoother GaussSeidel; tolerance 1e-7; relTol 0.05; }
    Phi { $p; }
    "(U|k|omega)" { solver smoothSolver; smoother GaussSeidel; tolerance 1e-8; relTol 0.1; nSweeps 1; }
}
SIMPLE { nNonOrthogonalCorrectors 1; consistent yes; }
potentialFlow { nNonOrthogonalCorrectors 5; }
relaxationFactors { equations { U 0.7; k 0.5; omega 0.5; } fields { p 0.5; } }
"""


def field(dims: str, internal: str, entries: dict[str, str]) -> str:
    """Body of a field file with the given boundary entries (patch or group name -> text)."""
    bf = "\n".join(f"    {name}\n    {{\n        {text}\n    }}" for name, text in entries.items())
    return f"\ndimensions      {dims};\ninternalField   {internal};\nboundaryField\n{{\n{bf}\n}}\n"


def initial_fields(case: Path, laminar: bool = False) -> None:
    """Write 0/U, p, k, omega, nut: fixed inlet, moving ground, no-slip body, slip top/sides (laminar:
    nut zero everywhere, which foamToVTK exports as the run's nut)."""
    u = f"uniform ({U_INF} 0 0)"
    k = 1.5 * (0.01 * U_INF) ** 2
    omega = math.sqrt(k) / (0.09 ** 0.25 * 0.5)
    slip = "type slip;"
    _write(case, "0/U", "volVectorField", field("[0 1 -1 0 0 0 0]", u, {
        "inlet": f"type fixedValue; value {u};",
        "outlet": "type inletOutlet; inletValue uniform (0 0 0); value $internalField;",
        "ground": f"type fixedValue; value {u};",
        "bodyGroup": "type noSlip;", "top": slip, "sides": slip}))
    _write(case, "0/p", "volScalarField", field("[0 2 -2 0 0 0 0]", "uniform 0", {
        "inlet": "type zeroGradient;", "outlet": "type fixedValue; value uniform 0;",
        "ground": "type zeroGradient;", "bodyGroup": "type zeroGradient;", "top": slip, "sides": slip}))
    for name, dims, value, wall in (
            ("k", "[0 2 -2 0 0 0 0]", k, "kqRWallFunction"),
            ("omega", "[0 0 -1 0 0 0 0]", omega, "omegaWallFunction")):
        val = f"uniform {value:.6g}"
        _write(case, f"0/{name}", "volScalarField", field(dims, val, {
            "inlet": f"type fixedValue; value {val};",
            "outlet": f"type inletOutlet; inletValue {val}; value {val};",
            "ground": f"type {wall}; value {val};", "bodyGroup": f"type {wall}; value {val};",
            "top": slip, "sides": slip}))
    calc = "type calculated; value uniform 0;"
    wall = calc if laminar else "type nutkWallFunction; value uniform 0;"
    _write(case, "0/nut", "volScalarField", field("[0 2 -1 0 0 0 0]", "uniform 0", {
        "inlet": calc, "outlet": calc, "ground": wall, "bodyGroup": wall, "top": slip, "sides": slip}))


def reference_dict(patches: tuple[str, ...]) -> str:
    """Dictionary of OpenFOAM's own patch integrals: area, sum p |Sf| and sum wallShearStress |Sf|."""
    blocks = [f"""
    areaIntegrate_{patch}
    {{
        type            surfaceFieldValue;
        libs            (fieldFunctionObjects);
        regionType      patch;
        name            {patch};
        operation       areaIntegrate;
        fields          (p wallShearStress);
        writeFields     false;
        writeArea       true;
        log             true;
        writeControl    timeStep;
    }}""" for patch in patches]
    return "\nfunctions\n{" + "".join(blocks) + "\n}\n"


def turbulence_properties(v: Variant) -> str:
    """turbulenceProperties: the variant's RAS model, or laminar flow."""
    if v.turbulence == "laminar":
        return "\nsimulationType laminar;\n"
    return f"\nsimulationType RAS;\nRAS {{ RASModel {v.turbulence}; turbulence on; printCoeffs on; }}\n"


def write_case(case: Path, v: Variant) -> dict[str, float]:
    """Write every file of the case; return the forceCoeffs references used."""
    points, tris, regions = body_triangles(v)
    (case / "constant/triSurface").mkdir(parents=True, exist_ok=True)
    write_ascii_stl(case / "constant/triSurface/body.stl", points, tris, regions)
    write_binary_stl(case / "body.stl", points, tris)
    aref = frontal_area(points, tris)
    _write(case, "system/blockMeshDict", "dictionary", block_mesh_dict(v))
    _write(case, "system/snappyHexMeshDict", "dictionary", snappy_dict(v))
    _write(case, "system/controlDict", "dictionary", control_dict(v, aref))
    _write(case, "system/fvSchemes", "dictionary", FV_SCHEMES)
    _write(case, "system/fvSolution", "dictionary", FV_SOLUTION)
    _write(case, "system/referenceIntegrals", "dictionary", reference_dict(PATCHES))
    _write(case, "constant/transportProperties", "dictionary",
           f"\ntransportModel Newtonian;\nnu {v.nu:.9g};\n")
    _write(case, "constant/turbulenceProperties", "dictionary", turbulence_properties(v))
    initial_fields(case, laminar=v.turbulence == "laminar")
    return {"Aref": aref, "triangles": float(len(tris)), "points": float(len(points))}


def main() -> None:
    """Parse the command line and write the case."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case", type=Path)
    parser.add_argument("--variant", type=int, choices=sorted(VARIANTS), default=1)
    args = parser.parse_args()
    info = write_case(args.case, VARIANTS[args.variant])
    print(f"wrote {args.case}: {int(info['triangles'])} triangles, Aref {info['Aref']:.6g} m^2")


if __name__ == "__main__":
    main()
