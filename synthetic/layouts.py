"""Each dataset's layout as the synthetic generator writes it: what its profile
(conf/dataset/<name>.yaml: file names, arrays, where they live, conventions, flow, coefficient
files) does not say: the bodies' sizes and where they sit, the first run's number, whether the
volume is published in pieces, the files' encoding, how the volume pressure is stated, how the
published CSVs spell their values. The facts and their sources: docs/datasets.md.

    layout = LAYOUTS["windsorml"]
    frame = Frame.of(load_profile("windsorml"))     # body frame (z up) -> the dataset's (y up)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.configuration.source_configs import load_profile as named_profile
from synthetic.body import ShapeRanges
from synthetic.vtk_xml_writer import Encoding

GROUND_Z = -0.318469  # the synthetic DrivAerML ground plane, m (the real one lies within 1 mm of it)


@dataclass(frozen=True)
class Layout:
    """What the generator needs of a dataset beyond its profile (module docstring)."""

    shapes: ShapeRanges
    first_run: int = 1                   # run_<first_run> is the first folder
    volume_pieces: bool = False          # the volume split into <name>.00.part, .01.part
    encoding: Encoding | None = None     # the VTK files' encoding; None: VTK's default (Encoding())
    pressure_offset: float = 0.0         # the volume pressure: offset + scale * cp ...
    pressure_scale: float | None = None  # ... scale None: kinematic, 0.5 U^2
    value_prefix: str = ""               # what a published CSV's value row starts with
    wheelbase_fraction: float | None = None  # a variant's own reference length (of its length); None: the profile's

    def volume_encoding(self, given: Encoding | None) -> Encoding:
        """The encoding to write in: ``given``, else the dataset's, else VTK's default."""
        return given or self.encoding or Encoding()


LAYOUTS: dict[str, Layout] = {
    # A DrivAer-like car within DoMINO's DrivAerML surface box; the volume in two pieces, as published
    "drivaerml": Layout(
        ShapeRanges(x_nose=(-1.05, -0.85), length=(4.2, 4.8), width=(1.7, 1.95), height=(1.25, 1.45),
                    ride_height=(0.08, 0.16), nose_exponent=(2.0, 3.5), tail_exponent=(2.5, 5.0),
                    section_exponent=(2.5, 4.5), hood_fraction=(0.45, 0.65), windshield_s=(0.25, 0.35),
                    rear_s=(0.75, 0.88), ground=GROUND_Z),
        volume_pieces=True, wheelbase_fraction=0.6),
    # An Ahmed-like bluff body about 1.04 x 0.39 x 0.29 m, its base at x = 0, 50 mm above the ground
    # at z = 0 (the frame is an unverified inference); "cd, cl" rows start with a space
    "ahmedml": Layout(
        ShapeRanges(x_nose=None, length=(0.95, 1.1), width=(0.33, 0.42), height=(0.25, 0.32),
                    ride_height=(0.045, 0.055), nose_exponent=(4.0, 6.0), tail_exponent=(6.0, 9.0),
                    section_exponent=(5.0, 7.0), hood_fraction=(0.9, 1.0), windshield_s=(0.1, 0.2),
                    rear_s=(0.75, 0.85), ground=0.0),
        value_prefix=" "),
    # A Windsor-like body: nose x = -0.56075, length 1.044 m, width 0.389 m, only the height varying
    # (its top 0.30 to 0.49 m); y up, ground y = 0; run_0 first; inline binary, uncompressed, UInt64
    # headers; pressureavg = 37330.4 + 1048 cp (the paper's p_ref and q)
    "windsorml": Layout(
        ShapeRanges(x_nose=(-0.56075, -0.56075), length=(1.044, 1.044), width=(0.389, 0.389),
                    height=(0.25, 0.43), ride_height=(0.04, 0.06), nose_exponent=(2.5, 3.5),
                    tail_exponent=(5.0, 8.0), section_exponent=(4.0, 6.0), hood_fraction=(0.85, 1.0),
                    windshield_s=(0.15, 0.3), rear_s=(0.7, 0.85), ground=0.0),
        first_run=0, encoding=Encoding("binary", "none", 64), pressure_offset=37330.4, pressure_scale=1048.0),
}
DATASETS = tuple(LAYOUTS)


def load_profile(name: str) -> DatasetConfig:
    """The dataset profile conf/dataset/<name>.yaml, whose layout and names the runs are written in."""
    if name not in LAYOUTS:
        raise ValueError(f"unknown dataset {name!r}; the generator writes {list(DATASETS)}")
    return named_profile(name)


@dataclass(frozen=True)
class Frame:
    """The rotation from the body frame (x drag, y side, z up) to the dataset's: its columns are
    the dataset's drag direction, lift x drag and lift direction (a proper rotation)."""

    rotation: np.ndarray

    @classmethod
    def of(cls, profile: DatasetConfig) -> Frame:
        drag = np.asarray(profile.flow.drag_direction, dtype=np.float64)
        lift = np.asarray(profile.flow.lift_direction, dtype=np.float64)
        drag, lift = drag / np.linalg.norm(drag), lift / np.linalg.norm(lift)
        return cls(np.column_stack([drag, np.cross(lift, drag), lift]))

    def vectors(self, values: np.ndarray) -> np.ndarray:
        """Points or vectors (n, 3) of the body frame in the dataset's."""
        return np.asarray(values, dtype=np.float64) @ self.rotation.T

    def to_body(self, values: np.ndarray) -> np.ndarray:
        """Points or vectors (n, 3) of the dataset's frame in the body frame."""
        return np.asarray(values, dtype=np.float64) @ self.rotation

    def tensors(self, values: np.ndarray) -> np.ndarray:
        """Symmetric tensors (n, 6: xx, xy, xz, yy, yz, zz) of the body frame in the dataset's."""
        i, j = np.triu_indices(3)
        full = np.zeros((len(values), 3, 3))
        full[:, i, j] = values
        full[:, j, i] = values
        turned = np.einsum("ab,nbc,dc->nad", self.rotation, full, self.rotation)
        return turned[:, i, j]

    def box_to_body(self, box: dict[str, list[float]], ground: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """A box of the dataset's frame ({min, max}) as the body frame's box around it, above
        the ground."""
        corners = np.array(np.meshgrid(*zip(box["min"], box["max"]), indexing="ij")).reshape(3, -1).T
        body = self.to_body(corners)
        low, high = body.min(axis=0), body.max(axis=0)
        low[2] = max(low[2], ground)
        return tuple(low.tolist()), tuple(high.tolist())
