"""Configuration fields for plain config dataclasses (no ROS).

A config dataclass holds the defaults; each field carries, in its metadata, what a ROS parameter
needs to describe it (meaning and unit, allowed range) and whether it may change while a node
runs. equimus_ros.params declares the parameters from these fields; YAML files override the
defaults; nothing else restates a default.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    'METADATA_KEY',
    'ConfigError',
    'ParamMeta',
    'check_finite',
    'check_pair',
    'check_range',
    'param',
    'validate_fields',
]

#: Key of a field's metadata that equimus_ros.params reads (a ParamMeta).
METADATA_KEY = 'ros_parameter'


@dataclasses.dataclass(frozen=True)
class ParamMeta:
    doc: str
    range: tuple[float, float] | None = None
    runtime: bool = False


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and what is allowed."""


def param(
    default: Any, doc: str, *, range: tuple[float, float] | None = None, runtime: bool = False
) -> Any:
    """A dataclass field that is also a ROS parameter.

    doc: meaning and unit; range: inclusive bounds (numbers, or every element of a list);
    runtime: the node applies a new value while running (otherwise the parameter is read-only)."""
    meta = {METADATA_KEY: ParamMeta(doc, range, runtime)}
    if isinstance(default, (list, tuple)):
        value = tuple(default)
        return dataclasses.field(default_factory=lambda: value, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def check_finite(name: str, value: Any) -> None:
    values: Iterable[Any] = value if isinstance(value, (list, tuple)) else (value,)
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f'{name}={value!r}: must be a finite number')


def check_range(name: str, value: Any, lo: float, hi: float) -> None:
    values: Iterable[Any] = value if isinstance(value, (list, tuple)) else (value,)
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not lo <= v <= hi:
            raise ConfigError(f'{name}={value!r}: must be within [{lo:g}, {hi:g}]')


def check_pair(name: str, value: Any) -> None:
    if len(value) != 2:
        raise ConfigError(f'{name}={value!r}: must have 2 elements, one per joint or valve')


def validate_fields(cfg: Any) -> None:
    """Every field: finite, inside its declared range. Call from a config's __post_init__."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        check_finite(f.name, value)
        meta = f.metadata.get(METADATA_KEY)
        if meta is not None and meta.range is not None:
            check_range(f.name, value, *meta.range)


def with_check(config: Any, check: Callable[[Any], None]) -> Any:
    """The same config as an instance of a subclass whose validation also runs `check` (e.g.
    one value per joint of the limb a node drives), so dataclasses.replace - and so a parameter
    set on a running node - is refused with check's ConfigError."""
    base = type(config)
    parent = getattr(base, '__post_init__', None)

    def __post_init__(self) -> None:
        if parent is not None:
            parent(self)
        check(self)

    sub = type(base.__name__, (base,), {'__post_init__': __post_init__})
    return sub(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init})
