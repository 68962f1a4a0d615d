"""ROS 2 parameter files named on a node's command line: checked before rcl parses them, so a bad
file is one line naming the file, the line and the key (no rclpy imports: plain YAML).

rcl's own parser reports a broken file as an RCLError traceback from `rclpy.init` ("Error parsing
a event near line 3"), and a value that the node then rejects names the parameter but not the
file it came from. `check()` catches the first kind; `locate()` finds where a rejected parameter
was set, for the second. `sections()` gives each node section's parameters with their lines,
typed as rcl types them (`rcl_value`: `1e3` is a double, `yes` a bool, `'5'` a string), for a
check of names, types and ranges before any process starts (equimus_bringup.prestart).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

PARAMS = 'ros__parameters'


class ParamFileError(ValueError):
    """A parameter file is unreadable or malformed; str() is the one-line report."""


@dataclass(frozen=True)
class Where:
    path: str
    line: int  # 1-based

    def __str__(self) -> str:
        return f'{self.path}:{self.line}'


def files_in(args: Sequence[str]) -> list[str]:
    """The paths after each `--params-file` of the `--ros-args` sections in a command line."""
    out, in_ros = [], False
    it = iter(args)
    for a in it:
        if a == '--ros-args':
            in_ros = True
        elif a == '--':
            in_ros = False
        elif in_ros and a == '--params-file':
            path = next(it, None)
            if path is not None:
                out.append(path)
    return out


def _compose(path: str) -> yaml.Node | None:
    try:
        with open(path, encoding='utf-8') as fh:
            text = fh.read()
    except OSError as exc:
        raise ParamFileError(f'{path}: cannot read the parameter file: {exc.strerror}') from None
    except UnicodeDecodeError as exc:
        raise ParamFileError(f'{path}: not a text (UTF-8) file: {exc.reason}') from None
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count('\n') + 1
        raise ParamFileError(
            f'{path}:{line}: YAML syntax error: character {exc.character!r}: {exc.reason}'
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        why = exc.problem or exc.context or 'invalid YAML'
        if exc.context_mark is not None and exc.context_mark is not mark:
            why += f' ({exc.context} on line {exc.context_mark.line + 1})'
        raise ParamFileError(f'{path}:{line}: YAML syntax error: {why}') from None
    except (yaml.YAMLError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ParamFileError(f'{path}:1: YAML error: {first}') from None


def _items(node: yaml.MappingNode):
    yield from node.value


_TRUE = frozenset(['Y', 'y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON'])
_FALSE = frozenset(['N', 'n', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF'])
_INT = re.compile(r'[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)')
_FLOAT = re.compile(r'[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf(inity)?|nan)', re.IGNORECASE)
_SPECIAL = {'.nan': math.nan, '.inf': math.inf, '-.inf': -math.inf, '+.inf': math.inf}


def rcl_value(item: yaml.ScalarNode, text: str = '') -> Any:
    """The value rcl's parameter-file parser gives a scalar (rcl_yaml_param_parser get_value):
    quoted or tagged !!str is a string; then y/yes/true/on (and n/no/false/off, in three cases)
    a bool; then what C's strtol(.., 0) reads whole an integer (0x10 = 16, 010 = 8); then what
    strtod reads whole (1e3, .5, 5., nan, inf, .nan, .inf) a double; anything else a string.
    `text` is the file (to see an explicit tag, which the composed node does not keep)."""
    value = item.value
    tagged = text[item.start_mark.index : item.start_mark.index + 1] == '!'
    if item.style in ("'", '"') or (tagged and item.tag == 'tag:yaml.org,2002:str'):
        return value
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    number = _c_int(value)
    if number is not None:
        return number
    if value.lower() in _SPECIAL:
        return _SPECIAL[value.lower()]
    if _FLOAT.fullmatch(value):
        return float(value)
    return value


def _c_int(value: str) -> int | None:
    """What C's strtol(value, &end, 0) reads when it reads all of `value` in range, else None."""
    if not _INT.fullmatch(value):
        return None
    digits = value.lstrip('+-')
    if digits[:2] in ('0x', '0X'):
        number = int(digits[2:], 16)
    elif digits.startswith('0'):
        number = int(digits, 8)
    else:
        number = int(digits)
    number = -number if value.startswith('-') else number
    return number if -(2**63) <= number < 2**63 else None


def _kind(value: Any) -> str:
    return {bool: 'bool', int: 'integer', float: 'double', str: 'string'}[type(value)]


def check(path: str) -> None:
    """Raise ParamFileError unless `path` has the layout rcl accepts:
    `<node or /**>: {ros__parameters: {<name>: <value or nested mapping>}}` (node names may be
    nested under namespaces), with finite numbers and lists of one type."""
    sections(path)


@dataclass(frozen=True)
class Value:
    value: Any  # as rcl types it: bool, int, float, str, or a list of one of them
    line: int  # 1-based


@dataclass(frozen=True)
class Section:
    """The parameters one `<node>: ros__parameters:` block of a file sets (dotted names for
    nested mappings); `node` is the block's node name with its namespaces (`controller`,
    `/**`, `/ns/controller`)."""

    path: str
    node: str
    line: int
    parameters: dict[str, Value]

    def where(self, name: str) -> str:
        v = self.parameters.get(name)
        return f'{self.path}:{v.line if v is not None else self.line}'


def sections(path: str) -> list[Section]:
    """The node sections of a parameter file, checked as `check` describes (ParamFileError)."""
    root = _compose(path)
    if root is None:
        raise ParamFileError(f'{path}:1: empty parameter file (expected "<node>: {PARAMS}:")')
    with open(path, encoding='utf-8') as fh:
        text = fh.read()
    out: list[Section] = []
    _check_level(path, root, '', text, out, [])
    return out


def _check_level(
    path: str, node: yaml.Node, owner: str, text: str, out: list[Section], names: list[str]
) -> None:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode) or not node.value:
        what = f'{owner}: ' if owner else ''
        raise ParamFileError(
            f'{path}:{line}: {what}expected a mapping of node names ("<node>: {PARAMS}: ...")'
        )
    for k, v in _items(node):
        name = f'{owner}.{k.value}' if owner else str(k.value)
        if k.value == PARAMS:
            params: dict[str, Value] = {}
            _check_params(path, name, v, text, params)
            node_name = '/'.join(names)
            out.append(Section(path, node_name, k.start_mark.line + 1, params))
        elif owner and any(kk.value == PARAMS for kk, _ in _items(node)):
            raise ParamFileError(
                f'{path}:{k.start_mark.line + 1}: {name}: beside "{PARAMS}:" only it is allowed'
            )
        else:
            _check_level(path, v, name, text, out, [*names, str(k.value)])


def _check_params(
    path: str, owner: str, node: yaml.Node, text: str, out: dict[str, Value], prefix: str = ''
) -> None:
    if not isinstance(node, yaml.MappingNode):
        raise ParamFileError(
            f'{path}:{node.start_mark.line + 1}: {owner}.{PARAMS}: expected a mapping of '
            'parameter names to values'
        )
    for k, v in _items(node):
        name = f'{prefix}{k.value}'
        where = f'{path}:{k.start_mark.line + 1}: {name}'
        if isinstance(v, yaml.MappingNode):
            _check_params(path, owner, v, text, out, f'{name}.')
            continue
        if isinstance(v, yaml.ScalarNode) and v.value == '' and v.style is None:
            raise ParamFileError(f'{where}: no value')
        items = v.value if isinstance(v, yaml.SequenceNode) else [v]
        if isinstance(v, yaml.SequenceNode) and not items:
            raise ParamFileError(f'{where}: an empty list (rcl cannot tell its type)')
        values = []
        for item in items:
            if not isinstance(item, yaml.ScalarNode):
                raise ParamFileError(f'{where}: nested lists are not ROS parameter values')
            if item.value == '' and item.style is None:
                raise ParamFileError(f'{where}: an empty item in a list')
            resolved = rcl_value(item, text)
            if isinstance(resolved, float) and not math.isfinite(resolved):
                raise ParamFileError(f'{where}: {item.value} is not a finite number')
            values.append(resolved)
        kinds = sorted({_kind(x) for x in values})
        if len(kinds) > 1:
            hint = ' (write 1.0, not 1)' if kinds == ['double', 'integer'] else ''
            raise ParamFileError(f'{where}: a list mixes {" and ".join(kinds)} values{hint}')
        out[name] = Value(
            values if isinstance(v, yaml.SequenceNode) else values[0], k.start_mark.line + 1
        )


def locate(paths: Sequence[str], parameter: str) -> Where | None:
    """Where the (last) file that sets `parameter` sets it, or None (e.g. a -p override)."""
    found = None
    for path in paths:
        try:
            root = _compose(path)
        except ParamFileError:
            continue
        if not isinstance(root, yaml.MappingNode):
            continue
        stack = [root]
        while stack:
            node = stack.pop()
            for k, v in _items(node):
                if k.value == PARAMS and isinstance(v, yaml.MappingNode):
                    hit = _find(v, parameter.split('.'))
                    if hit is not None:
                        found = Where(path, hit)
                elif isinstance(v, yaml.MappingNode):
                    stack.append(v)
    return found


def _find(node: yaml.MappingNode, parts: list[str]) -> int | None:
    for k, v in _items(node):
        if k.value == parts[0]:
            if len(parts) == 1:
                return k.start_mark.line + 1
            if isinstance(v, yaml.MappingNode):
                return _find(v, parts[1:])
        elif k.value == '.'.join(parts):
            return k.start_mark.line + 1
    return None


_NAMED = re.compile(r'^([A-Za-z_][\w.]*)=')


def parameter_of(exc: BaseException) -> str | None:
    """The parameter an rclpy ParameterException or an equimus ConfigError is about."""
    text = str(exc)
    m = _NAMED.match(text)
    if m:
        return m.group(1)
    if type(exc).__name__.endswith('ParameterException') or 'parameter' in text.lower():
        tail = text.rsplit(': ', 1)[-1].strip().strip('[]\'"')
        if re.fullmatch(r'[A-Za-z_][\w.]*', tail):
            return tail
    return None
