"""Randomised 3-DOF limbs and multi-pulse actuation (paper Sec. IV-C3, Fig. 6), no ROS.

`random_limb(rng)` draws a leg description (the dict that equimus_description.leg.from_dict
reads) from this distribution; every draw is one planar tree of three hinges about ±world x:

- topology: link 1 hangs from the base at the hip; link 2's parent is link 1; link 3's parent
  is link 2 (a serial hip-knee-ankle chain, probability 0.7) or link 1 (a branch, 0.3). A child
  joint sits at a uniform fraction 0.6-1.0 of its parent's length. At the build pose every link
  hangs straight down (ref = π/2 for the hip, 0 for the others, as in the 2-joint leg).
- links: uniform rods, length U(0.15, 0.30) m, mass U(0.05, 0.15) kg; hinge axis −x or +x (even
  odds), damping U(0.02, 0.08) N·m·s/rad, range ref ± 2.8 rad.
- muscles (3): muscle i spans the joints between two bodies on one root-to-leaf path, one joint
  (monoarticular) or two (biarticular), with even odds; every joint is spanned by at least one
  muscle (a draw that leaves a joint unspanned is redrawn). Base anchor at U(0.1, 0.9) of the
  proximal link (the base: at the hip), perpendicular offset ±U(0.02, 0.08) m; tip anchor the
  same on the distal link. m U(0.05, 0.25) kg, k U(100, 300) N/m, c U(3, 12) N·s/m, area 4e-4 m²,
  l0 = U(0.9, 1.1) × the build length.

`pulses(rng, m)`: five 0.4 s pulses; in each, every muscle is on with probability 0.5 at a
pressure U(5, 30) kPa (F = S·P), else off; the sequence ends with 0.4 s all off.
"""

from __future__ import annotations

import math

import numpy as np

N_LINKS = 3
N_MUSCLES = 3
PULSE_S = 0.4


def _rod(mass: float, length: float) -> dict:
    i = mass * length**2 / 12
    return {'mass': mass, 'com': [0.0, 0.0, -length / 2], 'inertia': [i, i, 1e-6, 0, 0, 0]}


def _path_up(parent: dict, body: str) -> list[str]:
    """Bodies from `body` up to the root (inclusive)."""
    out = [body]
    while out[-1] in parent:
        out.append(parent[out[-1]])
    return out


def random_limb(rng: np.random.Generator, name: str = 'random_limb') -> dict:
    """One draw of the documented 3-DOF distribution, as a description mapping."""
    links = [f'link{i + 1}' for i in range(N_LINKS)]
    length = {b: float(rng.uniform(0.15, 0.30)) for b in links}
    parent = {links[0]: 'base', links[1]: links[0]}
    parent[links[2]] = links[1] if rng.uniform() < 0.7 else links[0]
    bodies: dict = {
        'base': {'pos': [0.0, 0.0, 1.2], 'mass': 0.2, 'inertia': [1e-4, 1e-4, 1e-4, 0, 0, 0]}
    }
    joints: dict = {}
    joint_names = ('hip', 'knee', 'ankle')
    for jn, b in zip(joint_names, links, strict=True):
        p = parent[b]
        at = 0.0 if p == 'base' else -length[p] * float(rng.uniform(0.6, 1.0))
        bodies[b] = {'pos': [0.0, 0.0, at], **_rod(float(rng.uniform(0.05, 0.15)), length[b])}
        ref = math.pi / 2 if p == 'base' else 0.0
        joints[jn] = {
            'parent': p,
            'child': b,
            'axis': [float(rng.choice([-1.0, 1.0])), 0.0, 0.0],
            'ref': ref,
            'damping': float(rng.uniform(0.02, 0.08)),
            'range': [ref - 2.8, ref + 2.8],
        }
    while True:
        spans = []
        for _ in range(N_MUSCLES):
            tip = str(rng.choice(links))
            up = _path_up(parent, tip)
            n_joints = min(int(rng.integers(1, 3)), len(up) - 1)
            spans.append((up[n_joints], tip))
        covered = set()
        for base, tip in spans:
            for b in _path_up(parent, tip):
                if b == base:
                    break
                covered.add(b)
        if covered == set(links):
            break
    actuators: dict = {}
    build = _build_points(bodies, parent)
    for i, (base, tip) in enumerate(spans):
        pb = _anchor(rng, base, length)
        pt = _anchor(rng, tip, length)
        l_build = float(np.linalg.norm((build[tip] + pt) - (build[base] + pb)))
        actuators[f'muscle{i + 1}'] = {
            'base': {'body': base, 'pos': pb.tolist()},
            'tip': {'body': tip, 'pos': pt.tolist()},
            'm': float(rng.uniform(0.05, 0.25)),
            'k': float(rng.uniform(100.0, 300.0)),
            'c': float(rng.uniform(3.0, 12.0)),
            'l0': l_build * float(rng.uniform(0.9, 1.1)),
            'area': 4e-4,
        }
    return {
        'name': name,
        'bodies': bodies,
        'joints': joints,
        'actuators': actuators,
        'sim': {'timestep': 0.001, 'integrator': 'implicitfast', 'gravity': 9.81},
    }


def _anchor(rng: np.random.Generator, body: str, length: dict) -> np.ndarray:
    side = float(rng.choice([-1.0, 1.0])) * float(rng.uniform(0.02, 0.08))
    along = 0.0 if body == 'base' else -length[body] * float(rng.uniform(0.1, 0.9))
    return np.array([0.0, side, along])


def _build_points(bodies: dict, parent: dict) -> dict:
    """World origin of every body at the build pose."""
    out: dict = {}
    for b, spec in bodies.items():  # parents first
        pos = np.asarray(spec['pos'], float)
        out[b] = pos if b not in parent else out[parent[b]] + pos
    return out


def pulses(rng: np.random.Generator, m: int, n: int = 5) -> list[tuple[float, np.ndarray]]:
    """(duration s, pressures kPa) per pulse, ending with all muscles off."""
    seq = []
    for _ in range(n):
        on = rng.uniform(size=m) < 0.5
        seq.append((PULSE_S, np.where(on, rng.uniform(5.0, 30.0, m), 0.0)))
    seq.append((PULSE_S, np.zeros(m)))
    return seq
