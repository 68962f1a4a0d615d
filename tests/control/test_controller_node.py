"""The controller node over real rclpy/DDS (node in its own process): `ros2 param set` semantics
(runtime values apply, invalid and read-only values are refused with a reason), and the node's
commands are bit-identical to the offline harness's ControlStep for one recorded input sequence."""

import math
import struct
import time

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')

from rcl_interfaces.msg import Parameter as ParameterMsg  # noqa: E402
from rcl_interfaces.srv import GetParameters, SetParameters  # noqa: E402
from rclpy.duration import Duration  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rosproc import start_node, stop  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

from equimus_description.interface import JOINT_STATES, JOINTS, REFERENCE, VALVE_COMMAND  # noqa: E402
from equimus_ros.qos import publisher, subscription  # noqa: E402

#: s, the parameter's largest value: the test's pauses must never trip the stale guard, and
#: the first state's answer plus `first_state`'s 3 s of quiet must fit in it: an MPC's first
#: step took 3.2 s in a loaded suite run, and with 5 s the guard vented 1.8 s after it.
STALE_TIMEOUT = 10.0


class Probe:
    """The test's side of the graph: publishes states and references, collects commands."""

    def __init__(self, node):
        self.node = node
        self.executor = SingleThreadedExecutor(context=node.context)  # the node's own domain
        self.executor.add_node(node)
        self.commands = []
        self.sources = []  # per command: its writer, sequence number and source stamp
        self.last_received = 0.0  # time.monotonic() of the node's last command
        subscription(node, Float64MultiArray, VALVE_COMMAND, self._on_command)
        self.state_pub = publisher(node, JointState, JOINT_STATES)
        self.ref_pub = publisher(node, JointState, REFERENCE)

    def _on_command(self, msg, info):
        """rclpy passes the message info to a callback of two arguments: the writer (its GID:
        the participant, then the entity), so a failed check says which process sent what."""
        self.commands.append(list(msg.data))
        self.last_received = time.monotonic()
        gid = bytes((info.get('publisher_gid') or {}).get('data', b'')[:16]).hex()
        self.sources.append(
            (gid, info.get('publication_sequence_number'), info['source_timestamp'])
        )

    def spin(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)

    def wait_for(self, predicate, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end and not predicate():
            self.executor.spin_once(timeout_sec=0.02)
        assert predicate(), f'timed out waiting for {what}'

    def wait_connected(self, timeout=30.0):
        self.wait_for(
            lambda: (
                self.state_pub.get_subscription_count() > 0
                and self.ref_pub.get_subscription_count() > 0
                and self.node.count_publishers(VALVE_COMMAND.name) > 0
            ),
            timeout,
            'the controller node to come up and match',
        )

    @staticmethod
    def message(q, qd, sec, nanosec):
        m = JointState(
            name=list(JOINTS), position=[float(v) for v in q], velocity=[float(v) for v in qd]
        )
        m.header.stamp.sec, m.header.stamp.nanosec = sec, nanosec
        return m

    def reference(self, q, qd, sec, nanosec):
        """Send one reference and let the controller take it before the next state. Matched on
        the probe's side is not matched on the node's: the reference (reliable) is waited for
        until the node's reader acknowledged it, then the node is given time to handle it."""
        self.ref_pub.publish(self.message(q, qd, sec, nanosec))
        assert self.ref_pub.wait_for_all_acked(Duration(seconds=10)), 'reference not acknowledged'
        self.spin(0.3)

    def state(self, q, qd, sec, nanosec, timeout=10.0):
        """Send one joint state and return the command it produced."""
        n = len(self.commands)
        self.state_pub.publish(self.message(q, qd, sec, nanosec))
        self.wait_for(lambda: len(self.commands) > n, timeout, 'a /valve/command')
        assert len(self.commands) == n + 1, 'more than one command for one state'
        return self.commands[-1]

    def first_state(self, q, qd, sec, nanosec, quiet=3.0, timeout=10.0, resend_after=10):
        """The command the node's first state produced. Until it has a valid state its stale
        guard publishes a vent every STALE_CHECK_S, and one published just before it took this
        state can arrive after the state was sent (seen with both cores busy). Once it took the
        state none follows until STALE_TIMEOUT has passed without another, and one
        writer's messages arrive in order: the command is the last before the stream has been
        quiet for `quiet` s, and every one before it is a vent. `quiet` counts from the last
        command received, not in windows: a window opened by a late vent and reopened by the
        state's command ran 6 s, into the guard's next vent. Quiet means 3 s: an MPC's first
        step took over 1 s with both cores busy.

        /joint_states is best effort, and matched on the probe's side is not yet matched on the
        node's: a first state can be dropped by a reader that has not matched this writer yet
        (CI, loaded: vents every 50 ms for 10 s). The guard's vents going on, `resend_after` of
        them since the state was sent (half a second of them, far more than can be in flight),
        mean the node never took it: it is sent again."""
        assert quiet < STALE_TIMEOUT, "the quiet would end in the stale guard's vent"
        n = len(self.commands)
        message = self.message(q, qd, sec, nanosec)
        self.state_pub.publish(message)
        sent_at = n
        self.wait_for(lambda: len(self.commands) > n, timeout, 'a /valve/command')
        end = time.monotonic() + timeout
        while (left := quiet - (time.monotonic() - self.last_received)) > 0:
            assert time.monotonic() < end, f'no {quiet} s without a command: {self.sources[n:]}'
            if len(self.commands) - sent_at >= resend_after:
                self.state_pub.publish(message)
                sent_at = len(self.commands)
            self.spin(min(left, 0.05))
        extra = self.commands[n:-1]
        assert all(c == [0.0, 0.0] for c in extra), (  # a string: printed whole, not cut
            f'{extra}; from (writer, sequence, source stamp): {self.sources[n:]}'
        )
        return self.commands[-1]

    def set(self, **values):
        cli = self.node.create_client(SetParameters, '/controller/set_parameters')
        assert cli.wait_for_service(10.0)
        req = SetParameters.Request(
            parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]
        )
        fut = cli.call_async(req)
        self.executor.spin_until_future_complete(fut, timeout_sec=10.0)
        return fut.result().results

    def get(self, *names):
        cli = self.node.create_client(GetParameters, '/controller/get_parameters')
        assert cli.wait_for_service(10.0)
        fut = cli.call_async(GetParameters.Request(names=list(names)))
        self.executor.spin_until_future_complete(fut, timeout_sec=10.0)
        values = [
            Parameter.from_parameter_msg(ParameterMsg(name=n, value=v)).value
            for n, v in zip(names, fut.result().values, strict=True)
        ]
        return [list(v) if not isinstance(v, (int, float, str, bool)) else v for v in values]


@pytest.fixture
def controller(request, private_node):
    """The controller node on the test's own domain: a process an earlier test left on the
    session's domain must not send it states or add commands to the probe's."""
    kind = getattr(request, 'param', 'pid')
    proc = start_node(
        'equimus_control',
        'controller',
        '-p',
        f'controller:={kind}',
        '-p',
        f'stale_timeout:={STALE_TIMEOUT}',
        domain=private_node.context.get_domain_id(),
    )
    yield kind, proc
    out = stop(proc)
    assert 'Traceback' not in out, out[-3000:]


def test_parameters_follow_ros2_param_set(controller, private_node):
    from equimus_control.reference import triangle_poses
    from equimus_description.leg import load_leg
    from equimus_description.statics import StaticParams, holding_pressures

    params = StaticParams.from_leg(load_leg())
    pose = triangle_poses(params)[2]  # held by (19.80, 8.52) kPa
    assert holding_pressures(pose, params)[0] > 15.0
    probe = Probe(private_node)
    probe.wait_connected()
    probe.reference(pose, [0.0, 0.0], 0, 0)
    u = [probe.state(pose, [0.0, 0.0], 1, k * 8_333_333) for k in range(5)][-1]
    assert u[0] > 15.0, u

    # runtime: p_max applies from the next command on
    (r,) = probe.set(p_max=10.0)
    assert r.successful, r.reason
    u = probe.state(pose, [0.0, 0.0], 2, 0)
    assert max(u) <= 10.0 and u[0] == pytest.approx(10.0), u
    assert probe.get('p_max') == [10.0]

    # runtime: PID gains, read back
    (r,) = probe.set(kp=[3.5, 1.0])
    assert r.successful, r.reason
    assert probe.get('kp') == [[3.5, 1.0]]

    # invalid values are refused with a reason, the old value stays
    (r,) = probe.set(p_max=60.0)
    assert not r.successful and 'p_max' in r.reason, r.reason
    (r,) = probe.set(p_max=math.nan)
    assert not r.successful and r.reason, r.reason
    (r,) = probe.set(kp=[math.nan, 1.5])
    assert not r.successful and 'kp' in r.reason, r.reason
    (r,) = probe.set(safe_min=[2.6, -0.1])
    assert not r.successful and 'safe_min' in r.reason, r.reason
    assert probe.get('p_max', 'kp') == [10.0, [3.5, 1.0]]
    u = probe.state(pose, [0.0, 0.0], 3, 0)
    assert max(u) <= 10.0, u

    # read-only: fixed at start, refused with a reason
    for name, value in (
        ('controller', 'mpc'),
        ('leg_parameter_set', 'rig'),
        ('pressure_sign', -1.0),
    ):
        (r,) = probe.set(**{name: value})
        assert not r.successful and 'read-only' in r.reason.lower(), (name, r.reason)

    # the guard range is runtime too: a range that excludes the pose vents
    (r,) = probe.set(safe_max=[pose[0] - 0.1, 2.0])
    assert r.successful, r.reason
    assert probe.state(pose, [0.0, 0.0], 4, 0) == [0.0, 0.0]


def recorded_sequence():
    """A joint-state and reference record (what /joint_states and /reference/joint carried):
    the leg lagging a moving reference with noise, one lost-tracking frame (NaN) and one
    joint-limit breach; the references arrive every 15 frames, late and early w.r.t. the states.
    Events: ('ref', q, qd, sec, nsec) and ('state', q, qd, sec, nsec)."""
    rng = np.random.default_rng(12)
    events = []
    t0_ns = 1_700_000_000 * 10**9
    for k in range(90):
        t = k / 120
        ns = t0_ns + k * 8_333_333
        if k % 15 == 0:
            rq = np.array([1.4 + 0.2 * math.sin(t), 0.6 + 0.3 * math.sin(2 * t)])
            rqd = np.array([0.2 * math.cos(t), 0.6 * math.cos(2 * t)])
            ref_ns = ns - 30_000_000 if k % 30 == 0 else ns + 5_000_000
            events.append(('ref', rq, rqd, *divmod(ref_ns, 10**9)))
        q = np.array([1.38 + 0.15 * math.sin(t - 0.1), 0.62 + 0.25 * math.sin(2 * t - 0.2)])
        q += rng.normal(0, 0.002, 2)
        qd = np.array([0.15 * math.cos(t), 0.5 * math.cos(2 * t)]) + rng.normal(0, 0.05, 2)
        if k == 40:
            q = np.array([math.nan, math.nan])
            qd = q.copy()
        if k == 60:
            q = np.array([2.6, 0.6])
        events.append(('state', q, qd, *divmod(ns, 10**9)))
    return events


def harness_commands(kind, events):
    """The same events through the offline harness's ControlStep, built like the node builds
    its controller."""
    from equimus_control.controllers import controller_kind
    from equimus_control.plant import plant_factory
    from equimus_control.step import ControlStep, stamp_seconds
    from equimus_control.supervisor import SafetyConfig
    from equimus_description.leg import load_leg
    from equimus_description.statics import StaticParams

    leg = load_leg()
    k = controller_kind(kind)
    ctrl = k.build(k.config(), StaticParams.from_leg(leg), leg, plant_factory)
    step = ControlStep(ctrl, SafetyConfig(stale_timeout=STALE_TIMEOUT))
    out = []
    for i, (what, q, qd, sec, nsec) in enumerate(events):
        # through the message types, as the node sees them
        m = Probe.message(q, qd, sec, nsec)
        if what == 'ref':
            step.set_reference(m.position, m.velocity, stamp_seconds(sec, nsec))
        else:
            out.append(step.step(m.position, m.velocity, stamp_seconds(sec, nsec), float(i)))
    return [list(c.pressures) for c in out], out


def bits(values):
    return [struct.pack('<d', float(v)).hex() for v in values]


@pytest.mark.parametrize('controller', ['pid', 'mpc', 'ltv_mpc'], indirect=True)
def test_node_and_harness_give_bit_identical_commands(controller, private_node):
    kind, _ = controller
    events = recorded_sequence()
    expected, cmds = harness_commands(kind, events)
    assert any(c.vented for c in cmds) and sum(not c.vented for c in cmds) > 80
    probe = Probe(private_node)
    probe.wait_connected(timeout=60.0)
    got = []
    for what, q, qd, sec, nsec in events:
        if what == 'ref':
            probe.reference(q, qd, sec, nsec)
        else:
            got.append((probe.state if got else probe.first_state)(q, qd, sec, nsec))
    assert len(got) == len(expected)
    mismatches = [
        (i, g, e) for i, (g, e) in enumerate(zip(got, expected, strict=True)) if bits(g) != bits(e)
    ]
    assert not mismatches, mismatches[:5]


def test_a_pid_controller_starts_without_the_solvers_and_mujoco():
    """A PID controller process (the default) builds no QP and no MuJoCo model: it must not
    import osqp, scipy.sparse or mujoco (0.25 s of CPU at each start, for every kind's config
    class). The controllers that use them import them where they do (test_mpc.py,
    test_ltv_mpc.py, test_sampling.py and the MPC closed loops run them)."""
    import subprocess
    import sys

    heavy = ('osqp', 'scipy.sparse', 'mujoco')
    code = (
        'import sys, rclpy\n'
        'from equimus_control.controller_node import ControllerNode\n'
        'rclpy.init()\n'
        'node = ControllerNode()\n'
        f'print(sorted(m for m in {heavy!r} if m in sys.modules))\n'
        'node.destroy_node()\n'
        'rclpy.shutdown()\n'
    )
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == '[]', r.stdout
