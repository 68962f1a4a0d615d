"""What is checked before any process of a graph starts (`equimus launch`, `make run`, the launch
files): every parameter file each node will read, against the node's own config dataclasses.

The nodes declare their parameters from config dataclasses (equimus_ros.params.bind); the check
below takes the same dataclasses (`NODE_CONFIGS`, one entry per node of the graphs) and asks
equimus_ros.params what bind would refuse: a ROS type (`kp: "abc"`, `p_max: 40` for a double), a
declared range (`max_kpa: 80`), the config's own validation (`command_timeout_s: -1`). On top of
what a node does, a name that no node declares is refused with the closest known one (rclpy
ignores it silently: a typo'd safety limit would not apply), and so is a section for a node that
does not exist. The leg descriptions the nodes load (`leg_description`, `parameter_overrides`,
`leg_parameter_set`, the `leg_overrides` launch argument) are loaded here too, and so is the
policy file of a node that will run `controller:=policy`. The first problem
is one line naming file, line and key; nothing has been started or written then.

`check_domain` then listens on the graph's DDS domain for another graph's valve driver: two graphs
on one domain would mix their topics, and a lifecycle request by node name (the launch files',
the supervisor's) would reach both drivers. A driver that answers its lifecycle service refuses
the start, naming a free ROS_DOMAIN_ID; one that is listed but silent is a killed process within
its DDS lease (20 s), counted so the supervisor can tell a newcomer from it later.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from equimus_bringup.graph import (
    ARGUMENTS,
    NO_CALIBRATION,
    RIG_ARGUMENTS,
    ProcessSpec,
    describe_graph,
    overrides_file,
    parameter_layers,
    resolve_args,
)
from equimus_ros import paramfiles


def _controller() -> list[tuple[Any, str]]:
    from equimus_control.controllers import ControllerChoice, kinds
    from equimus_control.supervisor import SafetyConfig

    # Every kind's settings are names of the node (control.yaml holds them all); it declares
    # the chosen kind's only, but a value for another kind is as wrong there as here.
    configs: list[tuple[Any, str]] = [(ControllerChoice(), ''), (SafetyConfig(), '')]
    return configs + [(k.config(), k.prefix) for k in kinds().values()]


def _one(module: str, name: str) -> Callable[[], list[tuple[Any, str]]]:
    def configs() -> list[tuple[Any, str]]:
        import importlib

        return [(getattr(importlib.import_module(module), name)(), '')]

    return configs


def _natnet() -> list[tuple[Any, str]]:
    from equimus_hw.natnet.bridge_node import BridgeConfig
    from equimus_hw.natnet.client import NatNetConfig

    return [(NatNetConfig(), ''), (BridgeConfig(), '')]


#: node name -> the (config, parameter prefix) pairs its node binds.
NODE_CONFIGS: dict[str, Callable[[], list[tuple[Any, str]]]] = {
    'sim': _one('equimus_sim.config', 'SimConfig'),
    'valve_driver': _one('equimus_hw.valve.config', 'DriverConfig'),
    'natnet_bridge': _natnet,
    'estimator': _one('equimus_control.estimator_node', 'EstimatorParams'),
    'controller': _controller,
    'reference': _one('equimus_control.reference_node', 'ReferenceParams'),
    'recorder': _one('equimus_record.recorder_node', 'RecorderConfig'),
    'state_publisher': _one('equimus_tf.state_publisher', 'StatePublisherParams'),
    'sim_graph': _one('equimus_bringup.sim_graph', 'SimGraphConfig'),
    'control_loop': _one('equimus_bringup.control_loop', 'LoopConfig'),
}

#: Parameters that name leg descriptions, as load_leg takes them.
LEG_KEYS = {
    'leg_description': 'path',
    'parameter_overrides': 'overrides',
    'leg_overrides': 'overrides',
    'leg_parameter_set': 'parameter_set',
}


class StartError(ValueError):
    """A graph must not start; str() is the one-line reason."""


@dataclass
class Start:
    """A graph cleared to start: its arguments, processes, and the valve drivers its domain
    listed (for the Supervisor's `drivers_listed`)."""

    args: dict[str, str]
    specs: list[ProcessSpec]
    drivers_listed: list[str]


def check(mode: str, overrides: Mapping[str, str] | None = None) -> Start:
    """The graph, once everything below has been checked (parameter files, the bag folder, then
    the DDS domain); StartError (one line) otherwise. Nothing is started or written."""
    try:
        args = resolve_args(mode, overrides)
        # the same bag name for both (its default has the time in it)
        specs = describe_graph(mode, {**(overrides or {}), 'bag': args['bag']})
    except ValueError as exc:
        raise StartError(str(exc)) from None
    check_parameters(specs, args)
    check_calibration(mode, args, overrides or {})
    if any(s.name == 'recorder' or 'recorder' in s.nodes for s in specs):
        check_new_folder(args['bag'])
    return Start(args, specs, check_domain(specs))


def check_calibration(mode: str, args: Mapping[str, str], overrides: Mapping[str, str]) -> None:
    """The hardware graph's valve calibration file loads, unless the rig check runs first (it
    writes the file) or calibration:=none; else StartError saying what to run."""
    from equimus_description.interface import ACTUATORS
    from equimus_hw.valve.calibration import CalibrationFileError, load_calibration

    path = args.get('calibration', '')
    if mode != 'hardware' or not path or path == NO_CALIBRATION or args['check'] in ('true', '1'):
        return
    if not os.path.exists(path):
        # the rig's arguments as given (launch passes every argument, the defaults too)
        given = ' '.join(
            f'{k}:={overrides[k]}'
            for k in RIG_ARGUMENTS
            if k in overrides and overrides[k] != ARGUMENTS[k][0]
        )
        raise StartError(
            f'no valve calibration at {path}: run `equimus check rig{" " + given if given else ""}`'
            ' first (it checks Motive, the board and the pose, measures each valve and writes '
            'the file), or launch with check:=true; calibration:=none runs on the nominal '
            'datasheet calibration'
        )
    try:
        load_calibration(path, ACTUATORS)
    except CalibrationFileError as exc:
        raise StartError(str(exc)) from None


#: s to listen for another graph's valve driver before a start: DDS discovery of a running graph
#: by a new participant took 0.001-2.6 s (15 tries at load average 11 on the 2-core machine; up
#: to 2.9 s at load 20), bounded by Fast DDS's 3 s participant announcement period. The graph's
#: DDS profiles announce every second now; 3 s still covers a graph started with the user's
#: own profile. Found sooner, the wait ends sooner; the supervisor counts again when it
#: configures its driver.
DOMAIN_LISTEN_S = 3.0
#: s to listen on the domains next to a taken one, for the free one to name.
FREE_LISTEN_S = 3.0
#: s a listed valve driver has to answer get_state before it counts as a killed one.
ANSWER_TIMEOUT_S = 2.0
#: ROS_DOMAIN_IDs a node may use with the default DDS ports (ROS 2 docs: 0-101 on Linux).
DOMAIN_RANGE = (0, 101)


def _listen(
    env: Mapping[str, str], domains: Sequence[int], seconds: float, early: bool = True
) -> dict[int, Any]:
    """A node on each domain (its own context), after `seconds` of DDS discovery (with `early`,
    less once a valve driver is listed on the first domain); domain -> node. The caller closes
    them (`_close`)."""
    import time

    import rclpy

    from equimus_bringup.supervisor import graph_context, valve_drivers

    nodes = {}
    for d in domains:
        ctx = graph_context(env, d)
        nodes[d] = rclpy.create_node(
            f'equimus_domain_check_{os.getpid()}_{d}', context=ctx, start_parameter_services=False
        )
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (early and valve_drivers(nodes[domains[0]])):
        time.sleep(0.05)
    return nodes


def _close(nodes: Mapping[int, Any]) -> None:
    import rclpy

    for node in nodes.values():
        ctx = node.context
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def _answers(node: Any, driver: str) -> bool:
    """`driver` (a listed valve_driver) answers its lifecycle get_state: it is alive."""
    import time

    from lifecycle_msgs.srv import GetState
    from rclpy.executors import SingleThreadedExecutor

    client = node.create_client(GetState, f'{driver}/get_state')
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        end = time.monotonic() + ANSWER_TIMEOUT_S
        if not client.wait_for_service(timeout_sec=ANSWER_TIMEOUT_S):
            return False
        future = client.call_async(GetState.Request())
        executor.spin_until_future_complete(future, timeout_sec=max(0.1, end - time.monotonic()))
        return future.done()
    finally:
        executor.remove_node(node)
        executor.shutdown()
        node.destroy_client(client)


def check_domain(
    specs: Sequence[ProcessSpec], environ: Mapping[str, str] | None = None
) -> list[str]:
    """StartError if another graph's valve driver runs on the domain the graph would join; else
    the enclaves of the valve_driver nodes listed there (killed ones, for the supervisor)."""
    from equimus_bringup.supervisor import driver_enclaves, valve_drivers

    env = {**(os.environ if environ is None else environ)}
    env.update(next((s.env for s in specs if s.env), {}))
    try:
        domain = int(env.get('ROS_DOMAIN_ID') or 0)
    except ValueError:
        raise StartError(f'ROS_DOMAIN_ID={env["ROS_DOMAIN_ID"]!r} is not a number') from None
    nodes = _listen(env, [domain], DOMAIN_LISTEN_S)
    try:
        listed = valve_drivers(nodes[domain])
        enclaves = driver_enclaves(nodes[domain])
        live = [d for d in listed if _answers(nodes[domain], d)]
    finally:
        _close(nodes)
    if not live:
        return enclaves
    raise StartError(
        f'another graph is running on ROS_DOMAIN_ID={domain} (its {live[0]} answers): two '
        "graphs on one domain would drive each other's valves. Stop it, or start this one on "
        f'a free domain: {_free_domain(env, domain)}'
    )


def _free_domain(env: Mapping[str, str], taken: int) -> str:
    """`ROS_DOMAIN_ID=<n> ` for the first of the next few domains where no valve driver is
    listed (they are listened to at once), or what to pick."""
    from equimus_bringup.supervisor import valve_drivers

    lo, hi = DOMAIN_RANGE
    candidates = [lo + (taken - lo + k) % (hi - lo + 1) for k in range(1, 5)]
    nodes = _listen(env, candidates, FREE_LISTEN_S, early=False)
    try:
        free = [d for d in candidates if not valve_drivers(nodes[d])]
    finally:
        _close(nodes)
    if free:
        return f'ROS_DOMAIN_ID={free[0]} (set it in the environment of this command)'
    return f'another ROS_DOMAIN_ID in {lo}-{hi}'


def check_new_folder(path: str, option: str = 'bag:=') -> None:
    """`path` does not exist and can be created (the recorder's bag folder: a bag is never
    appended to; main_job's run folder). `option` names where it came from in the message."""
    folder = os.path.abspath(path)
    if os.path.lexists(folder):
        raise StartError(f'{option}{path} exists already; choose a new one')
    parent = os.path.dirname(folder)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    why = ''
    if not os.path.isdir(parent):
        why = f'{parent} is not a folder'
    elif os.statvfs(parent).f_flag & os.ST_RDONLY:
        why = f'{parent} is on a read-only file system'
    elif not os.access(parent, os.W_OK | os.X_OK):
        why = f'{parent} is not writable'
    if why:
        raise StartError(
            f'{option}{path}: cannot create it: {why}; choose another {option.strip(":= -")}'
        )


def _pattern(node: str) -> re.Pattern[str]:
    """A parameter file's node key (`controller`, `/controller`, `/**`, `/*/x`) as rcl matches
    it against a fully qualified node name."""
    key = node if node.startswith('/') else '/' + node
    parts = []
    for piece in re.split(r'(\*\*|\*)', key):
        parts.append('.*' if piece == '**' else '[^/]*' if piece == '*' else re.escape(piece))
    return re.compile(''.join(parts))


def _matches(section: paramfiles.Section, node: str) -> bool:
    return bool(_pattern(section.node).fullmatch('/' + node))


def _suggest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f'; did you mean {close[0]}?' if close else ''


@dataclass
class _Set:
    """A node's value of one parameter and where it was set."""

    value: Any
    where: str


def _where(section: paramfiles.Section, name: str, generated: set[str]) -> str:
    """`file:line` of a parameter, or '' when the launch arguments set it (their file is
    generated: graph.overrides_file)."""
    return '' if section.path in generated else section.where(name)


def _located(where: str, node: str, key: str, why: str) -> str:
    if not where:
        return f'launch arguments: {node}.{key}: {why}'
    return f'{where}: {key}: {why} ({node})'


def node_values(spec: ProcessSpec, node: str) -> dict[str, Any]:
    """The parameters `node` of `spec` reads from its files and launch arguments, as rcl types
    them, the last layer winning (what the node would bind)."""
    values: dict[str, Any] = {}
    for path in parameter_layers(spec):
        for section in paramfiles.sections(path):
            if _matches(section, node):
                values.update({k: v.value for k, v in section.parameters.items()})
    return values


def check_parameters(specs: Sequence[ProcessSpec], args: Mapping[str, str]) -> None:
    """Raise StartError for the first problem in the graph's parameter files (see the module
    docstring)."""
    from equimus_description.config import ConfigError
    from equimus_description.leg import LegDescriptionError, load_leg
    from equimus_ros.params import declared, problem

    configs = {name: make() for name, make in NODE_CONFIGS.items()}
    names = {node: declared(c) for node, c in configs.items()}
    every = sorted({n for ns in names.values() for n in ns})
    generated = {p for p in (overrides_file(s) for s in specs) if p}
    parsed: dict[str, list[paramfiles.Section]] = {}
    try:
        for spec in specs:
            for path in parameter_layers(spec):
                if path not in parsed:
                    parsed[path] = paramfiles.sections(path)
    except paramfiles.ParamFileError as exc:
        raise StartError(str(exc)) from None
    for sections in parsed.values():
        for section in sections:
            nodes = [n for n in names if _matches(section, n)]
            if not nodes:
                raise StartError(
                    f'{section.path}:{section.line}: {section.node}: unknown node (the graphs '
                    f'run {", ".join(names)}){_suggest(section.node.strip("/"), list(names))}'
                )
            known = sorted({n for node in nodes for n in names[node]})
            for key in section.parameters:
                if key not in known:
                    owner = nodes[0] if len(nodes) == 1 else 'any node'
                    raise StartError(
                        f'{section.where(key)}: {key}: unknown parameter of '
                        f'{owner}{_suggest(key, known if len(nodes) == 1 else every)}'
                    )
    for spec in specs:
        layers = [s for path in parameter_layers(spec) for s in parsed[path]]
        for node in spec.nodes or (spec.name,):
            if node not in configs:
                continue
            values: dict[str, _Set] = {}
            for section in layers:
                if _matches(section, node):
                    for key, v in section.parameters.items():
                        if key in names[node]:
                            values[key] = _Set(v.value, _where(section, key, generated))
            found = problem(configs[node], {k: v.value for k, v in values.items()})
            if found is not None:
                key, why = found
                where = values[key].where if key in values else ''
                raise StartError(_located(where, node, key, why.rstrip('.')))
            leg = {k: v for k, v in values.items() if k in LEG_KEYS and v.value}
            if leg:
                try:
                    load_leg(**{LEG_KEYS[k]: v.value for k, v in leg.items()})
                except (LegDescriptionError, ConfigError, OSError) as exc:
                    key, at = next(iter(leg.items()))
                    raise StartError(
                        f'{at.where}: {key}: {exc} ({node})' if at.where else str(exc)
                    ) from None
            _check_policy(values)
    if args.get('leg_overrides'):
        try:
            load_leg(overrides=args['leg_overrides'])
        except (LegDescriptionError, ConfigError, OSError) as exc:
            raise StartError(str(exc)) from None
    if args.get('rig_truth'):
        from equimus_sim.truth import TruthError, parse_spec

        try:
            parse_spec(args['rig_truth'])
        except TruthError as exc:
            raise StartError(f'rig_truth:={args["rig_truth"]}: {exc}') from None


def _check_policy(values: Mapping[str, _Set]) -> None:
    """A node that will run controller:=policy loads its policy file here, as it would."""
    choice = values.get('controller')
    if choice is None or choice.value != 'policy':
        return
    from equimus_control.policy import load_policy
    from equimus_description.config import ConfigError

    given = values.get('policy_file')
    try:
        load_policy(str(given.value) if given else '')
    except ConfigError as exc:
        where = given.where if given else ''
        raise StartError(f'{where}: policy_file: {exc}' if where else str(exc)) from None
