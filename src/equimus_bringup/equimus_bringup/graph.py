"""The one description of the node graph, shared by the launch files and `equimus launch`.

`describe_graph('sim' | 'hardware', args)` returns the processes to start. The estimator,
controller, reference, valve driver and recorder are the same objects in both modes; only the leg
side differs: the simulation node (whose valves follow the driver's /valve/applied, the driver on
its simulated board), or the NatNet bridge and the driver on the serial DAC board. The safety
layer (clamp, NaN vent, slew, watchdog, arming) thus runs on both legs. No node is remapped
differently between the modes, so a controller cannot tell which leg it drives.

This module must stay importable without `launch`/`launch_ros` (plain Python, no ROS imports):
the launch files turn the specs into `launch_ros.actions.Node`, the CLI into subprocesses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from equimus_control import CONTROLLERS
from equimus_hw.natnet.client import NatNetConfig
from equimus_hw.valve.config import DriverConfig
from equimus_sim.config import MODES as SIM_MODES
from equimus_sim.config import SimConfig

MODES = ('sim', 'hardware')

# The nodes' own defaults, so a launch argument never restates one.
_NATNET, _DRIVER, _SIM = NatNetConfig(), DriverConfig(), SimConfig()


def _flag(value: bool) -> str:
    return 'true' if value else 'false'


# Declared arguments: name -> (default, description). Defaults that depend on the mode are
# resolved in `resolve_args`.
ARGUMENTS: dict[str, tuple[str, str]] = {
    'controller': (CONTROLLERS[0], f'controller to run: {" | ".join(CONTROLLERS)}'),
    'reference': ('triangle', 'reference trajectory: triangle | step | sine | hold'),
    'record': ('false', 'record every topic to a rosbag2 (MCAP) bag: true | false'),
    'bag': ('', 'bag directory to create (default: bags/equimus_<mode>_<date-time>)'),
    'use_sim_time': (
        '',
        'use /clock from the simulation (default: true in sim, false on hardware)',
    ),
    'sim_mode': ('lockstep', 'simulation pacing: lockstep | realtime'),
    'real_time_factor': (
        '',
        'simulation speed cap: multiple of real time, <= 0 = as fast as possible (default: '
        f'{_SIM.real_time_factor:g} with sim_mode:=realtime, 0 with lockstep); runtime parameter '
        'real_time_factor of /sim',
    ),
    'composed': (
        '',
        'sim mode: run the nodes in one process (sim_graph) with an in-process hand-off on the '
        'lockstep path: true (default in sim) | false (one process per node); hardware mode '
        'always runs split (see fused_loop)',
    ),
    'pause_at': ('0', 'sim mode: sim seconds at which the simulation pauses (0 = never)'),
    'variant': (_SIM.variant, 'simulation model: equimus | pure'),
    'leg_overrides': (
        '',
        'fitted-parameter YAML from `equimus identify` applied to the simulated leg',
    ),
    'natnet_server': (_NATNET.server_address, 'Motive (NatNet server) address'),
    'natnet_local': (_NATNET.local_address, 'local interface address for NatNet'),
    'natnet_multicast': (
        _flag(_NATNET.multicast),
        'NatNet data by multicast (true) or unicast (false)',
    ),
    'natnet_command_port': (str(_NATNET.command_port), 'NatNet command port of the server'),
    'natnet_data_port': (str(_NATNET.data_port), 'NatNet data port'),
    'serial_port': (_DRIVER.port, 'serial device of the valve DAC board'),
    'emulator': (
        'false',
        'hardware mode only: run against rig_emulator '
        '(simulated leg behind NatNet and DAC board emulators)',
    ),
    'calibration': (
        '',
        "hardware mode: the rig's valve calibration, written by `equimus check rig` (default: "
        '$XDG_CONFIG_HOME/equimus/valve_calibration.yaml, i.e. ~/.config/...; with '
        'emulator:=true none, the emulated board being nominal, or <serial_port>.calibration.yaml '
        "with check:=true); a file; or none: the datasheet's nominal calibration",
    ),
    'check': (
        'false',
        'hardware mode: run `equimus check rig` first (Motive, board, valves, pose; it writes '
        'the calibration); the graph starts only if every check passes: true | false',
    ),
    'check_mocap_timeout': (
        '',
        'hardware mode, check:=true: s without a motion-capture frame that stop a valve test '
        '(`equimus check rig --mocap-timeout`), 0.05-5; default 0.25, or 1 with emulator:=true',
    ),
    'check_board_timeout': (
        '',
        'hardware mode, check:=true: s without a reply before the check counts the DAC board '
        'gone (`equimus check rig --board-timeout`), 0.2-30; default 1, or 5 with emulator:=true',
    ),
    'check_hold': (
        '',
        'hardware mode, check:=true: s each valve pressure is held in the rig check (`equimus '
        "check rig --hold`), 0.2-30; default: the check's own (the valve must settle within it)",
    ),
    'rig_truth': (
        '',
        'emulator:=true only: the plant the emulated rig simulates, which the stack does not '
        'know: a truth file (truth.yaml, equimus_sim.truth), a fitted parameter file (its '
        'parameters, e.g. config/leg_fit.yaml) or random:SEED; default: the nominal model',
    ),
    'auto_arm': (
        '',
        'arm the valve driver at start (default: true in sim, false on hardware, '
        'where the driver starts disarmed until /valve_driver/arm)',
    ),
    'policy_file': ('', 'controller:=policy: the policy network (.npz from `equimus train`)'),
    'params_file': ('', 'extra ROS parameter file applied to every node after the defaults'),
    'config_dir': ('', 'folder with the default parameter files (default: the installed share)'),
    'log_level': ('info', 'ROS log level for every node'),
    'fused_loop': (
        'false',
        'hardware mode: run the NatNet bridge, estimator, controller and valve '
        'driver as one process (control_loop) in which a mocap frame reaches '
        'the serial line by direct calls; same nodes, topics and parameters',
    ),
    'rt_priority': (
        '0',
        'SCHED_FIFO priority (1-98) for the control path: the leg side (sim, or rig '
        'emulator, NatNet bridge and valve driver), estimator and controller; 0 = '
        'normal scheduling. Needs CAP_SYS_NICE or `ulimit -r` >= the priority',
    ),
}

# The processes between a mocap frame and the valve command; rt_priority applies to these only
# (the reference, recorder and tools keep normal scheduling, so they can never starve the loop).
CONTROL_PATH = (
    'sim',
    'rig_emulator',
    'natnet_bridge',
    'valve_driver',
    'estimator',
    'controller',
    'control_loop',
    'sim_graph',
)

# The composed graph's last line: its speed from the first frame to the last (read by main_job).
SPEED_PREFIX = 'sim_graph speed:'

# The nodes the composed sim_graph process holds (with its own node, sim_graph).
COMPOSED_DISCOVERY_PERIOD_S = 5.0  # sim s, the recorder's in the composed graph
COMPOSED_NODES = (
    'sim',
    'valve_driver',
    'estimator',
    'controller',
    'reference',
    'state_publisher',
    'recorder',
)

# The nodes the fused control_loop process holds in place of their own processes (it adds one
# node of its own, also named control_loop, that reports the loop's latency).
FUSED_NODES = ('natnet_bridge', 'estimator', 'controller', 'valve_driver')

# Managed (lifecycle) nodes: the launch files and the supervisor configure and activate them
# after start; the processes holding them in-process (control_loop, sim_graph) do it themselves.
MANAGED_NODES = ('valve_driver', 'natnet_bridge')

# Processes whose exit ends the whole graph (the driver and the bridge, the processes that hold
# them, and the emulated rig they talk to: without it the graph would idle, vented, with no pose
# ever arriving). The supervisor ends the graph on any exit; the launch files on these (the others
# are not respawned: see docs/interfaces.md, "Lifecycle and shutdown").
REQUIRED_PROCESSES = ('valve_driver', 'natnet_bridge', 'control_loop', 'sim_graph', 'rig_emulator')

# Lower rank stops first on shutdown: the loop is opened from the top, the valve driver vents last.
SHUTDOWN_RANK = {
    'reference': 0,
    'controller': 1,
    'estimator': 2,
    'natnet_bridge': 3,
    'sim': 3,
    'sim_graph': 3,
    'recorder': 4,
    'valve_driver': 5,
    'control_loop': 5,
    'rig_emulator': 6,
}


#: Launch arguments that are booleans: true | false (and 1 | 0, as launch's conditions take).
BOOLEAN_ARGUMENTS = (
    'record',
    'use_sim_time',
    'composed',
    'natnet_multicast',
    'emulator',
    'auto_arm',
    'fused_loop',
    'check',
)
_TRUE, _FALSE = ('true', '1'), ('false', '0')

#: s the rig check's --mocap-timeout may be (check_mocap_timeout:=); the emulated rig shares
#: the CPUs with the check, and a loaded machine paused its stream 0.26-0.39 s (1.08 s with
#: five busy processes on two cores), so it is checked with EMULATED_MOCAP_TIMEOUT_S unless
#: told otherwise.
MOCAP_TIMEOUT_RANGE_S = (0.05, 5.0)
EMULATED_MOCAP_TIMEOUT_S = 2.0
#: s the rig check's --board-timeout may be (check_board_timeout:=); the emulated board shares
#: the CPUs too (a loaded machine paused it for 1.1 s), so it gets EMULATED_BOARD_TIMEOUT_S.
BOARD_TIMEOUT_RANGE_S = (0.2, 30.0)
EMULATED_BOARD_TIMEOUT_S = 5.0
#: s the rig check may hold each valve pressure (check_hold:=, `equimus check rig --hold`)
HOLD_RANGE_S = (0.2, 30.0)

#: The `calibration` launch argument's value for "no calibration file": the nominal calibration.
NO_CALIBRATION = 'none'

#: The arguments of `describe_graph` that the rig check takes too (`equimus check rig`).
RIG_ARGUMENTS = (
    'serial_port',
    'natnet_server',
    'natnet_local',
    'natnet_multicast',
    'natnet_command_port',
    'natnet_data_port',
    'params_file',
    'config_dir',
    'calibration',
)


def _truthy(value: str) -> bool:
    return str(value).strip().lower() in _TRUE


@dataclass
class ProcessSpec:
    """One process of the graph: a ROS node (`package`/`executable`) or a plain tool (`cmd`)."""

    name: str
    package: str
    executable: str
    parameter_files: list[str] = field(default_factory=list)
    parameters: dict[str, object] = field(default_factory=dict)
    arguments: list[str] = field(default_factory=list)
    is_ros_node: bool = True
    rt_priority: int = 0
    # A process holding several nodes: their names (not remapped) and per-node parameters.
    nodes: tuple[str, ...] = ()
    node_parameters: dict[str, dict[str, object]] = field(default_factory=dict)
    # Environment variables set for this process on top of the caller's (graph_environment).
    env: dict[str, str] = field(default_factory=dict)
    # A step before the rest of the graph (the rig check): the processes after it start only
    # once it has exited 0; any other exit leaves them unstarted and ends the graph.
    gate: bool = False

    @property
    def prefix(self) -> list[str]:
        """Command prefix (launch_ros `prefix`): `chrt -f N` for a real-time process."""
        return ['chrt', '-f', str(self.rt_priority)] if self.rt_priority > 0 else []

    @property
    def managed(self) -> bool:
        """A lifecycle node in its own process: started unconfigured, brought up from outside."""
        return self.is_ros_node and not self.nodes and self.name in MANAGED_NODES

    @property
    def required(self) -> bool:
        return self.name in REQUIRED_PROCESSES

    @property
    def shutdown_rank(self) -> int:
        return SHUTDOWN_RANK.get(self.name, 2)


def default_config_dir() -> str:
    """share/equimus_bringup/config of the installed (colcon-built) package."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        raise ValueError(
            'ament_index_python is not importable: source the workspace '
            '(source scripts/env.sh) or pass config_dir:=<folder>'
        ) from None
    try:
        return os.path.join(get_package_share_directory('equimus_bringup'), 'config')
    except PackageNotFoundError:
        raise ValueError(
            'equimus_bringup is not installed in the sourced workspace: run '
            'scripts/setup.sh and source scripts/env.sh, or pass config_dir:=<folder>'
        ) from None


#: Severities rcl's `--log-level` accepts (any case).
LOG_LEVELS = ('debug', 'info', 'warn', 'error', 'fatal')


def resolve_args(mode: str, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Merge user arguments over the declared defaults; reject unknown names with the valid list."""
    if mode not in MODES:
        raise ValueError(f'unknown mode {mode!r}: choose one of {", ".join(MODES)}')
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(ARGUMENTS))
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], list(ARGUMENTS), n=1, cutoff=0.6)
        raise ValueError(
            f'unknown launch argument(s) {", ".join(unknown)}'
            + (f'; did you mean {close[0]}?' if close else '')
            + f' (valid: {", ".join(ARGUMENTS)})'
        )
    args = {k: str(overrides.get(k, default)) for k, (default, _) in ARGUMENTS.items()}
    if not args['use_sim_time']:
        args['use_sim_time'] = 'true' if mode == 'sim' else 'false'
    if not args['auto_arm']:
        args['auto_arm'] = 'true' if mode == 'sim' else 'false'
    if not args['composed']:
        args['composed'] = 'true' if mode == 'sim' else 'false'
    if not args['real_time_factor']:
        args['real_time_factor'] = (
            f'{_SIM.real_time_factor:g}' if args['sim_mode'] == 'realtime' else '0'
        )
    if not args['config_dir']:
        args['config_dir'] = default_config_dir()
    elif not os.path.isdir(args['config_dir']):
        raise ValueError(
            f'config_dir:={args["config_dir"]} is not a folder: give the folder with the default '
            'parameter files (a copy of the installed share/equimus_bringup/config), or drop it'
        )
    if not args['bag']:
        import time

        args['bag'] = os.path.join('bags', f'equimus_{mode}_{time.strftime("%Y%m%d-%H%M%S")}')
    for name in BOOLEAN_ARGUMENTS:
        if args[name].strip().lower() not in _TRUE + _FALSE:
            raise ValueError(f'{name}:={args[name]} is not a boolean: use {name}:=true or false')
    for name in ('natnet_command_port', 'natnet_data_port'):
        if not (args[name].strip().isdigit() and 1 <= int(args[name]) <= 65535):
            raise ValueError(f'{name}:={args[name]} must be a UDP port number, 1 to 65535')
    if args['sim_mode'] not in SIM_MODES:
        raise ValueError(f'sim_mode:={args["sim_mode"]} is not one of {", ".join(SIM_MODES)}')
    level = args['log_level'].rpartition(':=')[2].strip().lower()  # rcl: [logger:=]severity
    if level not in LOG_LEVELS:
        raise ValueError(
            f'log_level:={args["log_level"]} is not a ROS log level: use one of '
            f'{", ".join(LOG_LEVELS)}'
        )
    if args['controller'] not in CONTROLLERS:
        raise ValueError(f'controller:={args["controller"]} is not one of {", ".join(CONTROLLERS)}')
    try:
        prio = int(args['rt_priority'])
    except ValueError:
        prio = -1
    if not 0 <= prio <= 98:
        raise ValueError(f'rt_priority:={args["rt_priority"]} must be an integer 0 (off) to 98')
    try:
        float(args['real_time_factor'])
        float(args['pause_at'])
    except ValueError:
        raise ValueError(
            f'real_time_factor:={args["real_time_factor"]} and pause_at:={args["pause_at"]} '
            'must be numbers'
        ) from None
    if _truthy(args['composed']) and (mode != 'sim' or args['sim_mode'] != 'lockstep'):
        raise ValueError(
            'composed:=true runs the lockstep simulation graph only: use it with sim.launch.py '
            'and sim_mode:=lockstep, or set composed:=false'
        )
    if args['rig_truth'] and (mode != 'hardware' or not _truthy(args['emulator'])):
        raise ValueError(
            f"rig_truth:={args['rig_truth']} is the emulated rig's plant: use it with "
            'hardware.launch.py emulator:=true'
        )
    if args['rig_truth'] and args['leg_overrides']:
        raise ValueError(
            'rig_truth and leg_overrides both set the emulated leg: give one (the truth file '
            'holds leg parameters in its parameters section)'
        )
    if mode == 'sim' and _truthy(args['fused_loop']):
        raise ValueError(
            'fused_loop:=true applies to hardware mode only (the simulation node '
            'is the leg side there); drop it or use hardware.launch.py'
        )
    for name, (lo, hi) in (
        ('check_mocap_timeout', MOCAP_TIMEOUT_RANGE_S),
        ('check_board_timeout', BOARD_TIMEOUT_RANGE_S),
        ('check_hold', HOLD_RANGE_S),
    ):
        if not args[name]:
            continue
        try:
            seconds = float(args[name])
        except ValueError:
            seconds = math.nan
        if not lo <= seconds <= hi:
            raise ValueError(f'{name}:={args[name]} must be {lo:g} to {hi:g} s')
        if not _truthy(args['check']):
            raise ValueError(f'{name}:= applies to the rig check: use it with check:=true')
    if mode == 'sim' and (_truthy(args['check']) or args['calibration']):
        raise ValueError(
            'check:= and calibration:= apply to hardware mode only (the simulated valves are '
            'nominal); drop them or use hardware.launch.py'
        )
    args['calibration'] = _calibration(mode, args)
    return args


def _calibration(mode: str, args: Mapping[str, str]) -> str:
    """The calibration file the hardware graph's valve driver loads (absolute), or
    NO_CALIBRATION; '' in sim mode."""
    from equimus_hw.valve.calibration import default_calibration_path

    if mode != 'hardware':
        return ''
    value = args['calibration'].strip()
    if value.lower() == NO_CALIBRATION:
        return NO_CALIBRATION
    if not value:
        if not _truthy(args['emulator']):
            value = default_calibration_path()
        elif _truthy(args['check']):
            # the emulated rig's own, beside its board's link: never the real rig's file
            value = f'{args["serial_port"]}.calibration.yaml'
        else:
            return NO_CALIBRATION  # the emulated board is nominal unless told otherwise
    return os.path.abspath(os.path.expanduser(value))


def rig_assignments(args: Mapping[str, str]) -> list[str]:
    """The resolved arguments the rig check takes, as `name:=value`."""
    return [f'{name}:={args[name]}' for name in RIG_ARGUMENTS]


def realtime_problem(priority: int) -> str | None:
    """None if processes can be started with SCHED_FIFO `priority` here, else what stops it."""
    if priority <= 0:
        return None
    import shutil
    import subprocess

    if shutil.which('chrt') is None:
        return 'chrt (util-linux) is not installed'
    r = subprocess.run(['chrt', '-f', str(priority), 'true'], capture_output=True, text=True)
    if r.returncode != 0:
        return (
            f'{r.stderr.strip() or "chrt failed"}: grant CAP_SYS_NICE or raise the rtprio limit '
            f'(`ulimit -r {priority}`, /etc/security/limits.conf), or use rt_priority:=0'
        )
    return None


def _files(args: Mapping[str, str], *names: str) -> list[str]:
    """Default parameter files that exist, then the user's override file."""
    out = [os.path.join(args['config_dir'], n) for n in names]
    out = [p for p in out if os.path.isfile(p)]
    if args['params_file']:
        out.append(args['params_file'])
    return out


def describe_graph(mode: str, overrides: Mapping[str, str] | None = None) -> list[ProcessSpec]:
    """The processes of the graph for `mode`, in start order."""
    args = resolve_args(mode, overrides)
    sim_time = _truthy(args['use_sim_time'])
    common = {'use_sim_time': sim_time}
    specs: list[ProcessSpec] = []

    if mode == 'sim':
        specs.append(
            ProcessSpec(
                'sim',
                'equimus_sim',
                'sim_node',
                _files(args, 'sim.yaml'),
                {
                    'mode': args['sim_mode'],
                    'real_time_factor': float(args['real_time_factor']),
                    'pause_at': float(args['pause_at']),
                    'variant': args['variant'],
                    'parameter_overrides': args['leg_overrides'],
                },
            )
        )
        specs.append(
            ProcessSpec(
                'valve_driver',
                'equimus_hw',
                'valve_driver',
                _files(args, 'valve.yaml'),
                dict(common, board='sim', auto_arm=_truthy(args['auto_arm'])),
            )
        )
    else:
        if _truthy(args['emulator']):
            # The simulated leg behind a DAC board emulator (pty) and a NatNet server emulator.
            specs.append(
                ProcessSpec(
                    'rig_emulator',
                    'equimus_bringup',
                    'rig_emulator',
                    is_ros_node=False,
                    arguments=[
                        '--link',
                        args['serial_port'],
                        '--address',
                        args['natnet_server'],
                        '--command-port',
                        args['natnet_command_port'],
                        '--data-port',
                        args['natnet_data_port'],
                        '--multicast' if _truthy(args['natnet_multicast']) else '--unicast',
                        *(
                            ['--leg-overrides', args['leg_overrides']]
                            if args['leg_overrides']
                            else []
                        ),
                        *(['--truth', args['rig_truth']] if args['rig_truth'] else []),
                    ],
                )
            )
        if _truthy(args['check']):
            # Before the nodes: it opens the board and listens to Motive on its own. The emulated
            # rig starts with it (--wait) and shares its CPUs (EMULATED_*_TIMEOUT_S).
            emulated = _truthy(args['emulator'])
            wait = ['--wait', '30'] if emulated else []
            for name, option, emulated_s in (
                ('check_mocap_timeout', '--mocap-timeout', EMULATED_MOCAP_TIMEOUT_S),
                ('check_board_timeout', '--board-timeout', EMULATED_BOARD_TIMEOUT_S),
                ('check_hold', '--hold', None),
            ):
                value = args[name] or (f'{emulated_s:g}' if emulated and emulated_s else '')
                wait += [option, value] if value else []
            specs.append(
                ProcessSpec(
                    'rig_check',
                    'equimus_bringup',
                    'equimus',
                    is_ros_node=False,
                    arguments=['check', 'rig', *rig_assignments(args), *wait],
                    gate=True,
                )
            )
        specs.append(
            ProcessSpec(
                'natnet_bridge',
                'equimus_hw',
                'natnet_bridge',
                _files(args, 'natnet.yaml'),
                dict(
                    common,
                    server_address=args['natnet_server'],
                    local_address=args['natnet_local'],
                    multicast=_truthy(args['natnet_multicast']),
                    command_port=int(args['natnet_command_port']),
                    data_port=int(args['natnet_data_port']),
                ),
            )
        )
        specs.append(
            ProcessSpec(
                'valve_driver',
                'equimus_hw',
                'valve_driver',
                _files(args, 'valve.yaml'),
                dict(
                    common,
                    board='serial',
                    port=args['serial_port'],
                    auto_arm=_truthy(args['auto_arm']),
                    calibration_file=(
                        '' if args['calibration'] == NO_CALIBRATION else args['calibration']
                    ),
                    require_calibration=args['calibration'] != NO_CALIBRATION,
                ),
            )
        )

    specs.append(
        ProcessSpec(
            'estimator', 'equimus_control', 'estimator', _files(args, 'control.yaml'), dict(common)
        )
    )
    specs.append(
        ProcessSpec(
            'controller',
            'equimus_control',
            'controller',
            _files(args, 'control.yaml'),
            dict(common, controller=args['controller'])
            | (
                {'policy_file': os.path.abspath(args['policy_file'])} if args['policy_file'] else {}
            ),
        )
    )
    specs.append(
        ProcessSpec(
            'reference',
            'equimus_control',
            'reference',
            _files(args, 'control.yaml'),
            dict(common, trajectory=args['reference']),
        )
    )
    if _truthy(args['record']):
        specs.append(
            ProcessSpec(
                'recorder',
                'equimus_record',
                'recorder',
                _files(args, 'recorder.yaml'),
                dict(common, bag_path=args['bag']),
            )
        )
    # Last: off the control path, so the control nodes get the CPU first while all start up.
    specs.append(
        ProcessSpec('state_publisher', 'equimus_tf', 'state_publisher', parameters=dict(common))
    )
    if mode == 'hardware' and _truthy(args['fused_loop']):
        specs = _fuse(specs, args)
    if mode == 'sim' and _truthy(args['composed']):
        specs = _compose(specs, args)
    for spec in specs:
        if spec.name in CONTROL_PATH:
            spec.rt_priority = int(args['rt_priority'])
        spec.env.update(graph_environment(mode))
        spec.env.update(thread_environment())
    return specs


#: ROS 2 (Iron and later) discovery range; LOCALHOST keeps DDS discovery on this machine.
DISCOVERY_RANGE_ENV = 'ROS_AUTOMATIC_DISCOVERY_RANGE'
#: The environment that decides which DDS graph a participant joins.
GRAPH_DDS_ENV = ('ROS_DOMAIN_ID', DISCOVERY_RANGE_ENV, 'ROS_STATIC_PEERS')
#: Where Fast DDS 3.x (Kilted on) and 2.x read their default XML profile. Only one is set: the
#: rmw of 3.x reads the 2.x name too (with a deprecation warning), and loading one file twice
#: logs an XMLPARSER error per process.
FASTDDS_PROFILE_ENVS = ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTRTPS_DEFAULT_PROFILES_FILE')
#: ROS 2 distributions whose Fast DDS is 2.x (the 2.x name).
FAST_DDS_2_DISTROS = ('humble', 'iron', 'jazzy')
#: Any of these set by the user is their choice of DDS transports: the graph leaves it alone.
TRANSPORT_CHOICE_ENVS = (*FASTDDS_PROFILE_ENVS, 'FASTDDS_BUILTIN_TRANSPORTS')
#: The graph's Fast DDS profiles (share/equimus_bringup/dds): UDP only, no shared memory. With
#: shared memory, a process SIGKILLed while its receive thread holds its port's lock blocks
#: every writer that sends to it for 1 s per send (Fast DDS's interprocess lock timeout), and
#: the writer's publishing thread waits behind it: one recorder kill stopped the bridge, the
#: controller and the valve driver together (docs/reliability.md).
UDP_PROFILE = 'udp.xml'
UDP_LOCALHOST_PROFILE = 'udp_localhost.xml'
#: The same profiles in Fast DDS 2.x's element names (its parser refuses a whole file with one
#: element it does not know), in this subfolder.
FAST_DDS_2_FOLDER = 'fastdds2'


#: OpenBLAS (numpy's and scipy's each) starts a thread per core at import; a node's matrices
#: are too small to gain from them. Either variable set by the user is their choice.
BLAS_THREAD_ENVS = ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS')


def thread_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """One BLAS thread per graph process: 0.06-0.2 CPU s less at every start, no idle thread
    pools beside the control path (docs/benchmarks.md, "The suite, 2026-12-05, later")."""
    environ = os.environ if environ is None else environ
    return {} if any(k in environ for k in BLAS_THREAD_ENVS) else {BLAS_THREAD_ENVS[0]: '1'}


def dds_profile_dir() -> str | None:
    """share/equimus_bringup/dds of the installed package, or None where it is not found."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return None
    try:
        folder = os.path.join(get_package_share_directory('equimus_bringup'), 'dds')
    except PackageNotFoundError:
        return None
    return folder if os.path.isfile(os.path.join(folder, UDP_PROFILE)) else None


def _fast_dds(environ: Mapping[str, str]) -> bool:
    """rmw_fastrtps_cpp is the default rmw where RMW_IMPLEMENTATION is unset."""
    return (environ.get('RMW_IMPLEMENTATION') or 'rmw_fastrtps_cpp').startswith('rmw_fastrtps')


def graph_environment(mode: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment the graph's processes get on top of the caller's.

    A simulation is localhost-only, so two users' simulations on one network (same
    ROS_DOMAIN_ID) never exchange a message; the hardware graph keeps the caller's range (a
    monitor on another machine may watch the rig). On Fast DDS every process talks UDP only, so
    no process that dies (a node, a recorder, a monitor on this host) can block another's
    publish: a localhost-only graph gets the loopback-only UDP profile and the range SUBNET
    (rmw_fastrtps's LOCALHOST range always adds shared memory; the profile keeps discovery and
    data on this host); other ranges the UDP profile. Both profiles make reliable writers send
    a heartbeat every 100 ms, so a datagram a busy reader missed is sent again at once, not up
    to 3 s later, and every participant announce itself every second, so a process that joins
    later (a supervisor, the domain check) hears the graph within about a second, not 3 s. A
    discovery range or a DDS transport or profile set by the user wins.
    """
    environ = os.environ if environ is None else environ
    localhost = (
        environ.get(DISCOVERY_RANGE_ENV)
        or ('LOCALHOST' if mode == 'sim' or environ.get('ROS_LOCALHOST_ONLY') == '1' else '')
    ).upper() == 'LOCALHOST'
    env: dict[str, str] = {}
    if mode == 'sim' and DISCOVERY_RANGE_ENV not in environ:
        env[DISCOVERY_RANGE_ENV] = 'LOCALHOST'
    if any(k in environ for k in TRANSPORT_CHOICE_ENVS) or not _fast_dds(environ):
        return env
    folder = dds_profile_dir()
    if folder is None:
        return env
    fast_dds_2 = environ.get('ROS_DISTRO') in FAST_DDS_2_DISTROS
    if fast_dds_2:
        folder = os.path.join(folder, FAST_DDS_2_FOLDER)
    profile = os.path.join(folder, UDP_LOCALHOST_PROFILE if localhost else UDP_PROFILE)
    env[FASTDDS_PROFILE_ENVS[fast_dds_2]] = profile
    if localhost:
        env[DISCOVERY_RANGE_ENV] = 'SUBNET'
        if 'ROS_LOCALHOST_ONLY' in environ:
            env['ROS_LOCALHOST_ONLY'] = '0'
    return env


def localhost_environment(mode: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What a graph that must stay on this host gets on top of `environ` (the soak: it kills
    nodes and sends bad commands; a test session): `graph_environment` for the LOCALHOST range,
    or nothing when `environ` already keeps DDS on this host with the graphs' loopback-only UDP
    profile (a test session's). Setting LOCALHOST over that profile would bring shared memory back
    (rmw_fastrtps adds it on that range), which a SIGKILLed node can leave locked."""
    if (dds_profile(environ) or '').endswith(os.sep + UDP_LOCALHOST_PROFILE):
        return {}
    local = {DISCOVERY_RANGE_ENV: 'LOCALHOST'}
    return {**local, **graph_environment(mode, {**environ, **local})}


def participant_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The DDS variables of a graph's environment for a participant created in this process
    (the supervisor's lifecycle client), which does not load the graph's profile: a graph on
    the loopback-only profile is joined with the LOCALHOST range it stands for."""
    out = {k: env[k] for k in GRAPH_DDS_ENV if k in env}
    if (dds_profile(env) or '').endswith(os.sep + UDP_LOCALHOST_PROFILE):
        out[DISCOVERY_RANGE_ENV] = 'LOCALHOST'
    return out


def dds_profile(env: Mapping[str, str]) -> str | None:
    """The Fast DDS default profile file `env` sets, if any."""
    return next((env[k] for k in FASTDDS_PROFILE_ENVS if env.get(k)), None)


def _merged_files(specs: list[ProcessSpec], args: Mapping[str, str]) -> list[str]:
    """The parameter files of several processes for one process: each once, and the user's
    params_file last, so it overrides every default file as it does in a process of its own."""
    files: list[str] = []
    for s in specs:
        files += [f for f in s.parameter_files if f not in files and f != args['params_file']]
    if args['params_file'] and any(args['params_file'] in s.parameter_files for s in specs):
        files.append(args['params_file'])
    return files


def _fuse(specs: list[ProcessSpec], args: Mapping[str, str]) -> list[ProcessSpec]:
    """Replace the FUSED_NODES' processes by one control_loop process with their parameters."""
    fused = [s for s in specs if s.name in FUSED_NODES]
    files = _merged_files(fused, args)
    loop = ProcessSpec(
        'control_loop',
        'equimus_bringup',
        'control_loop',
        files,
        {'use_sim_time': _truthy(args['use_sim_time'])},
        nodes=FUSED_NODES + ('control_loop',),
        node_parameters={
            s.name: {k: v for k, v in s.parameters.items() if k != 'use_sim_time'} for s in fused
        },
    )
    at = specs.index(fused[0])
    return [*specs[:at], loop, *(s for s in specs[at:] if s.name not in FUSED_NODES)]


def _compose(specs: list[ProcessSpec], args: Mapping[str, str]) -> list[ProcessSpec]:
    """One sim_graph process holding every node, each with its own parameters (no process-wide
    parameter: use_sim_time must not reach the sim node, which owns the clock)."""
    files = _merged_files(specs, args)
    names = tuple(s.name for s in specs)
    unknown = set(names) - set(COMPOSED_NODES)
    if unknown:
        raise ValueError(f'cannot compose {", ".join(sorted(unknown))} into sim_graph')
    record = 'recorder' in names
    node_parameters = {s.name: dict(s.parameters) for s in specs}
    if record:
        # The recorder's timers run in sim time, here 20-30x faster than real time: look for
        # topics from outside the process every few sim seconds, not four times a sim second.
        node_parameters['recorder']['discovery_period'] = COMPOSED_DISCOVERY_PERIOD_S
    node_parameters['sim_graph'] = {'record': record, 'use_sim_time': _truthy(args['use_sim_time'])}
    return [
        ProcessSpec(
            'sim_graph',
            'equimus_bringup',
            'sim_graph',
            files,
            {},
            nodes=names + ('sim_graph',),
            node_parameters=node_parameters,
        )
    ]


def parameter_overrides(spec: ProcessSpec) -> dict[str, dict[str, object]]:
    """Per node of the process, the parameters the launch arguments set."""
    if spec.nodes:
        return {node: dict(params) for node, params in spec.node_parameters.items() if params}
    return {spec.name: dict(spec.parameters)} if spec.parameters else {}


def overrides_file(spec: ProcessSpec) -> str | None:
    """The launch arguments of `spec` as a node-scoped parameter file (None if there are none).

    A file rather than `-p` rules: launch_ros puts every `--params-file` after the arguments
    given to a Node action, and rcl keeps the last value it reads, so only a file placed last
    beats the parameter files. The name is the content's hash, so identical launches share it.
    """
    import hashlib
    import tempfile

    import yaml

    document = {
        node: {'ros__parameters': params} for node, params in parameter_overrides(spec).items()
    }
    if not document:
        return None
    text = yaml.safe_dump(document, sort_keys=True)
    folder = os.path.join(tempfile.gettempdir(), f'equimus-params-{os.getuid()}')
    os.makedirs(folder, mode=0o700, exist_ok=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = os.path.join(folder, f'{spec.name}-{digest}.yaml')
    if not os.path.isfile(path):
        partial = f'{path}.{os.getpid()}'
        with open(partial, 'w', encoding='utf-8') as f:
            f.write(f'# launch arguments of {spec.name}: written by equimus_bringup.graph\n{text}')
        os.replace(partial, path)
    return path


def parameter_layers(spec: ProcessSpec) -> list[str]:
    """The parameter files of a process in the order rcl applies them, the last value winning:
    the default files, the user's params_file, then the launch arguments. The launch files and
    `equimus launch` both pass exactly this list."""
    overrides = overrides_file(spec)
    return [*spec.parameter_files, *([overrides] if overrides else [])]


def ros_arguments(spec: ProcessSpec, log_level: str = 'info') -> list[str]:
    """The `--ros-args` a ROS node gets outside `launch_ros` (same meaning as its Node action)."""
    out = ['--ros-args'] + ([] if spec.nodes else ['-r', f'__node:={spec.name}'])
    out += ['--log-level', log_level]
    for path in parameter_layers(spec):
        out += ['--params-file', path]
    return out
