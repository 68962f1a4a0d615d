"""Bad input, the matrix of issue 28: every bad file, argument or place is one line, exit 2, no
traceback, and nothing started or written.

`equimus launch` and `make run` (main_job) check everything the graph will read before starting
anything (equimus_bringup.prestart): parameter files against the nodes' config dataclasses
(unknown names with the closest known one, ROS types, ranges, the configs' own checks), leg
files, launch booleans, the bag folder. The offline commands (identify, evaluate, bag) and a node
alone (the recorder) say in one line what is wrong with their input or their storage. Launch
and main_job cases run in this process (an exception would fail the test as a traceback would
show); the others are real processes. The launch files' own refusal is in test_ros2_launch.py.
"""

import math
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from equimus_bringup import cli, main_job
from equimus_bringup.graph import default_config_dir as _config_dir

CONFIG = Path(_config_dir())
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
POSITIVE_KEYS = [
    f'actuators.{a}.{k}' for a in ('maa', 'baa') for k in ('m', 'l0', 'k', 'c', 'area')
] + [f'bodies.{b}.mass' for b in ('thigh', 'calf')]
INVALID = st.sampled_from([math.nan, math.inf, -math.inf, 'abc', None, [], {}, [1.0, 2.0], -1.0])
ONE_LINE = re.compile(r'^equimus: (?P<path>[^\n:]+):(?P<line>\d+): (?P<key>[\w.]+): [^\n]+$')


def _launch(capsys, tmp_path, *assignments):
    bag = tmp_path / 'bag'
    code = cli.main(['launch', 'sim', 'record:=true', f'bag:={bag}', *assignments])
    err = capsys.readouterr().err.strip()
    assert not bag.exists()  # nothing written
    return code, err


@SETTINGS
@given(key=st.sampled_from(POSITIVE_KEYS), value=INVALID, nested=st.booleans())
def test_bad_leg_override(capsys, tmp_path, key, value, nested):
    f = tmp_path / 'fit.yaml'
    doc = {key: value}
    if nested:
        a, b, c = key.split('.')
        doc = {a: {b: {c: value}}}
    f.write_text(yaml.safe_dump(doc))
    code, err = _launch(capsys, tmp_path, f'leg_overrides:={f}')
    assert code == 2, err
    m = ONE_LINE.match(err)
    assert m and m['path'] == str(f) and m['key'] == key, err


@SETTINGS
@given(
    node_file=st.sampled_from(['valve.yaml', 'recorder.yaml', 'control.yaml']),
    value=st.sampled_from([math.nan, math.inf, [1, 'a'], [[1]]]),
)
def test_bad_parameter_file(capsys, tmp_path, node_file, value):
    cfg = tmp_path / 'cfg'
    if not cfg.exists():
        shutil.copytree(CONFIG, cfg)
    doc = yaml.safe_load((CONFIG / node_file).read_text())
    params = doc[next(iter(doc))]['ros__parameters']
    key = sorted(params)[0]
    params[key] = value
    (cfg / node_file).write_text(yaml.safe_dump(doc))
    code, err = _launch(capsys, tmp_path, f'config_dir:={cfg}')
    assert code == 2, err
    m = ONE_LINE.match(err)
    assert m and m['path'] == str(cfg / node_file) and m['key'] == key, err
    shutil.copy(CONFIG / node_file, cfg / node_file)


# ---------------------------------------------------------------- the matrix

CONTROLLER = 'controller:\n  ros__parameters:\n'
DRIVER = 'valve_driver:\n  ros__parameters:\n'


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


#: wall s a graph that a case failed to refuse runs before it stops on its own
BOUND = ['--duration', '20']


def _launch_args(t: Path, *extra: str) -> list[str]:
    return ['launch', *BOUND, 'sim', 'record:=true', f'bag:={t / "bag"}', *extra]


def _params(t: Path, text: str, *extra: str) -> list[str]:
    return _launch_args(t, f'params_file:={_write(t / "params.yaml", text)}', *extra)


NATNET = 'natnet_bridge:\n  ros__parameters:\n'
BAD_CAL = 'maa: {dac_gain: x}\n'


def _rig(t: Path, *extra: str) -> list[str]:
    """The hardware graph, recorded, on the nominal calibration (none is needed to refuse)."""
    return [
        'launch',
        *BOUND,
        'hardware',
        'record:=true',
        f'bag:={t / "bag"}',
        'calibration:=none',
        *extra,
    ]


def _rig_params(t: Path, text: str) -> list[str]:
    return _rig(t, f'params_file:={_write(t / "params.yaml", text)}')


def _leg(t: Path, text: str) -> list[str]:
    return _launch_args(t, f'leg_overrides:={_write(t / "fit.yaml", text)}')


def _static_header(t: Path) -> Path:
    return _write(t / 'StaticPoint_header.csv', 'P1,P2,theta1,theta2\n')


def _tocenter_header(t: Path) -> Path:
    from equimus_identification.data import TOCENTER_COLUMNS

    return _write(t / 'ToCenter_header.csv', ','.join(TOCENTER_COLUMNS) + '\n')


def _bag(t: Path, name: str, chunk_size: int = 4096) -> Path:
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Float64MultiArray

    from equimus_record import bag

    path = t / name
    w = bag.BagWriter(path, chunk_size=chunk_size)
    w.add_topic('/valve/command', 'std_msgs/msg/Float64MultiArray')
    for i in range(600):
        w.write('/valve/command', 1000 * (i + 1), serialize_message(Float64MultiArray(data=[i])))
    w.close()
    return path


def _garbage_bag(t: Path) -> Path:
    d = t / 'garbage'
    d.mkdir()
    (d / 'garbage_0.mcap').write_bytes(b'PK\x03\x04 a zip, not a bag')
    return d


def _joint_bag(t: Path, name: str, corrupt: str) -> Path:
    """A closed bag that evaluate can replay, but for `corrupt`: 'chunk' (a chunk in the middle
    of the file fails its checksum) or 'message' (one that does not decode)."""
    from sensor_msgs.msg import JointState

    from equimus_record import bag
    from equimus_ros.cdr import MessageEncoder

    encode = MessageEncoder(JointState).encode
    path = t / name
    w = bag.BagWriter(path, chunk_size=4096)
    for topic in ('/joint_states', '/valve/applied'):
        w.add_topic(topic, 'sensor_msgs/msg/JointState')
    for i in range(600):
        ns = 1_000_000 + i * 8_333_333
        state = JointState(name=['hip', 'knee'], position=[1.4, 0.8], velocity=[0.0, 0.0])
        state.header.stamp.sec, state.header.stamp.nanosec = divmod(ns, 10**9)
        data = b'\x00\x01\x00\x00garbage' if corrupt == 'message' and i == 300 else encode(state)
        w.write('/joint_states', ns, data)
        applied = JointState(name=['maa', 'baa'], effort=[10.0, 5.0])
        applied.header = state.header
        w.write('/valve/applied', ns, encode(applied))
    w.close()
    if corrupt == 'chunk':
        _flip_chunk_crc(path / f'{name}_0.mcap')
    return path


def _flip_chunk_crc(f: Path) -> None:
    """Flip the checksum of the chunk nearest the middle of MCAP file `f`, so that chunk fails
    it. Not bytes at a fixed place: the writer also flushes a chunk every `flush_period` of wall
    time, so on a loaded machine the chunks fall elsewhere, and flipped compressed bytes may
    fail the decompression first (another, as clear, error)."""
    b = bytearray(f.read_bytes())
    pos, chunks = 8, []  # after the magic: records of opcode (1), length (8), content
    while pos + 9 <= len(b):
        if b[pos] == 0x06:
            chunks.append(pos)
        pos += 9 + int.from_bytes(b[pos + 1 : pos + 9], 'little')
    at = min(chunks, key=lambda c: abs(c - len(b) // 2)) + 9 + 24  # after the times and size
    assert b[at : at + 4] != bytes(4), 'the chunk has no checksum'
    b[at : at + 4] = bytes(x ^ 0x5A for x in b[at : at + 4])
    f.write_bytes(bytes(b))


def _dead_bag(t: Path) -> Path:
    """A bag whose writer died without closing it (repair has work to do)."""
    code = (
        'import sys, os, pathlib\n'
        'from rclpy.serialization import serialize_message\n'
        'from std_msgs.msg import Float64MultiArray\n'
        'from equimus_record import bag\n'
        'w = bag.BagWriter(pathlib.Path(sys.argv[1]), chunk_size=4096)\n'
        "w.add_topic('/valve/command', 'std_msgs/msg/Float64MultiArray')\n"
        'for i in range(600):\n'
        "    w.write('/valve/command', 1000 * (i + 1), "
        'serialize_message(Float64MultiArray(data=[i])))\n'
        'os._exit(0)\n'
    )
    subprocess.run([sys.executable, '-c', code, str(t / 'dead')], check=True, timeout=60)
    return t / 'dead'


def _cli_proc(*args) -> list[str]:
    return [sys.executable, '-m', 'equimus_bringup.cli', *map(str, args)]


@dataclass(frozen=True)
class Case:
    """run: 'equimus' / 'main_job' (their main() in this process) or 'process' (a command);
    args(tmp_path, request) makes the inputs and returns the arguments; says: in the line."""

    run: str
    args: Callable[[Path, pytest.FixtureRequest], list[str]]
    says: str


STATIC = 'physical/static/StaticPoint_effective_13.csv'

MATRIX = {
    # parameter files, checked against the nodes' config dataclasses (item 2)
    'NatNet: a rigid body listed twice': Case(
        'equimus',
        lambda t, r: _rig_params(t, NATNET + '    rigid_bodies: [base, base, calf]\n'),
        "params.yaml:3: rigid_bodies: rigid_bodies lists ['base'] more than once",
    ),
    'NatNet: a multicast group that is not one': Case(
        'equimus',
        lambda t, r: _rig_params(t, NATNET + '    multicast_group: 10.0.0.1\n'),
        "params.yaml:3: multicast_group: multicast_group='10.0.0.1': not a multicast address",
    ),
    'NatNet: an up axis Motive does not have': Case(
        'equimus',
        lambda t, r: _rig_params(t, NATNET + '    up_axis: w_up\n'),
        "params.yaml:3: up_axis: up_axis='w_up': use 'y_up' or 'z_up'",
    ),
    'NatNet: a server address that is not one': Case(
        'equimus',
        lambda t, r: _rig(t, 'natnet_server:=999.1.1.1'),
        "server_address='999.1.1.1': not an IPv4 address",
    ),
    'an empty serial port': Case(
        'equimus',
        lambda t, r: _rig(t, 'serial_port:='),
        "port='': name the DAC board's serial device",
    ),
    'a calibration file that is not one': Case(
        'equimus',
        lambda t, r: ['launch', 'hardware', f'calibration:={_write(t / "cal.yaml", BAD_CAL)}'],
        'cal.yaml: not a valve calibration of format 1',
    ),
    'a rig check mocap timeout out of range': Case(
        'equimus',
        lambda t, r: _rig(t, 'check:=true', 'check_mocap_timeout:=9'),
        'check_mocap_timeout:=9 must be 0.05 to 5 s',
    ),
    'a rig check mocap timeout without the check': Case(
        'equimus',
        lambda t, r: _rig(t, 'check_mocap_timeout:=1'),
        'check_mocap_timeout:= applies to the rig check: use it with check:=true',
    ),
    'a rig truth for the simulated leg': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'rig_truth:=random:1'),
        "rig_truth:=random:1 is the emulated rig's plant",
    ),
    'a rig truth file that is not YAML': Case(
        'equimus',
        lambda t, r: _rig(
            t, 'emulator:=true', f'rig_truth:={_write(t / "truth.yaml", "{parameters: [1, 2")}'
        ),
        'truth.yaml:1: YAML syntax error',
    ),
    'a rig truth seed that is not one': Case(
        'equimus',
        lambda t, r: _rig(t, 'emulator:=true', 'rig_truth:=random:abc'),
        'use random:SEED',
    ),
    'typo in a safety limit': Case(
        'equimus',
        lambda t, r: _params(t, CONTROLLER + '    p_maxx: 40.0\n'),
        'params.yaml:3: p_maxx: unknown parameter of controller; did you mean p_max?',
    ),
    'p_max above 50 kPa': Case(
        'equimus',
        lambda t, r: _params(t, CONTROLLER + '    p_max: 80.0\n'),
        'params.yaml:3: p_max: 80.0 is out of range [0, 50] (controller)',
    ),
    'max_kpa above 50 kPa': Case(
        'equimus',
        lambda t, r: _params(t, DRIVER + '    max_kpa: 80.0\n'),
        'params.yaml:3: max_kpa: 80.0 is out of range [0, 50] (valve_driver)',
    ),
    'gains of the wrong type': Case(
        'equimus',
        lambda t, r: _params(t, CONTROLLER + '    kp: "abc"\n'),
        "params.yaml:3: kp: must be a list of doubles, not a string: 'abc'",
    ),
    'negative watchdog': Case(
        'equimus',
        lambda t, r: _params(t, DRIVER + '    command_timeout_s: -1.0\n', 'composed:=false'),
        'params.yaml:3: command_timeout_s: -1.0 is out of range [0.01, 10]',
    ),
    'an integer for a double': Case(
        'equimus',
        lambda t, r: _params(t, CONTROLLER + '    p_max: 40\n'),
        'p_max: must be a double, not an integer: 40 (write 40.0',
    ),
    'a misspelt node': Case(
        'equimus',
        lambda t, r: _params(t, 'controlr:\n  ros__parameters:\n    p_max: 40.0\n'),
        'params.yaml:2: controlr: unknown node',
    ),
    'a typo under /**': Case(
        'equimus',
        lambda t, r: _params(t, '/**:\n  ros__parameters:\n    use_sim_tme: true\n'),
        'use_sim_tme: unknown parameter of any node; did you mean use_sim_time?',
    ),
    'a missing parameter file': Case(
        'equimus',
        lambda t, r: _launch_args(t, f'params_file:={t / "nope.yaml"}'),
        'nope.yaml: cannot read the parameter file',
    ),
    'a bad value from a launch argument': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'reference:=zigzag'),
        'launch arguments: reference.trajectory:',
    ),
    # leg descriptions
    'a malformed leg YAML': Case(
        'equimus', lambda t, r: _leg(t, 'bodies: [thigh\n'), 'fit.yaml:2: YAML syntax error'
    ),
    'a NaN mass': Case(
        'equimus',
        lambda t, r: _leg(t, 'bodies: {thigh: {mass: .nan}}\n'),
        'fit.yaml:1: bodies.thigh.mass:',
    ),
    'a negative mass': Case(
        'equimus',
        lambda t, r: _leg(t, 'bodies:\n  calf:\n    mass: -1.0\n'),
        'fit.yaml:3: bodies.calf.mass: must be > 0',
    ),
    'a leg file named by a node parameter': Case(
        'equimus',
        lambda t, r: _params(
            t,
            'sim:\n  ros__parameters:\n    leg_description: '
            + str(_write(t / 'leg.yaml', 'bodies: [\n'))
            + '\n',
            'composed:=false',
        ),
        'params.yaml:3: leg_description: ',
    ),
    # launch arguments
    'record:=maybe': Case(
        'equimus',
        lambda t, r: ['launch', 'sim', 'record:=maybe'],
        'record:=maybe is not a boolean: use record:=true or false',
    ),
    'composed:=maybe': Case(
        'equimus',
        lambda t, r: ['launch', 'sim', 'composed:=maybe'],
        'composed:=maybe is not a boolean',
    ),
    'an argument without :=': Case(
        'equimus',
        lambda t, r: ['launch', 'sim', 'record=true'],
        "expected name:=value, got 'record=true'",
    ),
    'an unknown launch argument': Case(
        'equimus',
        lambda t, r: ['launch', 'sim', 'recrod:=true'],
        'unknown launch argument(s) recrod; did you mean record?',
    ),
    'a port that is not one': Case(
        'equimus',
        lambda t, r: ['launch', 'hardware', 'natnet_data_port:=15x'],
        'natnet_data_port:=15x must be a UDP port number',
    ),
    # where things are written
    'a bag on read-only storage (split graph)': Case(
        'equimus',
        lambda t, r: [
            'launch',
            'sim',
            'composed:=false',
            'record:=true',
            f'bag:={r.getfixturevalue("read_only_dir") / "bag"}',
        ],
        'cannot create it: ',
    ),
    'a bag that exists': Case(
        'equimus',
        lambda t, r: _launch_args(t, f'bag:={_garbage_bag(t)}'),
        'exists already; choose a new one',
    ),
    'make run OUT=<read-only>': Case(
        'main_job',
        lambda t, r: ['--out', str(r.getfixturevalue('read_only_dir'))],
        'cannot create it: ',
    ),
    'make run with a bad launch argument': Case(
        'main_job',
        lambda t, r: ['--out', str(t / 'out'), '--set', 'composed:=maybe'],
        'composed:=maybe is not a boolean',
    ),
    # the offline commands (item 4)
    'identify on a header-only CSV': Case(
        'process',
        lambda t, r: _cli_proc('identify', _tocenter_header(t), '--out', t / 'fit'),
        'no data rows',
    ),
    'evaluate on a header-only CSV': Case(
        'process',
        lambda t, r: _cli_proc('evaluate', 'default', _static_header(t)),
        'no data rows',
    ),
    'evaluate with a malformed leg YAML': Case(
        'process',
        lambda t, r: _cli_proc(
            'evaluate',
            _write(t / 'params.yaml', 'bodies: [thigh\n'),
            r.getfixturevalue('shared_dir') / 'data' / 'equimus' / STATIC,
        ),
        'params.yaml:2: YAML syntax error',
    ),
    'evaluate on a garbage bag': Case(
        'process',
        lambda t, r: _cli_proc('evaluate', 'default', _garbage_bag(t)),
        'not an MCAP file',
    ),
    'evaluate on a bag with a corrupt chunk': Case(
        'process',
        lambda t, r: _cli_proc('evaluate', 'default', _joint_bag(t, 'b', 'chunk')),
        'Chunk checksum mismatch',
    ),
    'evaluate on a bag with a message that does not decode': Case(
        'process',
        lambda t, r: _cli_proc('evaluate', 'default', _joint_bag(t, 'b', 'message')),
        'cannot decode a sensor_msgs/msg/JointState message on /joint_states',
    ),
    'bag repair on read-only storage': Case(
        'process',
        lambda t, r: _cli_proc('bag', 'repair', r.getfixturevalue('read_only_copy')(_dead_bag(t))),
        'cannot repair it where it is',
    ),
    # found by growing the matrix to the size (2026-11-27): the first five started the
    # graph (a bag was created, then rc 1), the next ones said something misleading
    'controller:=policy without a policy file': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'controller:=policy'),
        'controller:=policy needs policy_file:=<file.npz>',
    ),
    'controller:=policy with a missing policy file': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'controller:=policy', f'policy_file:={t / "p.npz"}'),
        'p.npz' + "' does not exist",
    ),
    'controller:=policy with a file that is not a policy': Case(
        'equimus',
        lambda t, r: _launch_args(
            t, 'controller:=policy', f'policy_file:={_write(t / "p.npz", "weights")}'
        ),
        'is not a .npz policy (not a NumPy archive)',
    ),
    'a policy that is not one, named in a parameter file': Case(
        'equimus',
        lambda t, r: _params(
            t,
            CONTROLLER + f'    policy_file: {_write(t / "p.npz", "weights")}\n',
            'controller:=policy',
            'composed:=false',
        ),
        'params.yaml:3: policy_file: policy_file',
    ),
    'a log level rcl does not have': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'log_level:=loud'),
        'log_level:=loud is not a ROS log level',
    ),
    'a config folder that does not exist': Case(
        'equimus',
        lambda t, r: _launch_args(t, f'config_dir:={t / "nope"}'),
        'nope is not a folder',
    ),
    'a simulation pacing that does not exist': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'sim_mode:=warp'),
        'sim_mode:=warp is not one of realtime, lockstep',
    ),
    'a negative --duration': Case(
        'equimus',
        lambda t, r: [*_launch_args(t), '--duration', '-5'],
        '--duration -5 must be > 0 s',
    ),
    'a negative valve --timeout': Case(
        'equimus', lambda t, r: ['valve', 'arm', '--timeout', '-1'], '--timeout -1 must be > 0 s'
    ),
    'identify with a parameter that does not exist': Case(
        'equimus',
        lambda t, r: ['identify', str(t / 'x.csv'), '--params', 'maa.kk', '--out', str(t / 'f')],
        "equimus identify: unknown parameter 'maa.kk'",
    ),
    'excite with a parameter that does not exist': Case(
        'equimus',
        lambda t, r: ['excite', '--params', 'maa.kk', '--out', str(t / 'x')],
        "equimus excite: unknown parameter 'maa.kk'",
    ),
    'identify on a mistyped .mcap name': Case(
        'equimus',
        lambda t, r: ['identify', str(t / 'nope.mcap'), '--out', str(t / 'f')],
        'nope.mcap: no such bag (neither a bag folder nor an .mcap file)',
    ),
    'bag info on a folder that does not exist': Case(
        'equimus', lambda t, r: ['bag', 'info', str(t / 'nope')], 'nope: no such bag folder'
    ),
    'tune pid from a missing gain file': Case(
        'equimus',
        lambda t, r: ['tune', 'pid', '--start', str(t / 'g.yaml'), '--out', str(t / 'o.yaml')],
        'g.yaml: cannot read the parameter file (No such file or directory)',
    ),
    'tune pid from a file without gains': Case(
        'equimus',
        lambda t, r: [
            'tune',
            'pid',
            '--start',
            str(_write(t / 'g.yaml', DRIVER + '    max_kpa: 40.0\n')),
            '--out',
            str(t / 'o.yaml'),
        ],
        'g.yaml: no controller gains there',
    ),
    'rollout of a file that is not a policy': Case(
        'equimus',
        lambda t, r: ['rollout', '--task', 'triangle', '--policy', str(_write(t / 'p.npz', 'w'))],
        'is not a .npz policy (not a NumPy archive)',
    ),
    # more launch arguments and files the graph reads
    'an unknown controller': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'controller:=bangbang'),
        'controller:=bangbang is not one of pid, mpc',
    ),
    'a leg override with a misspelt name': Case(
        'equimus',
        lambda t, r: _leg(t, 'actuators:\n  maa:\n    kk: 1.0\n'),
        "fit.yaml:3: actuators.maa.kk: unknown parameter 'kk'",
    ),
    'a leg override file that does not exist': Case(
        'equimus',
        lambda t, r: _launch_args(t, f'leg_overrides:={t / "fit.yaml"}'),
        'fit.yaml: cannot read: No such file or directory',
    ),
    'a calibration file that does not exist': Case(
        'equimus',
        lambda t, r: ['launch', 'hardware', f'bag:={t / "bag"}', f'calibration:={t / "cal.yaml"}'],
        'cal.yaml: run `equimus check rig',
    ),
    'a rig truth with an unknown parameter': Case(
        'equimus',
        lambda t, r: _rig(
            t,
            'emulator:=true',
            f'rig_truth:={_write(t / "truth.yaml", "parameters: {actuators.maa.kk: 1.0}")}',
        ),
        "override 'actuators.maa.kk': unknown parameter 'kk'",
    ),
    'emulator:=maybe': Case(
        'equimus',
        lambda t, r: ['launch', 'hardware', 'emulator:=maybe'],
        'emulator:=maybe is not a boolean',
    ),
    'a NatNet local address that is not one': Case(
        'equimus',
        lambda t, r: _rig(t, 'natnet_local:=abc'),
        "local_address='abc': not an IPv4 address",
    ),
    'a simulation variant that does not exist': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'variant:=nosuch'),
        "variant='nosuch': use one of equimus, pure",
    ),
    'a pause before the start': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'pause_at:=-3'),
        'sim.pause_at: -3.0 is out of range',
    ),
    'a speed that is not a number': Case(
        'equimus',
        lambda t, r: _launch_args(t, 'real_time_factor:=abc'),
        'real_time_factor:=abc and pause_at:=0 must be numbers',
    ),
    # NatNet captures and the NatNet tools
    'natnet replay of a file that is not a capture': Case(
        'equimus',
        lambda t, r: ['natnet', 'replay', str(_write(t / 's.natnet', 'a take exported as CSV'))],
        's.natnet: not a NatNet capture (no EQNATNT1 header)',
    ),
    'natnet replay of an empty capture': Case(
        'equimus',
        lambda t, r: ['natnet', 'replay', str(_write(t / 's.natnet', ''))],
        's.natnet: not a NatNet capture',
    ),
    'natnet replay of a missing capture': Case(
        'equimus',
        lambda t, r: ['natnet', 'replay', str(t / 's.natnet')],
        's.natnet: cannot read (No such file or directory)',
    ),
    'natnet list with a server address that is not one': Case(
        'equimus',
        lambda t, r: ['natnet', 'list', '--server', '999.1.1.1'],
        "server_address='999.1.1.1': not an IPv4 address",
    ),
    'a rig check hold out of range': Case(
        'equimus',
        lambda t, r: ['check', 'rig', '--hold', '-1', '--out', str(t / 'rc')],
        '--hold must be 0.2-30 s',
    ),
    # bags: garbage, corrupt, empty
    'identify on a garbage bag': Case(
        'equimus',
        lambda t, r: ['identify', str(_garbage_bag(t)), '--out', str(t / 'f')],
        'garbage_0.mcap is not an MCAP file',
    ),
    'identify on a bag with a corrupt chunk': Case(
        'equimus',
        lambda t, r: ['identify', str(_joint_bag(t, 'b', 'chunk')), '--out', str(t / 'f')],
        'not a readable rosbag2 bag (Chunk checksum mismatch.)',
    ),
    'identify on a bag without joint states': Case(
        'equimus',
        lambda t, r: ['identify', str(_bag(t, 'b')), '--out', str(t / 'f')],
        "no joint-state topic with data (looked for /joint_states, /sim/joint_states; have ['/",
    ),
    'identify on a CSV of another layout': Case(
        'equimus',
        lambda t, r: ['identify', str(_write(t / 'o.csv', 'a,b\n1,2\n')), '--out', str(t / 'f')],
        'o.csv: unknown CSV layout, columns missing',
    ),
    'evaluate with a parameter set that does not exist': Case(
        'equimus',
        lambda t, r: [
            'evaluate',
            'table_vi',
            str(r.getfixturevalue('shared_dir') / 'data' / 'equimus' / STATIC),
        ],
        "parameter_sets: no parameter set 'table_vi'",
    ),
    'evaluate on a missing recording': Case(
        'equimus',
        lambda t, r: ['evaluate', 'default', str(t / 'take.csv')],
        'take.csv: cannot read',
    ),
    'bag info on a garbage bag': Case(
        'equimus',
        lambda t, r: ['bag', 'info', str(_garbage_bag(t))],
        'garbage_0.mcap is not an MCAP file',
    ),
    'bag info on a bag with a corrupt chunk': Case(
        'equimus',
        lambda t, r: ['bag', 'info', str(_joint_bag(t, 'b', 'chunk'))],
        'not a readable rosbag2 bag (Chunk checksum mismatch.)',
    ),
    'bag repair on a garbage bag': Case(
        'equimus',
        lambda t, r: ['bag', 'repair', str(_garbage_bag(t))],
        'garbage_0.mcap is not an MCAP file',
    ),
    'a recorder alone on read-only storage': Case(
        'process',
        lambda t, r: [
            sys.executable,
            '-m',
            'equimus_record.recorder_node',
            '--ros-args',
            '-p',
            f'bag_path:={r.getfixturevalue("read_only_dir") / "bag"}',
        ],
        'cannot create the bag',
    ),
}


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob('*')}


@pytest.mark.parametrize('name', list(MATRIX))
def test_bad_input_is_one_line_exit_2_and_nothing_written(name, capsys, tmp_path, request):
    case = MATRIX[name]
    args = case.args(tmp_path, request)
    capsys.readouterr()
    before = _tree(tmp_path)
    if case.run == 'process':
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        code = (cli.main if case.run == 'equimus' else main_job.main)(args)
        out, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, (code, out[-2000:], err[-2000:])
    assert 'Traceback' not in err + out, err
    assert len(lines) == 1, err
    assert case.says in lines[0], lines[0]
    assert _tree(tmp_path) == before, _tree(tmp_path) ^ before  # nothing written
    if case.run != 'process':
        assert out == '', out  # nothing started: the graph line is printed when it starts


def test_a_closed_output_pipe_ends_quietly(tmp_path):
    """`equimus bag info <bag> | head`: the reader went away; no traceback, no error line."""
    bag = _bag(tmp_path, 'b')
    proc = subprocess.Popen(
        _cli_proc('bag', 'info', bag), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(60) == cli.EXIT_PIPE_CLOSED, err
    assert err == '', err
    assert signal.SIGPIPE + 128 == cli.EXIT_PIPE_CLOSED
