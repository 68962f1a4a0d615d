"""What is checked before any process of a graph starts (`equimus launch`, `make run`, the launch
files): every parameter file each node will read, against the node's own config dataclasses.

The nodes declare their parameters from config dataclasses (equimus_ros.params.bind); the check
below takes the same dataclasses (`NODE_CONFIGS`, one entry per node of the graphs) and asks
equimus_ros.params what bind would refuse: a ROS type (`kp: "abc"`, `p_max: 40` for a double), a
declared range (`max_kpa: 80`), the config's own validation (`command_timeout_s: -1`). On top of
what a node does, a name that no node declares is refused with the closest known one (rclpy
ignores it silently: a typo'd safety limit would not apply), and so is a section for a node that
does not exist. The leg descriptions the nodes load (`leg_description`, `parameter_overrides`,
`leg_parameter_set`, the `leg_overrides` launch argument) are loaded here too. The first problem
is one line naming file, line and key; nothing has been started or written then.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from equimus_bringup.graph import (
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
    'leg_parameter_set': 'parameter_set',
}


class StartError(ValueError):
    """A graph must not start; str() is the one-line reason."""


def check(
    mode: str, overrides: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[ProcessSpec]]:
    """The graph's arguments and processes, once everything below has been checked; StartError
    (one line) otherwise. Nothing is started or written."""
    try:
        args = resolve_args(mode, overrides)
        # the same bag name for both (its default has the time in it)
        specs = describe_graph(mode, {**(overrides or {}), 'bag': args['bag']})
    except ValueError as exc:
        raise StartError(str(exc)) from None
    check_parameters(specs, args)
    if any(s.name == 'recorder' or 'recorder' in s.nodes for s in specs):
        check_new_folder(args['bag'])
    return args, specs


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
    if args.get('leg_overrides'):
        try:
            load_leg(overrides=args['leg_overrides'])
        except (LegDescriptionError, ConfigError, OSError) as exc:
            raise StartError(str(exc)) from None
