"""Checks on what Motive sends (no ROS): frame plausibility and the configured body names.

NatNet has no checksum, so a corrupted datagram that still parses is caught here: a tracked rigid
body with a non-finite value, a quaternion that is not unit length, or a position outside the
capture volume makes the whole frame implausible (it is dropped and counted, never published).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import protocol as P


@dataclass(frozen=True)
class Plausibility:
    """Limits for a tracked rigid body (Motive frame, m)."""

    quaternion_norm_tolerance: float = 1e-3
    workspace_min: tuple[float, float, float] = (-10.0, -10.0, -10.0)
    workspace_max: tuple[float, float, float] = (10.0, 10.0, 10.0)


def implausible_reason(frame: P.Frame, limits: Plausibility) -> str:
    """'' if every tracked rigid body is plausible, else why the frame must be dropped.

    Untracked bodies (params bit 0 clear) are not checked: Motive sends zeros for them and the
    bridge publishes NaN anyway. A body is passed by a few comparisons (the fused loop's receive
    thread runs this on every frame); one that fails them is judged by `_body_reason`, which
    says why.
    """
    (xlo, ylo, zlo), (xhi, yhi, zhi) = limits.workspace_min, limits.workspace_max
    tol = limits.quaternion_norm_tolerance
    isfinite, sqrt = math.isfinite, math.sqrt
    for b in frame.rigid_bodies:
        if not b.tracking_valid:
            continue
        x, y, z = b.position
        qx, qy, qz, qw = b.orientation
        # A sum of float32 values cannot overflow a double, so it is finite exactly when every
        # term is (a body failing these tests for any other reason is judged below), and a
        # non-finite quaternion makes the norm's test false.
        if (
            isfinite(x + y + z + b.mean_error)
            and abs(sqrt(qx * qx + qy * qy + qz * qz + qw * qw) - 1.0) <= tol
            and xlo <= x <= xhi
            and ylo <= y <= yhi
            and zlo <= z <= zhi
        ):
            continue
        reason = _body_reason(b, limits)
        if reason:
            return reason
    return ''


def _body_reason(b: P.RigidBody, limits: Plausibility) -> str:
    """Why tracked body `b` is implausible ('' if it is not)."""
    values = (*b.position, *b.orientation, b.mean_error)
    if not all(map(math.isfinite, values)):
        return f'rigid body {b.id}: non-finite value {values}'
    qx, qy, qz, qw = b.orientation
    norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    if abs(norm - 1.0) > limits.quaternion_norm_tolerance:
        return (
            f'rigid body {b.id}: quaternion norm {norm:.6g} is off by more than '
            f'{limits.quaternion_norm_tolerance:g}'
        )
    for axis, v, lo, hi in zip(
        'xyz', b.position, limits.workspace_min, limits.workspace_max, strict=True
    ):
        if not lo <= v <= hi:
            return (
                f'rigid body {b.id}: {axis} = {v:.4g} m is outside the workspace [{lo:g}, {hi:g}] m'
            )
    return ''


@dataclass
class BodyMatch:
    """How the configured rigid-body names map onto Motive's model definitions."""

    ids: dict[str, int] = field(default_factory=dict)  # configured name -> streaming id
    missing: list[str] = field(default_factory=list)  # configured, not streamed
    streamed: list[str] = field(default_factory=list)  # every rigid body Motive streams
    ambiguous: list[str] = field(default_factory=list)  # names Motive uses for several bodies
    by_id: list[str] = field(default_factory=list)  # numeric names matched by streaming id

    @property
    def ok(self) -> bool:
        return not self.missing and not self.ambiguous

    def error(self) -> str:
        """One message naming what is wrong and what Motive does stream ('' when ok)."""
        parts = []
        if self.missing:
            parts.append(f'rigid_bodies {self.missing} are not streamed by Motive')
        if self.ambiguous:
            parts.append(f'Motive streams several rigid bodies named {self.ambiguous}')
        if not parts:
            return ''
        streamed = ', '.join(self.streamed) if self.streamed else 'no rigid bodies'
        return (
            '; '.join(parts) + f'. Motive streams: {streamed}. Rename the assets in Motive or '
            'fix rigid_bodies in config/natnet.yaml (`equimus natnet list` prints them).'
        )


def match_bodies(wanted: Sequence[str] | None, model: P.ModelDefinitions) -> BodyMatch:
    """Match configured names to Motive's rigid bodies. ``None`` = take every body.

    A configured name that is all digits and matches no body name is taken as a streaming id
    (Motive shows it as "Streaming ID"), so `rigid_bodies: ['3']` works for unnamed bodies.
    """
    rbs = model.rigid_bodies()
    names: dict[str, list[int]] = {}
    for d in rbs:
        names.setdefault(d.name, []).append(d.id)
    m = BodyMatch(streamed=[f'{d.name} (id {d.id})' for d in rbs])
    for name in wanted if wanted is not None else list(names):
        ids = names.get(name)
        if ids is None and name.isdigit() and any(d.id == int(name) for d in rbs):
            m.ids[name] = int(name)
            m.by_id.append(name)
        elif ids is None:
            m.missing.append(name)
        elif len(ids) > 1:
            m.ambiguous.append(name)
        else:
            m.ids[name] = ids[0]
    return m


def topic_token(name: str) -> str:
    """A ROS-legal topic token for a Motive body name: Motive allows names such as '1' or
    'Rigid Body 1', which ROS 2 rejects (a token may not start with a digit nor hold spaces)."""
    token = ''.join(c if c.isascii() and (c.isalnum() or c == '_') else '_' for c in name)
    if not token or token[0].isdigit():
        token = f'body_{token}'
    return token
