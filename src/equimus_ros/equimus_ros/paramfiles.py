"""ROS 2 parameter files named on a node's command line: checked before rcl parses them, so a bad
file is one line naming the file, the line and the key (no rclpy imports: plain YAML).

rcl's own parser reports a broken file as an RCLError traceback from `rclpy.init` ("Error parsing
a event near line 3"), and a value that the node then rejects names the parameter but not the
file it came from. `check()` catches the first kind; `locate()` finds where a rejected parameter
was set, for the second.
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


def _resolved(item: yaml.ScalarNode) -> Any:
    """The value PyYAML gives a scalar (its implicit tag: int, float, bool, null or str)."""
    return yaml.SafeLoader('').construct_object(item)


def check(path: str) -> None:
    """Raise ParamFileError unless `path` has the layout rcl accepts:
    `<node or /**>: {ros__parameters: {<name>: <value or nested mapping>}}` (node names may be
    nested under namespaces), with finite numbers and lists of one type."""
    root = _compose(path)
    if root is None:
        raise ParamFileError(f'{path}:1: empty parameter file (expected "<node>: {PARAMS}:")')
    _check_level(path, root, '')


def _check_level(path: str, node: yaml.Node, owner: str) -> None:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode) or not node.value:
        what = f'{owner}: ' if owner else ''
        raise ParamFileError(
            f'{path}:{line}: {what}expected a mapping of node names ("<node>: {PARAMS}: ...")'
        )
    for k, v in _items(node):
        name = f'{owner}.{k.value}' if owner else str(k.value)
        if k.value == PARAMS:
            _check_params(path, name, v)
        elif owner and any(kk.value == PARAMS for kk, _ in _items(node)):
            raise ParamFileError(
                f'{path}:{k.start_mark.line + 1}: {name}: beside "{PARAMS}:" only it is allowed'
            )
        else:
            _check_level(path, v, name)


def _check_params(path: str, owner: str, node: yaml.Node, prefix: str = '') -> None:
    if not isinstance(node, yaml.MappingNode):
        raise ParamFileError(
            f'{path}:{node.start_mark.line + 1}: {owner}.{PARAMS}: expected a mapping of '
            'parameter names to values'
        )
    for k, v in _items(node):
        name = f'{prefix}{k.value}'
        where = f'{path}:{k.start_mark.line + 1}: {name}'
        if isinstance(v, yaml.MappingNode):
            _check_params(path, owner, v, f'{name}.')
            continue
        values = v.value if isinstance(v, yaml.SequenceNode) else [v]
        kinds = set()
        for item in values:
            if not isinstance(item, yaml.ScalarNode):
                raise ParamFileError(f'{where}: nested lists are not ROS parameter values')
            resolved = _resolved(item)
            if isinstance(resolved, float) and not math.isfinite(resolved):
                raise ParamFileError(f'{where}: {item.value} is not a finite number')
            if resolved is None and isinstance(v, yaml.SequenceNode):
                raise ParamFileError(f'{where}: an empty item in a list')
            kinds.add('number' if isinstance(resolved, (int, float)) else type(resolved).__name__)
        if len(kinds) > 1 and kinds != {'number'}:
            raise ParamFileError(f'{where}: a list mixes {" and ".join(sorted(kinds))} values')


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
