"""End to end over real sockets and real DDS: natnet_emulator <-> natnet_bridge <-> subscriber."""

import itertools
import math
import statistics
import threading

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped
from natnet_util import random_group, wait_for
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import qos_profile_sensor_data

from equimus_hw.natnet.emulator import NatNetEmulator

BODIES = {
    'base': ((0.0, 1.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
    'thigh': ((0.1, 0.875, -0.02), (0.0, 0.0, 0.19866933, 0.98006658)),
    'calf': ((0.23, 0.77, 0.05), (0.1, -0.2, 0.3, math.sqrt(1 - 0.14))),
}


class Listener:
    """Subscribes to the three pose topics and /diagnostics in this (test) process."""

    def __init__(self):
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('natnet_e2e_listener', context=self.ctx)
        self.poses = {n: [] for n in BODIES}
        self.diags = []
        self.lock = threading.Lock()
        for n in BODIES:
            self.node.create_subscription(
                PoseStamped,
                f'/mocap/{n}/pose',
                lambda m, n=n: self._pose(n, m),
                qos_profile_sensor_data,
            )
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._diag, 10)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.th = threading.Thread(target=self._spin, daemon=True)
        self.th.start()

    def _spin(self):
        while self.ctx.ok():
            try:
                self.ex.spin_once(timeout_sec=0.05)
            except Exception:  # noqa: BLE001 - context shut down while spinning
                return

    def _pose(self, name, msg):
        with self.lock:
            self.poses[name].append((self.node.get_clock().now().nanoseconds, msg))

    def _diag(self, msg):
        with self.lock:
            for st in msg.status:
                if st.name.startswith('natnet_bridge'):
                    self.diags.append(st)

    def count(self, name):
        with self.lock:
            return len(self.poses[name])

    def last_diag(self):
        with self.lock:
            return self.diags[-1] if self.diags else None

    def close(self):
        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)
        self.th.join(2)


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def bridge_args(ports, multicast, group, extra=()):
    return [
        '-m',
        'equimus_hw.natnet.bridge_node',
        '--ros-args',
        '-p',
        f'command_port:={ports[0]}',
        '-p',
        f'data_port:={ports[1]}',
        '-p',
        f'multicast:={"true" if multicast else "false"}',
        '-p',
        f'multicast_group:={group}',
        '-p',
        'stale_timeout:=0.3',
        '-p',
        'autostart:=true',
        *extra,
    ]


def write_trajectory(path):
    with open(path, 'w') as fh:
        fh.write('time,body,x,y,z,qx,qy,qz,qw\n')
        for t in (0.0, 10.0):
            for n, (p, q) in BODIES.items():
                fh.write(f'{t},{n},{",".join(map(str, p))},{",".join(map(str, q))}\n')


def vals(st):
    return {kv.key: kv.value for kv in st.values}


@pytest.mark.parametrize(
    'version,multicast,up_axis',
    [('3.0', True, 'y_up'), ('4.1', False, 'z_up'), ('4.1', True, 'y_up'), ('3.0', False, 'z_up')],
)
def test_poses_arrive_with_exposure_stamps(
    version, multicast, up_axis, ports, spawn, listener, tmp_path
):
    """Motive streaming Y up (its default) or Z up, the bridge set to match: Z-up poses."""
    group = random_group()
    traj = tmp_path / 'traj.csv'
    write_trajectory(traj)
    emu = spawn(
        [
            '-m',
            'equimus_hw.natnet.emulator',
            '--version',
            version,
            '--command-port',
            str(ports[0]),
            '--data-port',
            str(ports[1]),
            '--multicast' if multicast else '--unicast',
            '--multicast-group',
            group,
            '--trajectory',
            str(traj),
            '--exposure-latency-ms',
            '4',
            '--up-axis',
            up_axis,
        ],
        'emulator',
    )
    bridge = spawn(bridge_args(ports, multicast, group, ['-p', f'up_axis:={up_axis}']), 'bridge')
    ok = wait_for(lambda: all(listener.count(n) >= 60 for n in BODIES), 20)
    assert ok, (
        f'poses did not arrive: {[listener.count(n) for n in BODIES]}\n'
        f'{bridge.stop()[1]}\n{emu.stop()[1]}'
    )

    # A stamp may be off by the clock mapping's uncertainty (half the round trip of its best
    # echo: 50-100 ms at startup with both cores busy, until a fast echo comes back).
    def uncertainties():
        return [
            float(v) for d in list(listener.diags) if (v := vals(d).get('clock_uncertainty_ms'))
        ]

    # Beyond 3 ms an arrival stamp (age = DDS delivery) would pass the bound below as well.
    assert wait_for(lambda: (u := uncertainties()) and u[-1] < 3.0, 10), uncertainties()
    n_diag = len(uncertainties()) - 1
    since = {n: listener.count(n) for n in BODIES}
    assert wait_for(lambda: all(listener.count(n) >= since[n] + 40 for n in BODIES), 10)
    assert wait_for(lambda: len(uncertainties()) > n_diag + 1, 3)
    uncertainty = max(uncertainties()[n_diag:])
    for name, (p, q) in BODIES.items():
        rx_ns, msg = listener.poses[name][-1]
        assert msg.header.frame_id == 'mocap'
        got_p = (msg.pose.position.x, msg.pose.position.y, msg.pose.position.z)
        got_q = (
            msg.pose.orientation.x,
            msg.pose.orientation.y,
            msg.pose.orientation.z,
            msg.pose.orientation.w,
        )
        # the trajectory is Motive Y-up; the bridge publishes Z up (REP-103): +90 deg about x
        assert got_p == pytest.approx((p[0], -p[2], p[1]), abs=1e-6)
        assert got_q == pytest.approx((q[0], -q[2], q[1], q[3]), abs=1e-6)
        ages = [
            (rx - (m.header.stamp.sec * 10**9 + m.header.stamp.nanosec)) / 1e6
            for rx, m in listener.poses[name][since[name] :]
        ]
        # Stamped at mid-exposure: 4 ms before the emulator sent it, never after arrival; the
        # stamp may be off by the clock mapping's uncertainty (0.9 ms seen once in CI under load).
        assert min(ages) >= 3.9 - uncertainty, (ages, uncertainty)
        # The upper bound only catches a stamp off by a clock error (seconds): the age also holds
        # DDS delivery to a listener that a loaded machine schedules late (the stamp's accuracy
        # without DDS, 6-15 ms, is checked in test_client_emulator.py): a median of 358 ms was
        # seen with both cores busy.
        assert sorted(ages)[len(ages) // 2] < 1000.0, ages
    # 120 Hz: 40 frames span ~1/3 s.
    stamps = [
        m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in listener.poses['thigh'][-41:]
    ]
    # The median period, not the span's ends: one clock-sync correction between the ends (seen
    # once in CI under load: 150 Hz over the span) is not a frame-rate error.
    period = statistics.median(b - a for a, b in itertools.pairwise(stamps))
    assert 1.0 / period == pytest.approx(120, rel=0.15)

    rates: list[float] = []

    def steady() -> bool:
        # A status from the steady stream: OK with the stream's rate. A CI run once read 0.0 Hz
        # from an OK status (not reproduced in 12 reruns), and a loaded one 97.6 Hz: the bridge's
        # one-second window held a stall of the emulator, which runs in this starved process. So
        # the rate must settle at 120 Hz within 10 s; a miscounting bridge never reads it.
        last = listener.last_diag()
        if last is None or last.level != DiagnosticStatus.OK:
            return False
        rate = float(vals(last)['frame_rate_hz'])
        if not rates or rates[-1] != rate:
            rates.append(rate)
        return rate == pytest.approx(120, rel=0.15)

    assert wait_for(steady, 10), (
        rates,
        vals(listener.last_diag()) if listener.last_diag() else None,
    )
    d = vals(listener.last_diag())
    assert d['natnet_version'].startswith(version)
    rc, out = bridge.stop()
    assert rc == 0 and 'Traceback' not in out, out
    rc, out = emu.stop()
    assert rc == 0 and 'Traceback' not in out, out


@pytest.fixture
def emulator(ports):
    emu = NatNetEmulator(
        version='4.1',
        command_port=ports[0],
        data_port=ports[1],
        multicast=False,
        exposure_latency_s=0.004,
    )
    for n, (p, q) in BODIES.items():
        emu.set_pose(n, p, q)
    emu.start()
    yield emu
    emu.stop()


def test_faults_untracked_stall_malformed(emulator, ports, spawn, listener):
    bridge = spawn(bridge_args(ports, False, '239.255.42.99'), 'bridge')
    assert wait_for(lambda: listener.count('calf') >= 30, 20), bridge.stop()[1]

    # Untracked body -> every pose field NaN (not a stale pose), diagnostics WARN naming it.
    emulator.untrack('thigh', 0.5)
    n0 = listener.count('thigh')
    assert wait_for(
        lambda: any(math.isnan(m.pose.position.x) for _, m in listener.poses['thigh'][n0:]), 3
    )
    nan_msgs = [m for _, m in listener.poses['thigh'][n0:] if math.isnan(m.pose.position.x)]
    m = nan_msgs[0].pose
    assert all(
        math.isnan(v)
        for v in (
            m.position.x,
            m.position.y,
            m.position.z,
            m.orientation.x,
            m.orientation.y,
            m.orientation.z,
            m.orientation.w,
        )
    )
    assert all(not math.isnan(m.pose.position.x) for _, m in listener.poses['calf'][n0:])
    assert wait_for(
        lambda: any(
            d.level == DiagnosticStatus.WARN and 'thigh' in d.message for d in list(listener.diags)
        ),
        3,
    )
    assert wait_for(lambda: not math.isnan(listener.poses['thigh'][-1][1].pose.position.x), 3)

    # Malformed burst -> counted as rejected, poses keep flowing.
    emulator.inject_malformed(50)
    assert wait_for(
        lambda: (
            listener.last_diag() is not None
            and int(vals(listener.last_diag())['rejected_packets']) >= 50
        ),
        5,
    )
    n1 = listener.count('base')
    assert wait_for(lambda: listener.count('base') >= n1 + 30, 3)
    assert bridge.alive()

    # Stalled stream -> ERROR "stream stopped" within ~stale_timeout, then back to OK.
    n_diag = len(listener.diags)
    emulator.stall(1.5)

    def stopped():
        # Any status since the stall began, not only the newest: a listener that spins late on
        # a loaded machine may read the ERROR after the stream (and the status) came back.
        with listener.lock:
            return next(
                (d for d in listener.diags[n_diag:] if d.level == DiagnosticStatus.ERROR), None
            )

    assert wait_for(stopped, 5.0), [d.message for d in listener.diags[n_diag:]]
    d = stopped()
    assert 'stream stopped' in d.message and vals(d)['stream_stopped'] == 'true'
    assert wait_for(lambda: listener.last_diag().level != DiagnosticStatus.ERROR, 4)
    rc, out = bridge.stop()
    assert rc == 0 and 'Traceback' not in out, out


def test_unsupported_version_reported(ports, spawn, listener):
    """A server speaking NatNet 2.x: diagnostics ERROR saying the version cannot be decoded."""
    emu = NatNetEmulator(version='4.1', command_port=ports[0], data_port=ports[1], multicast=False)
    real_info = emu.server_info

    def old_info():
        info = real_info()
        info.natnet_version = (2, 10, 0, 0)
        return info

    emu.server_info = old_info
    emu.start()
    try:
        bridge = spawn(bridge_args(ports, False, '239.255.42.99'), 'bridge')
        assert wait_for(
            lambda: (
                listener.last_diag() is not None and 'not supported' in listener.last_diag().message
            ),
            15,
        )
        d = listener.last_diag()
        assert d.level == DiagnosticStatus.ERROR and '2.10' in vals(d)['version_error']
        assert listener.count('base') == 0
        assert bridge.alive()
    finally:
        emu.stop()
