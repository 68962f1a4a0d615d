"""pressure_player node: plays a pressure trajectory (t, P1, P2 kPa: `equimus excite`'s CSV) on
/valve/command, as the graph's one commander, so it passes the valve driver's safety filter
(clamp, slew, watchdog, arming) like any controller's command and is recorded with the rest.

Until the driver says it is armed (/valve/armed) it sends the trajectory's first row (the
driver binds the first sender after arming as its commander); then it plays row k at k/rate s
after the arming on the wall clock (a late timer skips rows rather than stretching the
trajectory), and after the last row keeps sending it, vented as every design ends, until
stopped. It logs `playing` and `done` (equimus adapt waits for them).

    ros2 run equimus_bringup pressure_player --ros-args -p file:=excite/excite.csv
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np
from rclpy.node import Node
from std_msgs.msg import Bool, Float64MultiArray

from equimus_description.config import ConfigError, param, validate_fields
from equimus_description.interface import PRESSURE_LAYOUT, VALVE_ARMED, VALVE_COMMAND
from equimus_description.valve import HARD_MAX_KPA
from equimus_ros.arrays import float_array
from equimus_ros.executors import timer_callback
from equimus_ros.main import run_node
from equimus_ros.params import bind
from equimus_ros.qos import publisher, subscription

PLAYING, DONE = 'playing', 'done'  # the log lines' last words


@dataclasses.dataclass(frozen=True)
class PlayerConfig:
    file: str = param('', 'CSV of the trajectory: t (s), P1, P2 (kPa), one header line')
    rate: float = param(
        120.0, 'Hz, commands per second (the trajectory is resampled)', range=(1.0, 1e3)
    )

    def __post_init__(self) -> None:
        validate_fields(self)


def load_trajectory(path: str, rate: float) -> np.ndarray:
    """(N, 2) kPa on the player's grid: each CSV row held from its time to the next one's."""
    try:
        rows = np.loadtxt(path, delimiter=',', skiprows=1, ndmin=2)
    except (OSError, ValueError) as exc:
        raise ConfigError(f'file {path}: {exc}') from None
    if rows.shape[1] < 3 or len(rows) < 2 or not np.all(np.isfinite(rows)):
        raise ConfigError(f'file {path}: need rows of t (s), P1, P2 (kPa), finite')
    t = rows[:, 0] - rows[0, 0]
    if np.any(np.diff(t) <= 0):
        raise ConfigError(f'file {path}: the times must increase')
    grid = np.arange(0.0, t[-1] + 0.5 / rate, 1.0 / rate)
    idx = np.searchsorted(t, grid + 1e-9, side='right') - 1
    out = rows[idx, 1:3]
    if np.any(out < 0) or np.any(out > HARD_MAX_KPA):
        raise ConfigError(f'file {path}: pressures must lie within 0..{HARD_MAX_KPA:g} kPa')
    return out


class PressurePlayer(Node):
    def __init__(self) -> None:
        super().__init__('pressure_player')
        cfg = bind(self, PlayerConfig()).config
        if not cfg.file:
            raise ConfigError('file is empty: give the trajectory CSV (-p file:=excite.csv)')
        self.rate = cfg.rate
        self.rows = load_trajectory(cfg.file, cfg.rate)
        self.pub = publisher(self, Float64MultiArray, VALVE_COMMAND)
        self.armed_at: float | None = None
        self.done = False
        subscription(self, Bool, VALVE_ARMED, self._on_armed)
        self.create_timer(1.0 / cfg.rate, timer_callback(self._tick))
        self.get_logger().info(
            f'{len(self.rows)} commands ({len(self.rows) / cfg.rate:.1f} s) from {cfg.file}; '
            'waiting for the valve driver to arm'
        )

    def _on_armed(self, msg: Bool) -> None:
        if msg.data and self.armed_at is None:
            self.armed_at = time.monotonic()
            self.get_logger().info(PLAYING)
        elif not msg.data and self.armed_at is not None and not self.done:
            self.get_logger().error('the valve driver disarmed during the trajectory')

    def _tick(self) -> None:
        if self.armed_at is None:
            row = self.rows[0]
        else:
            k = int((time.monotonic() - self.armed_at) * self.rate)
            if k >= len(self.rows) and not self.done:
                self.done = True
                self.get_logger().info(DONE)
            row = self.rows[min(k, len(self.rows) - 1)]
        self.pub.publish(float_array([float(v) for v in row], PRESSURE_LAYOUT))


def main(args=None) -> int:
    return run_node(PressurePlayer, args, config_hint='Give -p file:=<trajectory CSV>.')


if __name__ == '__main__':
    sys.exit(main())
