"""YAML files read with the line of every key, so a bad value is reported as `file:line: key:
why` in one line (plain PyYAML, no ROS)."""

from __future__ import annotations

import os
from typing import Any

import yaml


class YamlFileError(ValueError):
    """The file is unreadable or not valid YAML; str() is the one-line report."""


class Lines:
    """Dotted key -> 1-based line of that key in the file (the nearest existing parent if the key
    itself is missing, e.g. for a missing required key)."""

    def __init__(self, root: yaml.Node | None) -> None:
        self._lines: dict[str, int] = {}
        if root is not None:
            self._walk(root, '')

    def _walk(self, node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f'{prefix}.{k.value}' if prefix else str(k.value)
                self._lines[key] = k.start_mark.line + 1
                self._walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                key = f'{prefix}.{i}'
                self._lines[key] = v.start_mark.line + 1
                self._walk(v, key)

    def line(self, key: str) -> int:
        parts = key.split('.')
        while parts:
            hit = self._lines.get('.'.join(parts))
            if hit is not None:
                return hit
            parts.pop()
        return 1


def load(path: str | os.PathLike) -> tuple[Any, Lines]:
    """(data, key lines) of a YAML file; YamlFileError names the file and line on failure."""
    try:
        with open(path, encoding='utf-8') as fh:
            text = fh.read()
    except OSError as exc:
        raise YamlFileError(f'{path}: cannot read: {exc.strerror}') from None
    except UnicodeDecodeError as exc:
        raise YamlFileError(f'{path}: not a text (UTF-8) file: {exc.reason}') from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        why = exc.problem or exc.context or 'invalid YAML'
        raise YamlFileError(f'{path}:{line}: YAML syntax error: {why}') from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count('\n') + 1
        raise YamlFileError(
            f'{path}:{line}: YAML syntax error: character {exc.character!r}: {exc.reason}'
        ) from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise YamlFileError(f'{path}:1: not valid YAML: {first}') from None
    return data, Lines(root)
