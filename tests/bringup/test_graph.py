"""The graph description shared by the launch files and `equimus launch`."""

from pathlib import Path

import pytest

from equimus_bringup.graph import (
    BLAS_THREAD_ENVS,
    CONTROL_PATH,
    FUSED_NODES,
    describe_graph,
    realtime_problem,
    resolve_args,
    ros_arguments,
    thread_environment,
)

SHARED_NODES = {'estimator', 'controller', 'reference'}
# The split (one process per node) sim graph; the composed one is tested in test_sim_graph.py.
SPLIT = {'composed': 'false'}


def names(specs):
    return [s.name for s in specs]


def test_sim_and_hardware_share_the_control_side():
    sim = {s.name: s for s in describe_graph('sim', {'record': 'true', 'bag': 'b', **SPLIT})}
    hw = {
        s.name: s
        for s in describe_graph('hardware', {'record': 'true', 'bag': 'b', 'use_sim_time': 'true'})
    }
    assert set(sim) - set(hw) == {'sim'}
    assert set(hw) - set(sim) == {'natnet_bridge'}
    # The safety layer runs on both legs; only its board differs, and only the sim arms at start.
    drv_sim, drv_hw = sim['valve_driver'], hw['valve_driver']
    assert (drv_sim.package, drv_sim.executable, drv_sim.parameter_files) == (
        drv_hw.package,
        drv_hw.executable,
        drv_hw.parameter_files,
    )
    assert drv_sim.parameters['board'] == 'sim' and drv_hw.parameters['board'] == 'serial'
    assert drv_sim.parameters['auto_arm'] is True and drv_hw.parameters['auto_arm'] is False
    assert describe_graph('sim', {'auto_arm': 'false', **SPLIT})[1].parameters['auto_arm'] is False
    for n in SHARED_NODES | {'recorder'}:
        a, b = sim[n], hw[n]
        assert (a.package, a.executable, a.parameters, a.parameter_files) == (
            b.package,
            b.executable,
            b.parameters,
            b.parameter_files,
        ), n


def test_sim_time_defaults_per_mode():
    assert all(
        s.parameters['use_sim_time'] is True
        for s in describe_graph('sim', SPLIT)
        if s.name != 'sim'
    )
    assert all(
        s.parameters.get('use_sim_time') is False
        for s in describe_graph('hardware')
        if s.is_ros_node
    )
    # The simulation node owns /clock and never listens to it.
    assert (
        'use_sim_time'
        not in next(s for s in describe_graph('sim', SPLIT) if s.name == 'sim').parameters
    )


def test_emulators_only_on_request_and_valve_driver_stops_last():
    plain = describe_graph('hardware')
    emu = describe_graph('hardware', {'emulator': 'true', 'serial_port': '/tmp/dac'})
    assert not any(not s.is_ros_node for s in plain)
    tools = [s for s in emu if not s.is_ros_node]
    assert [s.name for s in tools] == ['rig_emulator'] and '/tmp/dac' in tools[0].arguments
    order = [s.name for s in sorted(emu, key=lambda s: s.shutdown_rank)]
    assert order[-2:] == ['valve_driver', 'rig_emulator']
    assert order[0] == 'reference'


def test_bad_arguments_are_refused_with_the_valid_list():
    with pytest.raises(ValueError, match='valid:'):
        resolve_args('sim', {'controler': 'pid'})
    with pytest.raises(ValueError, match='pid, mpc, sampling, open_loop'):
        describe_graph('sim', {'controller': 'lqr'})
    with pytest.raises(ValueError, match='sim, hardware'):
        describe_graph('simulation')


def _check_args(**overrides: str) -> list[str]:
    spec = next(s for s in describe_graph('hardware', overrides) if s.name == 'rig_check')
    return spec.arguments


@pytest.mark.parametrize(
    ('arg', 'option', 'emulated', 'good', 'bad', 'range_'),
    [
        ('check_mocap_timeout', '--mocap-timeout', '2', '2.5', ('0.01', '6'), '0.05 to 5 s'),
        ('check_board_timeout', '--board-timeout', '5', '12', ('0.1', '31'), '0.2 to 30 s'),
        ('check_hold', '--hold', None, '1', ('0.1', '31'), '0.2 to 30 s'),
    ],
)
def test_the_rig_checks_timeouts_are_launch_arguments(arg, option, emulated, good, bad, range_):
    """check:=true on a rig emulated elsewhere (docs/rig.md) needs the emulated rig's timeouts
    too (it shares the CPUs); without them the check's own defaults; each value is checked
    before anything starts. The valves' hold is the check's own on either rig unless given."""
    assert option not in _check_args(check='true')
    args = _check_args(check='true', emulator='true')
    if emulated is None:
        assert option not in args
    else:
        assert args[args.index(option) + 1] == emulated
    args = _check_args(check='true', **{arg: good})
    assert args[args.index(option) + 1] == good
    for value in (*bad, 'abc', 'nan'):
        with pytest.raises(ValueError, match=f'{arg}:={value} must be {range_}'):
            describe_graph('hardware', {'check': 'true', arg: value})
    with pytest.raises(ValueError, match='use it with check:=true'):
        describe_graph('hardware', {arg: good})


def _declared(argv: list[str], nodes: dict[str, dict[str, object]]) -> dict[str, dict]:
    """In a fresh rclpy process started with `argv`, each node's value of each parameter
    (declared with the given default), as rcl resolves them from the command line."""
    import json
    import subprocess
    import sys

    code = (
        'import json, rclpy, sys; rclpy.init(args=sys.argv); '
        f'nodes = {nodes!r}; '
        'made = {n: rclpy.create_node(n) for n in nodes}; '
        'get = lambda n, k, v: (made[n].get_parameter(k) if made[n].has_parameter(k) '
        'else made[n].declare_parameter(k, v)).value; '
        'print(json.dumps({n: {k: get(n, k, v) for k, v in ps.items()} '
        'for n, ps in nodes.items()}))'
    )
    out = subprocess.run(
        [sys.executable, '-c', code, *argv], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_launch_arguments_beat_parameter_files_beat_defaults(tmp_path):
    """rcl keeps the last value it reads: the launch arguments come after the default files and
    the user's params_file, which comes after the defaults (config/control.yaml)."""
    user = tmp_path / 'user.yaml'
    user.write_text(
        'controller:\n  ros__parameters:\n    controller: open_loop\n    stale_timeout: 0.125\n'
    )
    spec = next(
        s
        for s in describe_graph('sim', {'controller': 'mpc', 'params_file': str(user), **SPLIT})
        if s.name == 'controller'
    )
    argv = ros_arguments(spec)
    assert argv[:3] == ['--ros-args', '-r', '__node:=controller']
    got = _declared(
        argv, {'controller': {'controller': 'pid', 'stale_timeout': 9.0, 'use_sim_time': False}}
    )
    # launch argument over the user's file, the user's file over config/, the mode's default
    assert got['controller'] == {'controller': 'mpc', 'stale_timeout': 0.125, 'use_sim_time': True}


def test_rt_priority_applies_to_the_control_path_only():
    for mode, extra in (('sim', SPLIT), ('hardware', {'emulator': 'true'})):
        specs = describe_graph(mode, dict(extra, rt_priority='20', record='true', bag='b'))
        rt = {s.name for s in specs if s.prefix == ['chrt', '-f', '20']}
        assert rt == {s.name for s in specs if s.name in CONTROL_PATH}
        assert {'estimator', 'controller'} <= rt and not rt & {'reference', 'recorder'}
    assert all(s.prefix == [] for s in describe_graph('hardware'))  # off by default
    for bad in ('-1', '99', 'high'):
        with pytest.raises(ValueError, match='rt_priority'):
            describe_graph('sim', {'rt_priority': bad})


def test_graph_processes_run_one_blas_thread_unless_the_user_chose(monkeypatch):
    """Every process of every graph gets OPENBLAS_NUM_THREADS=1, and in such a process numpy's
    and scipy's OpenBLAS start no thread of their own; a user's choice is left alone."""
    import os
    import subprocess
    import sys

    for k in BLAS_THREAD_ENVS:
        monkeypatch.delenv(k, raising=False)
    for mode, extra in (('sim', SPLIT), ('sim', {}), ('hardware', {'fused_loop': 'true'})):
        specs = describe_graph(mode, dict(extra, record='true', bag='b'))
        assert all(s.env.get('OPENBLAS_NUM_THREADS') == '1' for s in specs), names(specs)
    assert thread_environment({'OMP_NUM_THREADS': '2'}) == {}
    assert thread_environment({'OPENBLAS_NUM_THREADS': '4'}) == {}
    code = 'import os, numpy, scipy.linalg; print(len(os.listdir("/proc/self/task")))'

    def threads(extra: dict[str, str]) -> int:
        env = {**os.environ, **extra}
        out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    assert threads(describe_graph('hardware')[0].env) == 1
    if (os.cpu_count() or 1) > 1:  # the variable is what makes the difference
        assert threads({}) > 1


def test_supervised_nodes_really_run_sched_fifo(tmp_path):
    """`equimus launch` starts the control path under chrt: read the policy back from /proc."""
    import os
    import time

    from equimus_bringup.supervisor import Supervisor

    if realtime_problem(10):
        pytest.skip(f'SCHED_FIFO not permitted here: {realtime_problem(10)}')
    specs = [
        s
        for s in describe_graph('sim', {'rt_priority': '10', **SPLIT})
        if s.name in ('estimator', 'reference')
    ]
    sup = Supervisor(specs, echo=False)
    sup.start()
    try:
        time.sleep(1.0)
        policy = {n: os.sched_getscheduler(p.pid) for n, p in sup.procs.items()}
        prio = {n: os.sched_getparam(p.pid).sched_priority for n, p in sup.procs.items()}
    finally:
        sup.stop()
    assert policy == {'estimator': os.SCHED_FIFO, 'reference': os.SCHED_OTHER}
    assert prio['estimator'] == 10


def test_rt_priority_is_refused_clearly_without_the_privilege():
    """As a user without CAP_SYS_NICE the graph must not start half real-time: it refuses."""
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which('setpriv') is None:
        pytest.skip('needs root and setpriv to run the check as an unprivileged user')
    drop = [
        'setpriv',
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        '--inh-caps=-all',
        '--bounding-set=-all',
        sys.executable,
        '-c',
    ]
    if subprocess.run(drop + ['import equimus_bringup.graph'], capture_output=True).returncode:
        pytest.skip(
            'the unprivileged user cannot read this checkout or its venv '
            '(e.g. a clone in a mode-700 temp folder)'
        )
    probe = (
        'from equimus_bringup.graph import describe_graph\n'
        'from equimus_bringup.supervisor import GraphError, Supervisor\n'
        "specs = [s for s in describe_graph('sim', {'rt_priority': '10', 'composed': 'false'})\n"
        "         if s.name == 'estimator']\n"
        'sup = Supervisor(specs, echo=False)\n'
        'try:\n'
        '    sup.start()\n'
        "    print('STARTED', list(sup.procs)); sup.stop()\n"
        'except GraphError as exc:\n'
        "    print('REFUSED', exc)\n"
    )
    r = subprocess.run(drop + [probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith('REFUSED rt_priority:=10 is not available here'), r.stdout + r.stderr
    assert 'rt_priority:=0' in r.stdout  # says what to do


def test_launch_files_are_installed(repo_dir):
    from ament_index_python.packages import get_package_share_directory

    share = Path(get_package_share_directory('equimus_bringup'))
    assert (share / 'launch' / 'sim.launch.py').exists()
    assert (share / 'launch' / 'hardware.launch.py').exists()
    assert (share / 'config' / 'recorder.yaml').exists()


def test_fused_loop_puts_the_control_path_in_one_process():
    args = {
        'emulator': 'true',
        'serial_port': '/tmp/dac',
        'controller': 'mpc',
        'rt_priority': '20',
        'record': 'true',
        'bag': 'b',
        'natnet_data_port': '4011',
    }
    split = {s.name: s for s in describe_graph('hardware', args)}
    fused = {s.name: s for s in describe_graph('hardware', dict(args, fused_loop='true'))}
    assert set(split) - set(fused) == set(FUSED_NODES)
    assert set(fused) - set(split) == {'control_loop'}
    loop = fused['control_loop']
    assert loop.nodes == FUSED_NODES + ('control_loop',) and loop.prefix == ['chrt', '-f', '20']
    # Each node keeps its own parameter files and overrides, scoped to its name.
    assert set(loop.parameter_files) == {f for n in FUSED_NODES for f in split[n].parameter_files}
    for n in FUSED_NODES:
        for key, value in split[n].parameters.items():
            if key != 'use_sim_time':
                assert loop.node_parameters[n][key] == value
    argv = ros_arguments(loop)
    assert '__node:=control_loop' not in ' '.join(argv)  # the nodes keep their names
    order = [s.name for s in sorted(fused.values(), key=lambda s: s.shutdown_rank)]
    assert order[0] == 'reference' and order[-2:] == ['control_loop', 'rig_emulator']
    with pytest.raises(ValueError, match='hardware mode only'):
        describe_graph('sim', {'fused_loop': 'true'})


def test_fused_and_composed_processes_take_their_launch_arguments(tmp_path):
    """In a process holding several nodes, each launch argument reaches its own node and beats
    the parameter files (which set serial port, NatNet ports, auto_arm and the sim mode too)."""
    fused = next(
        s
        for s in describe_graph(
            'hardware',
            {
                'fused_loop': 'true',
                'serial_port': str(tmp_path / 'dac'),
                'natnet_data_port': '4011',
                'auto_arm': 'true',
                'controller': 'mpc',
            },
        )
        if s.name == 'control_loop'
    )
    got = _declared(
        ros_arguments(fused),
        {
            'valve_driver': {'port': 'x', 'auto_arm': False},
            'natnet_bridge': {'data_port': 0},
            'controller': {'controller': 'x'},
        },
    )
    assert got == {
        'valve_driver': {'port': str(tmp_path / 'dac'), 'auto_arm': True},
        'natnet_bridge': {'data_port': 4011},
        'controller': {'controller': 'mpc'},
    }
    (composed,) = describe_graph('sim', {'sim_mode': 'lockstep', 'pause_at': '2.5'})
    got = _declared(ros_arguments(composed), {'sim': {'mode': 'x', 'pause_at': 0.0}})
    assert got == {'sim': {'mode': 'lockstep', 'pause_at': 2.5}}  # config/sim.yaml: realtime


def test_fused_loop_refuses_bad_parameters_before_touching_the_port(tmp_path):
    """A node-scoped parameter out of range stops the whole process with exit 2 and the reason;
    the serial port is never opened (the emulator link does not even exist)."""
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            '-m',
            'equimus_bringup.control_loop',
            '--ros-args',
            '-p',
            f'valve_driver:port:={tmp_path / "dac"}',
            '-p',
            'valve_driver:max_kpa:=80.0',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert 'control_loop: invalid parameters' in out.stderr and 'max_kpa' in out.stderr
    assert 'Traceback' not in out.stderr
