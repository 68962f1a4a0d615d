"""ROS parameters declared from plain config dataclasses.

A field becomes a parameter when its metadata holds, under `METADATA_KEY`, an object with `doc`
(meaning and unit), `range` ((lo, hi) or None) and `runtime` (bool):
equimus_description.config.param makes such fields. This module imports no equimus package; it
only reads that metadata.

One call per config: `bind(node, SomeConfig(), prefix='pid.', apply=...)` declares every field as a
parameter with its descriptor (description, range, read-only unless the field is `runtime`),
reads the values the launch gave (YAML files, -p overrides) and returns the config built from
them. With `apply`, runtime parameters follow `ros2 param set`: the new config is built and
validated in the on-set callback (rejected with the reason), and handed to `apply` in the
post-set callback, as ros2/demos' set_parameters_callback does.

`declared(configs)` and `problem(configs, values)` answer, without a node, what `bind` would do
with the same configs and values: which names it declares, and the first value it would refuse
(ROS type, declared range, the config's own validation). equimus_bringup.prestart runs them on
every parameter file before a graph starts, so the check and the node are one definition.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

__all__ = [
    'METADATA_KEY',
    'STANDARD_PARAMETERS',
    'ConfigBinding',
    'bind',
    'declared',
    'problem',
    'refuse_value',
]

C = TypeVar('C')

METADATA_KEY = 'ros_parameter'

_TYPES = {
    float: ParameterType.PARAMETER_DOUBLE,
    int: ParameterType.PARAMETER_INTEGER,
    str: ParameterType.PARAMETER_STRING,
    bool: ParameterType.PARAMETER_BOOL,
}
_ARRAY_TYPES = {
    float: ParameterType.PARAMETER_DOUBLE_ARRAY,
    int: ParameterType.PARAMETER_INTEGER_ARRAY,
    str: ParameterType.PARAMETER_STRING_ARRAY,
    bool: ParameterType.PARAMETER_BOOL_ARRAY,
}


#: Declared by rclpy on every node (name -> default).
STANDARD_PARAMETERS: dict[str, Any] = {
    'use_sim_time': False,
    'start_type_description_service': True,
}

_TYPE_NAMES = {
    ParameterType.PARAMETER_BOOL: 'a bool',
    ParameterType.PARAMETER_INTEGER: 'an integer',
    ParameterType.PARAMETER_DOUBLE: 'a double',
    ParameterType.PARAMETER_STRING: 'a string',
    ParameterType.PARAMETER_BOOL_ARRAY: 'a list of bools',
    ParameterType.PARAMETER_INTEGER_ARRAY: 'a list of integers',
    ParameterType.PARAMETER_DOUBLE_ARRAY: 'a list of doubles',
    ParameterType.PARAMETER_STRING_ARRAY: 'a list of strings',
}


def _ptype(default: Any) -> int:
    if isinstance(default, (list, tuple)):
        kinds = {type(v) for v in default}
        return _ARRAY_TYPES[kinds.pop() if len(kinds) == 1 else float]
    return _TYPES[type(default)]


def _ros_value(default: Any) -> Any:
    if isinstance(default, (list, tuple)):
        return [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in default]
    return default


def _descriptor(f: dataclasses.Field, default: Any, runtime: bool) -> ParameterDescriptor:
    meta = f.metadata[METADATA_KEY]
    doc = str(meta.doc)
    desc = ParameterDescriptor(
        description=doc + ('' if runtime else ' (read-only: set at start)'),
        type=_ptype(default),
        read_only=not runtime,
    )
    rng = meta.range
    if rng is not None and not isinstance(default, (list, tuple)):
        if isinstance(default, float):
            desc.floating_point_range = [
                FloatingPointRange(from_value=float(rng[0]), to_value=float(rng[1]), step=0.0)
            ]
        elif isinstance(default, int) and not isinstance(default, bool):
            desc.integer_range = [
                IntegerRange(from_value=int(rng[0]), to_value=int(rng[1]), step=1)
            ]
    return desc


def _from_ros(default: Any, value: Any) -> Any:
    """The parameter's value in the field's Python type (ROS arrays come back as lists)."""
    if isinstance(default, tuple):
        return tuple(
            float(v)
            if isinstance(v, int)
            and not isinstance(v, bool)
            and any(isinstance(d, float) for d in default)
            else v
            for v in value
        )
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _fields(configs: Sequence[tuple[Any, str]]) -> dict[str, tuple[Any, dataclasses.Field]]:
    """Parameter name -> (config, field) for every parameter field of `configs`."""
    out = {}
    for config, prefix in configs:
        for f in dataclasses.fields(config):
            if f.init and METADATA_KEY in f.metadata:
                out[prefix + f.name] = (config, f)
    return out


def declared(configs: Sequence[tuple[Any, str]]) -> list[str]:
    """The parameter names `bind` declares for these (config, prefix) pairs, and rclpy's own."""
    return [*STANDARD_PARAMETERS, *_fields(configs)]


def problem(configs: Sequence[tuple[Any, str]], values: dict[str, Any]) -> tuple[str, str] | None:
    """(name, why) for the first of `values` (name -> value as rcl types it) that a node binding
    `configs` would refuse, or None. Names that are not declared are not looked at."""
    fields = _fields(configs)
    for name, value in values.items():
        if name in STANDARD_PARAMETERS:
            default: Any = STANDARD_PARAMETERS[name]
            rng = None
        elif name in fields:
            config, f = fields[name]
            default, rng = getattr(config, f.name), f.metadata[METADATA_KEY].range
        else:
            continue
        want, got = _ptype(default), _ptype(value)
        if want != got:
            hint = ''
            if want == ParameterType.PARAMETER_DOUBLE and got == ParameterType.PARAMETER_INTEGER:
                hint = f' (write {value}.0: ROS does not turn integers into doubles)'
            if want == _ARRAY_TYPES[float] and got == _ARRAY_TYPES[int]:
                hint = ' (write 1.0, not 1: ROS does not turn integers into doubles)'
            return name, f'must be {_TYPE_NAMES[want]}, not {_TYPE_NAMES[got]}: {value!r}{hint}'
        if rng is not None and not isinstance(default, (list, tuple)):
            lo, hi = rng
            if not lo <= value <= hi:
                return name, f'{value!r} is out of range [{lo:g}, {hi:g}]'
    for config, prefix in configs:
        changes = {
            f.name: _from_ros(getattr(config, f.name), values[prefix + f.name])
            for f in dataclasses.fields(config)
            if f.init and METADATA_KEY in f.metadata and prefix + f.name in values
        }
        if not changes:
            continue
        try:
            dataclasses.replace(config, **changes)
        except (ValueError, TypeError) as exc:
            text = str(exc)
            first = text.split(' ', 1)[0]  # 'name=value: why' or 'name why' names the field
            field = first.split('=', 1)[0] if '=' in first else first
            name = prefix + field if field in changes else prefix + next(iter(changes))
            return name, text
    return None


def configured(config: C, values: dict[str, Any], prefix: str = '') -> C:
    """`config` with the parameters among `values` (name -> value as rcl types it) that a node
    binding it with `prefix` would take; the config's own validation may raise ValueError."""
    changes = {
        f.name: _from_ros(getattr(config, f.name), values[prefix + f.name])
        for f in dataclasses.fields(config)  # type: ignore[arg-type]
        if f.init and METADATA_KEY in f.metadata and prefix + f.name in values
    }
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]


class ConfigBinding(Generic[C]):
    """A config dataclass bound to a node's parameters; `config` is always the applied one."""

    def __init__(
        self, node: Node, config: C, prefix: str = '', apply: Callable[[C], None] | None = None
    ) -> None:
        if not dataclasses.is_dataclass(config):
            raise TypeError(f'{config!r} is not a dataclass instance')
        self.node, self.prefix, self._apply = node, prefix, apply
        self._fields: dict[str, dataclasses.Field] = {}
        values = {}
        for f in dataclasses.fields(config):
            if not f.init or METADATA_KEY not in f.metadata:
                continue
            default = getattr(config, f.name)
            name = prefix + f.name
            self._fields[name] = f
            # Without `apply` nothing would act on a new value: every field is then read-only,
            # so `ros2 param set` fails loudly instead of being accepted and ignored.
            runtime = apply is not None and bool(f.metadata[METADATA_KEY].runtime)
            value = node.declare_parameter(
                name, _ros_value(default), _descriptor(f, default, runtime)
            ).value
            values[f.name] = _from_ros(default, value)
        self.config: C = dataclasses.replace(config, **values)  # type: ignore[type-var]
        if apply is not None:
            node.add_on_set_parameters_callback(self._validate)
            node.add_post_set_parameters_callback(self._applied)

    @property
    def names(self) -> list[str]:
        return list(self._fields)

    def runtime_names(self) -> list[str]:
        """Parameters that may be set while the node runs (none without `apply`)."""
        if self._apply is None:
            return []
        return [n for n, f in self._fields.items() if f.metadata[METADATA_KEY].runtime]

    def _candidate(self, params: Sequence[Parameter]) -> C | None:
        changes = {}
        for p in params:
            f = self._fields.get(p.name)
            if f is not None:
                changes[f.name] = _from_ros(getattr(self.config, f.name), p.value)
        if not changes:
            return None
        return dataclasses.replace(self.config, **changes)  # type: ignore[type-var]

    def _validate(self, params: list[Parameter]) -> SetParametersResult:
        try:
            for p in params:
                scalar = isinstance(p.value, (str, bool, int, float))
                values = [p.value] if scalar else list(p.value or [])
                if p.name in self._fields and any(
                    isinstance(v, float) and not math.isfinite(v) for v in values
                ):
                    raise ValueError(f'{p.name}={p.value}: must be a finite number')
            self._candidate(params)
        except (ValueError, TypeError) as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _applied(self, params: list[Parameter]) -> None:
        new = self._candidate(params)
        if new is None:
            return
        self.config = new
        assert self._apply is not None
        self._apply(new)
        self.node.get_logger().info(
            'parameters applied: '
            + ', '.join(f'{p.name}={p.value}' for p in params if p.name in self._fields)
        )


def bind(
    node: Node, config: C, prefix: str = '', apply: Callable[[C], None] | None = None
) -> ConfigBinding[C]:
    """Declare `config`'s fields on `node`; see the module docstring."""
    return ConfigBinding(node, config, prefix, apply)


def refuse_value(
    name: str, refused: Callable[[Any], str]
) -> Callable[[list[Parameter]], SetParametersResult]:
    """An on-set parameters callback (node.add_on_set_parameters_callback) that refuses a value
    of the parameter `name` when `refused(value)` gives a reason (''/empty: accepted); for
    parameters rclpy declares itself (use_sim_time), which `bind` does not cover."""

    def check(parameters: list[Parameter]) -> SetParametersResult:
        for prm in parameters:
            if prm.name == name:
                reason = refused(prm.value)
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    return check
