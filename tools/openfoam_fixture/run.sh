#!/bin/bash
# Regenerate tests/data/openfoam/run_<i>/ from scratch with OpenFOAM v1912 (Debian package
# "openfoam"): write the case, mesh (blockMesh + snappyHexMesh), solve (simpleFoam), write cell
# centres and patch integrals (postProcess), export (foamToVTK), copy the outputs.
# Usage: tools/openfoam_fixture/run.sh [variant ...]   (default: 1 2)
# Environment: PYTHON (with numpy; default python3), WORK (case folder root; default a temp dir).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/tests/data/openfoam"
python="${PYTHON:-python3}"
work="${WORK:-$(mktemp -d)}"
# The Debian package puts the applications on PATH; they only need the project's etc/ folder.
export WM_PROJECT_DIR="${WM_PROJECT_DIR:-/usr/share/openfoam}"
variants=("${@:-1 2}")
variants=(${variants[@]})

run() {  # run LOG APP ARGS...: run an OpenFOAM application, its output in log.LOG
    local log="$1"; shift
    echo "  $*"
    "$@" > "log.$log" 2>&1 || { tail -n 30 "log.$log"; exit 1; }
}

for v in "${variants[@]}"; do
    case="$work/car_$v"
    dest="$out/run_$v"
    echo "variant $v: case $case"
    rm -rf "$case"
    "$python" "$here/make_case.py" "$case" --variant "$v"
    cd "$case"
    start=$SECONDS
    run blockMesh blockMesh
    run snappyHexMesh snappyHexMesh -overwrite
    run checkMesh checkMesh
    run simpleFoam simpleFoam
    run writeCellCentres postProcess -func writeCellCentres -latestTime
    run referenceIntegrals postProcess -dict system/referenceIntegrals -latestTime \
        -fields '(p wallShearStress)'
    run foamToVTK.internal foamToVTK -latestTime -no-boundary -fields '(p U nut)' -name VTK_internal
    run foamToVTK.boundary foamToVTK -latestTime -no-internal -one-boundary \
        -patches '(body_upper body_lower)' -fields '(p nut wallShearStress)' -name VTK_boundary
    elapsed=$((SECONDS - start))
    last="$(foamListTimes -latestTime 2>/dev/null | tail -n 1)"
    rm -rf "$dest"
    mkdir -p "$dest/reference"
    cp body.stl "$dest/body.stl"
    cp VTK_internal/*_"$last"/internal.vtu "$dest/internal.vtu"
    cp VTK_boundary/*_"$last"/boundary.vtp "$dest/boundary.vtp"
    cp postProcessing/forceCoeffs1/0/coefficient.dat "$dest/coefficient.dat"
    "$python" "$here/export_centers.py" "$last/C" "$dest/reference/cell_centers.npy"
    "$python" "$here/write_reference.py" "$case" "$last" "$elapsed" > "$dest/reference/openfoam_reference.txt"
    cd "$repo"
done
du -ah "$out"
