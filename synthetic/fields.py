"""Smooth, plausible flow fields of the synthetic runs, by role (domino_pipeline/configuration/variables.py), in
the body frame (x downstream, z up): potential-flow-like stagnation at the nose, suction over the
roof, wall shear along the flow, a wake behind the body. Sizes scale with the body's length, so a
1 m Ahmed body and a 4.5 m car get the same flow; velocities and pressures scale with ``u_inf``.

    wall = surface_fields(shape, centres, normals, u_inf=38.889)    # normals out of the body
    flow = volume_fields(shape, points, u_inf=38.889)
"""

from __future__ import annotations

import numpy as np

from synthetic.body import CarShape

REFERENCE_LENGTH = 4.5  # m: the flow's features are sized for a body of this length, then scaled


def _scale(shape: CarShape) -> float:
    return shape.length / REFERENCE_LENGTH


def surface_fields(shape: CarShape, centres: np.ndarray, normals: np.ndarray, u_inf: float) -> dict[str, np.ndarray]:
    """Wall fields at boundary rows (normals out of the body), float32, by role: the kinematic
    pressure and wall shear (on the body) and their coefficients over q = 0.5 u_inf^2, the
    pressure fluctuation and the variance of its coefficient, y+ and a patch id."""
    q = 0.5 * u_inf**2
    nx, nz = normals[:, 0], normals[:, 2]
    s = np.clip((centres[:, 0] - shape.x_nose) / shape.length, 0.0, 1.0)
    front = np.where(nx < 0.0, nx**2, 0.0)  # stagnation towards the nose
    base = np.where(nx > 0.0, -0.15 * nx**2, 0.0)  # separated flow: low pressure on the back
    cp = front + base - 1.1 * (1.0 - nx**2)
    cp -= 0.5 * np.maximum(nz, 0.0) * np.exp(-(((s - shape.windshield_s - 0.05) / 0.08) ** 2))
    cp += 0.3 * np.maximum(-nz, 0.0) * (1.0 - nx**2)  # the ground slows the underbody flow
    tangent = np.array([1.0, 0.0, 0.0]) - nx[:, None] * normals
    cf = 0.004 * (1.0 + 1.5 * np.exp(-s / 0.1)) * (1.0 - 0.5 * s)
    cp_rms = 0.03 * (1.0 + 4.0 * np.maximum(nx, 0.0) + 2.0 * np.exp(-s / 0.05))
    return {
        "pressure": (q * cp).astype(np.float32),
        "pressure_coefficient": cp.astype(np.float32),
        "pressure_fluctuation": ((q * cp_rms) ** 2).astype(np.float32),
        "pressure_coefficient_variance": (cp_rms**2).astype(np.float32),
        "wall_shear_stress": (q * cf[:, None] * tangent).astype(np.float32),
        "skin_friction_coefficient": (cf[:, None] * tangent).astype(np.float32),
        "y_plus": (20.0 + 4000.0 * cf * np.sqrt(np.sum(tangent**2, axis=1))).astype(np.float32),
        "patch_id": np.ones(len(centres), dtype=np.int32),
    }


def _doublet_perturbation(shape: CarShape, points: np.ndarray) -> np.ndarray:
    """Potential flow past the body (an ellipsoidal doublet with its ground image) minus the
    free stream, per U."""
    half = np.array([0.5 * shape.length, 0.5 * shape.width, 0.5 * shape.height])
    centre_z = shape.ground + shape.ride_height + 0.5 * shape.height
    centre = np.array([shape.x_nose + half[0], 0.0, centre_z])
    velocity = np.zeros_like(points)
    for mirror in (1.0, -1.0):  # the image below the ground keeps the flow parallel to it
        c = centre.copy()
        c[2] = shape.ground + mirror * (centre_z - shape.ground)
        r = (points - c) / half
        dist = np.maximum(np.linalg.norm(r, axis=1, keepdims=True), 1.0)
        r_hat = r / dist
        velocity += 0.5 / dist**3 * (np.array([1.0, 0.0, 0.0]) - 3.0 * r_hat[:, :1] * r_hat)
    return velocity


def _wake(shape: CarShape, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the wake is (0 outside, 1 on its axis) and its velocity deficit (up to 0.8)."""
    behind = points[:, 0] - shape.x_tail
    grow = np.sqrt(np.maximum(behind, 0.0) / _scale(shape) + 0.5)
    spread_y = 0.45 * shape.width * grow
    spread_z = 0.45 * shape.height * grow
    centre_z = shape.ground + shape.ride_height + 0.4 * shape.height
    across = (points[:, 1] / spread_y) ** 2 + ((points[:, 2] - centre_z) / spread_z) ** 2
    onset = 1.0 / (1.0 + np.exp(-(behind / _scale(shape) + 0.3) / 0.15))
    weight = onset * np.exp(-across)
    return weight, 0.8 * weight / (1.0 + np.maximum(behind, 0.0) / shape.length)


def velocity_per_u(shape: CarShape, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The velocity per U at ``points``, the potential-flow pressure coefficient and the wake's
    deficit there."""
    perturbation = _doublet_perturbation(shape, points)
    weight, deficit = _wake(shape, points)
    potential_cp = 1.0 - np.sum((perturbation + np.array([1.0, 0.0, 0.0])) ** 2, axis=1)
    velocity = perturbation * (1.0 - weight[:, None])  # the separated wake replaces the
    velocity[:, 0] += 1.0  # potential flow's rear stagnation
    velocity[:, 0] *= 1.0 - deficit
    cp = (1.0 - weight) * potential_cp - 0.25 * weight  # Bernoulli outside, base pressure inside
    return velocity, cp, deficit


def volume_fields(shape: CarShape, points: np.ndarray, u_inf: float, pressure_offset: float = 0.0,
                  pressure_scale: float | None = None, roles: frozenset[str] | None = None) -> dict[str, np.ndarray]:
    """Flow fields at volume points, float32, by role; the pressure is ``pressure_offset +
    pressure_scale * cp`` (default: kinematic, 0.5 u_inf^2 cp). ``roles``: compute only these
    (the vorticity and the Reynolds stresses cost more); None: all."""
    velocity, cp, deficit = velocity_per_u(shape, points)
    speed = np.linalg.norm(velocity, axis=1)
    length = shape.length
    nut = u_inf * length * (5.7e-8 + 1.14e-5 * deficit
                            + 5.7e-7 * np.exp(-np.abs(points[:, 2] - shape.ground) / (0.011 * length)))
    scale = 0.5 * u_inf**2 if pressure_scale is None else pressure_scale
    fields = {
        "velocity": (u_inf * velocity).astype(np.float32),
        "pressure": (pressure_offset + scale * cp).astype(np.float32),
        "turbulent_viscosity": nut.astype(np.float32),
        "pressure_coefficient": cp.astype(np.float32),
        "total_pressure_coefficient": (cp + speed**2).astype(np.float32),
        "normalised_speed": speed.astype(np.float32),
    }
    if roles is None or "vorticity" in roles:
        fields["vorticity"] = (u_inf * _curl(shape, points)).astype(np.float32)
    if roles is None or "reynolds_stress" in roles:
        fields["reynolds_stress"] = (u_inf**2 * _reynolds_stress(deficit)).astype(np.float32)
    return fields


def _curl(shape: CarShape, points: np.ndarray) -> np.ndarray:
    """The curl of the velocity per U, by central differences (per metre)."""
    step = 1e-3 * shape.length
    derivative = np.empty((len(points), 3, 3))  # [i, a, b] = d v_a / d x_b
    for b in range(3):
        offset = np.zeros(3)
        offset[b] = step
        ahead, behind = (velocity_per_u(shape, points + sign * offset)[0] for sign in (1.0, -1.0))
        derivative[:, :, b] = (ahead - behind) / (2.0 * step)
    return np.stack([derivative[:, 2, 1] - derivative[:, 1, 2], derivative[:, 0, 2] - derivative[:, 2, 0],
                     derivative[:, 1, 0] - derivative[:, 0, 1]], axis=1)


def _reynolds_stress(deficit: np.ndarray) -> np.ndarray:
    """<u'u'> per U^2 as (xx, xy, xz, yy, yz, zz): isotropic turbulence of intensity 2%, ten
    times stronger in the wake, streamwise-biased, with a small shear stress."""
    k = (0.02 * (1.0 + 10.0 * deficit)) ** 2
    return np.stack([1.4 * k, -0.3 * k * deficit, np.zeros_like(k), 0.8 * k, np.zeros_like(k), 0.8 * k], axis=1)
