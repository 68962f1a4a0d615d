"""The composed sim graph (equimus_bringup.sim_graph) as `sim.launch.py` starts it: one process,
lockstep by direct calls, every topic recorded; stepped from outside over real rclpy; and two runs
of the same seed, configuration and reference give byte-identical bags."""

import os
import subprocess
import sys
import time

import pytest
from mcap.reader import make_reader
from paramclient import set_parameters
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from std_srvs.srv import Trigger

from equimus_bringup.graph import describe_graph
from equimus_bringup.supervisor import Supervisor
from equimus_record import bag as bagio

FRAME_NS = 1e9 / 120
CONTROL_TOPICS = (
    '/clock',
    '/mocap/base/pose',
    '/mocap/thigh/pose',
    '/mocap/calf/pose',
    '/sim/joint_states',
    '/joint_states',
    '/valve/command',
    '/valve/applied',
    '/valve/pressure',
    '/reference/joint',
)
# Wall-clock figures (rates, jitter, timing) and logs: not part of a run's payload.
WALL_TOPICS = ('/diagnostics', '/rosout', '/parameter_events')


class Graph:
    """The composed graph in its own process, and /clock seen from this one."""

    def __init__(self, node, tmp_path, name, **args):
        self.node = node
        self.bag = tmp_path / name
        overrides = {'record': 'true', 'bag': str(self.bag), **args}
        self.specs = describe_graph('sim', overrides)
        assert [s.name for s in self.specs] == ['sim_graph']
        self.sup = Supervisor(self.specs, echo=False)
        self.now_ns = -1
        self.sub = node.create_subscription(
            Clock,
            '/clock',
            self._on_clock,
            QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT),
        )

    def _on_clock(self, msg):
        self.now_ns = msg.clock.sec * 1_000_000_000 + msg.clock.nanosec

    def spin_until(self, cond, timeout, what):
        import rclpy

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.sup.poll() is None, self.sup.failed
            if cond():
                return
            rclpy.spin_once(self.node, timeout_sec=0.02)
        pytest.fail(f'timed out after {timeout} s waiting for {what}')

    def wait_paused_at(self, t_s, timeout=120.0):
        target = round(t_s * 120) * FRAME_NS
        self.spin_until(lambda: abs(self.now_ns - target) < 1e3, timeout, f'sim time {t_s} s')
        stopped = self.now_ns
        t_end = time.monotonic() + 0.5
        self.spin_until(lambda: time.monotonic() > t_end, 2.0, 'a pause')
        assert self.now_ns == stopped, 'the simulation did not stay paused'

    def stop(self):
        codes = self.sup.stop()
        self.node.destroy_subscription(self.sub)
        return codes


def _payloads(bag, before_ns):
    """(topic, log time, CDR bytes) of every message logged before `before_ns`, in file order."""
    with open(next(bag.glob('*.mcap')), 'rb') as fh:
        return [
            (channel.topic, message.log_time, bytes(message.data))
            for _, channel, message in make_reader(fh).iter_messages(log_time_order=False)
            if channel.topic not in WALL_TOPICS and message.log_time < before_ns
        ]


def test_composed_graph_records_every_topic_and_steps_from_outside(ros_node, tmp_path):
    g = Graph(ros_node, tmp_path, 'bag', pause_at='2.0')
    try:
        g.sup.start()
        g.wait_paused_at(2.0)
        assert set_parameters(ros_node, 'sim', step_frames=6)[0].successful
        client = ros_node.create_client(Trigger, '/sim/step')
        assert client.wait_for_service(20.0)
        fut = client.call_async(Trigger.Request())
        g.spin_until(fut.done, 20.0, 'the ~/step answer')
        assert fut.result().success, fut.result().message
        g.wait_paused_at(2.0 + 6 / 120)
    finally:
        codes = g.stop()
    assert codes == {'sim_graph': 0}, codes
    counts = bagio.topic_counts(g.bag)
    for topic in CONTROL_TOPICS + ('/diagnostics', '/tf'):
        assert topic in counts, f'{topic} missing from the bag: {sorted(counts)}'
    # The state_publisher's latched messages, published before the hand-off existed, are in it.
    for topic in ('/robot_description', '/tf_static'):
        assert counts.get(topic, (None, 0))[1] == 1, (topic, counts.get(topic))
    frames = 2 * 120 + 6 + 1  # frame 0 included
    # Lockstep by direct calls: one estimate, one command and one applied pressure per frame.
    for topic in ('/sim/joint_states', '/mocap/calf/pose', '/joint_states', '/reference/joint'):
        assert counts[topic][1] == frames, (topic, counts[topic])
    # Every frame answered, once: the guards run on sim time, so the wall seconds spent paused
    # (the pause, the ~/step call) add no vent (on the steady clock they did, at the paused time).
    on_frames = [round(k * FRAME_NS) for k in range(frames)]
    commands = [log for _, log, _ in bagio.read_messages(g.bag, ['/valve/command'])]
    assert sorted(commands) == on_frames
    applied = list(bagio.read_messages(g.bag, ['/valve/applied']))
    assert {log for _, log, _ in applied} == set(on_frames)
    # The bag's time is sim time: every estimate is stamped and logged on a frame.
    msgs = list(bagio.read_messages(g.bag, ['/joint_states']))
    assert [log for _, log, _ in msgs] == [round(k * FRAME_NS) for k in range(frames)]
    # The driver and the reference stamp on the frame's time, which they read from the graph
    # (their clocks are set every CLOCK_FRAMES frames only).
    reference = list(bagio.read_messages(g.bag, ['/reference/joint']))
    for _, log, m in msgs + applied + reference:
        assert m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec == log, m


@pytest.fixture
def busy_cores(request):
    """With param 'loaded': one busy-looping process per core (at this process's niceness) for
    the test's duration, so the graph's process gets its CPU late and in pieces, as in CI at
    load 8; 'idle': nothing."""
    procs = []
    if request.param == 'loaded':
        for _ in range(os.cpu_count() or 1):
            procs.append(subprocess.Popen([sys.executable, '-c', 'while True: pass']))
    yield request.param
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize('busy_cores', ['idle', 'loaded'], indirect=True)
def test_two_runs_give_byte_identical_bags(ros_node, tmp_path, busy_cores):
    """Same seed, configuration and reference: the same messages, byte for byte, in the same
    order at the same sim times, with mocap noise, frame drops and occlusions drawn from the
    seeded generator; also with every core busy, where the graph's process stalls for many
    frames' worth of wall time (a guard on the wall clock would then vent). Compared up to the
    last frame before the pause."""
    params = tmp_path / 'noise.yaml'
    params.write_text(
        'sim:\n  ros__parameters:\n'
        '    mocap_position_noise: 0.0005\n'
        '    mocap_orientation_noise: 0.002\n'
        '    mocap_drop_probability: 0.02\n'
        '    mocap_occlusion_probability: 0.01\n'
        '    seed: 11\n'
    )
    pause_at = 3.0
    runs = []
    for name in ('run_a', 'run_b'):
        g = Graph(ros_node, tmp_path, name, pause_at=str(pause_at), params_file=str(params))
        try:
            g.sup.start()
            g.wait_paused_at(pause_at)
        finally:
            codes = g.stop()
        assert codes == {'sim_graph': 0}, codes
        runs.append(_payloads(g.bag, round(pause_at * 1e9)))
        # Paused at least 0.5 wall s before the stop: nothing on sim time ran meanwhile, so the
        # pause frame has its one command (a guard on the wall clock would add vents).
        pause_ns = round(pause_at * 1e9)
        at_pause = [log for _, log, _ in bagio.read_messages(g.bag, ['/valve/command'])]
        assert at_pause.count(pause_ns) == 1, at_pause[-5:]
    a, b = runs
    topics = {t for t, _, _ in a}
    assert set(CONTROL_TOPICS) <= topics, sorted(topics)
    assert len(a) > 8 * 120 * pause_at  # ten topics a frame, less the dropped poses
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        assert x == y, f'message {i} differs: {x[:2]} vs {y[:2]}'
    assert len(a) == len(b)
    # The seeded generator was drawn from: frames were dropped (the same ones in both runs).
    calf = [d for t, _, d in a if t == '/mocap/calf/pose']
    assert len(calf) < pause_at * 120


def test_the_guards_vent_on_sim_time(ros_node, tmp_path):
    """The valve driver's watchdog and the controller's stale-state guard in the composed graph
    count sim time: a mocap loss of 95 frames (seed 20 draws one, frames 241-335) leaves the
    controller without states and the driver without commands. The driver vents when no command
    came for command_timeout_s (0.25 s) of sim time, the controller when no state came for its
    stale_timeout (0.5 s here), each at the first frame past it. On the wall clock (a lockstep
    run is several times faster than real time) neither would have fired within the loss."""
    params = tmp_path / 'loss.yaml'
    params.write_text(
        'sim:\n  ros__parameters:\n'
        '    mocap_drop_probability: 0.004\n'
        '    mocap_drop_burst_mean: 120.0\n'
        '    seed: 20\n'
        'controller:\n  ros__parameters:\n'
        '    stale_timeout: 0.5\n'
    )
    g = Graph(ros_node, tmp_path, 'bag', pause_at='3.0', params_file=str(params))
    try:
        g.sup.start()
        g.wait_paused_at(3.0)
    finally:
        codes = g.stop()
    assert codes == {'sim_graph': 0}, codes
    states = [log for _, log, _ in bagio.read_messages(g.bag, ['/joint_states'])]
    gaps = [(a, b) for a, b in zip(states, states[1:], strict=False) if b - a > 0.5e9]
    assert len(gaps) == 1, gaps
    last_state, back = gaps[0]
    assert (last_state, back) == (round(240 * FRAME_NS), round(336 * FRAME_NS))
    frame = round(FRAME_NS)

    def after(topic):
        return [
            (log, list(m.data if topic == '/valve/command' else m.effort))
            for _, log, m in bagio.read_messages(g.bag, [topic])
            if last_state < log < back
        ]

    applied, commands = after('/valve/applied'), after('/valve/command')
    assert applied, 'nothing on /valve/applied during the loss: the watchdog did not vent'
    assert commands, 'no /valve/command during the loss: the stale guard did not vent'
    before = {log: list(m.effort) for _, log, m in bagio.read_messages(g.bag, ['/valve/applied'])}
    assert max(before[last_state]) > 1.0, 'the valves held pressure before the loss'
    # The driver's watchdog: its vent is the first /valve/applied of the loss.
    t, kpa = applied[0]
    assert 0.25e9 < t - last_state <= 0.25e9 + frame and kpa == [0.0, 0.0], applied[:2]
    # The controller's stale guard: silent until 0.5 s of sim time, then a vent every frame.
    t, kpa = commands[0]
    assert 0.5e9 < t - last_state <= 0.5e9 + frame and kpa == [0.0, 0.0], commands[:2]
    assert [log for log, _ in commands] == [
        log for log in (round(k * FRAME_NS) for k in range(241, 336)) if log >= t
    ]


def test_the_composed_spec_holds_every_node_with_its_own_parameters():
    (spec,) = describe_graph('sim', {'record': 'true', 'bag': 'b', 'controller': 'mpc'})
    assert (spec.package, spec.executable) == ('equimus_bringup', 'sim_graph')
    assert spec.nodes == (
        'sim',
        'valve_driver',
        'estimator',
        'controller',
        'reference',
        'recorder',
        'state_publisher',  # started last in both graphs
        'sim_graph',
    )
    p = spec.node_parameters
    assert spec.parameters == {}  # nothing process-wide: use_sim_time must not reach the sim
    assert 'use_sim_time' not in p['sim'] and p['sim']['mode'] == 'lockstep'
    assert p['sim']['real_time_factor'] == 0.0  # lockstep: as fast as the graph answers
    for name in ('valve_driver', 'estimator', 'controller', 'reference', 'recorder', 'sim_graph'):
        assert p[name]['use_sim_time'] is True, name
    assert p['controller']['controller'] == 'mpc' and p['valve_driver']['board'] == 'sim'
    assert p['sim_graph']['record'] is True and p['recorder']['bag_path'] == 'b'
    (plain,) = describe_graph('sim')
    assert plain.node_parameters['sim_graph']['record'] is False
    assert 'recorder' not in plain.nodes
    with pytest.raises(ValueError, match='composed'):
        describe_graph('sim', {'sim_mode': 'realtime'})
    with pytest.raises(ValueError, match='composed'):
        describe_graph('hardware', {'composed': 'true'})
    split = describe_graph('sim', {'sim_mode': 'realtime', 'composed': 'false'})
    assert split[0].parameters['real_time_factor'] == 1.0


def test_a_publication_dds_refuses_does_not_stop_the_graph():
    """The composed graph's DDS copy for outside subscribers can be refused (Fast DDS "cannot
    publish data" under load killed the graph once): the message is still delivered in the
    process, the refusal is counted for /diagnostics, and warned about once a second."""
    import rclpy
    from std_msgs.msg import Bool

    from equimus_bringup.sim_graph import InProcessBus

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('talker', context=context)
    pub = node.create_publisher(Bool, '/refused', 10)
    bus = InProcessBus(None)
    warnings: list[str] = []
    bus.warn = warnings.append
    got: list[Bool] = []
    bus.subscribers['/refused'] = [(got.append, False)]
    bus.attach([node])
    route = next(r for r in bus.routes if r.topic == '/refused')
    route.outside, route.next_check = True, float('inf')  # as with a subscriber outside
    with context.handle:  # rcl's context shut down under the node: rcl refuses each publication
        context.handle.shutdown()
    for value in (True, False, True):
        pub.publish(Bool(data=value))
    assert [m.data for m in got] == [True, False, True]
    assert bus.dds_failed == 3 and bus.dds_published == 0
    assert bus.failure.startswith('/refused: ') and len(warnings) == 1, warnings
    assert warnings[0].startswith('1 publication(s)') and 'the graph runs on' in warnings[0]
    node.destroy_node()
    rclpy.try_shutdown(context=context)


def test_the_nodes_clocks_are_set_every_clock_frames_and_whenever_asked_or_time_goes_back():
    """The frame's time is kept at every frame (the lockstep nodes read it); the nodes' clocks,
    which then serve only timers and the stamps of /diagnostics and /rosout, are set at the
    first frame, every CLOCK_FRAMES frames after, when the graph asks (a ~/step frame, the
    pause) and when time goes back (a reset)."""
    from equimus_bringup.sim_graph import CLOCK_FRAMES, InProcessBus

    bus = InProcessBus(None)
    set_at: list[int] = []
    bus._set_clocks = set_at.append  # type: ignore[method-assign]
    frame_ns = round(FRAME_NS)
    for k in range(3 * CLOCK_FRAMES):
        bus.frame(k * frame_ns)
        assert bus.time() == k * frame_ns
    assert set_at == [k * frame_ns for k in range(0, 3 * CLOCK_FRAMES, CLOCK_FRAMES)]
    set_at.clear()
    t = 3 * CLOCK_FRAMES * frame_ns
    bus.frame(t, set_clocks=True)  # asked (a ~/step frame)
    bus.frame(t + frame_ns)
    bus.frame(frame_ns)  # back (a reset)
    bus.frame(2 * frame_ns)
    assert set_at == [t, frame_ns]
    bus.set_clocks()  # the graph's paused-clock timer
    assert set_at == [t, frame_ns, 2 * frame_ns]
