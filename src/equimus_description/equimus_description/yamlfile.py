"""YAML files read with the line of every key, so a bad value is reported as `file:line: key:
why` in one line (plain PyYAML, no ROS)."""

from __future__ import annotations

import os
import re
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


#: libyaml's safe loader where PyYAML was built with it (its wheels are): a leg file in 2-3 ms,
#: against some 30 ms for PyYAML's own parser run twice, once for the data and once for the lines.
_CLoader = getattr(yaml, 'CSafeLoader', None)
#: Text libyaml reads as PyYAML does where PyYAML reads it (tests/description/test_yamlfile.py):
#: libyaml reads a byte-order mark inside the text and the line breaks NEL, LS and PS otherwise,
#: and gives an empty tag '' where PyYAML gives None; it takes tabs that PyYAML refuses with a
#: message worth keeping. Files with any of them are read by PyYAML alone.
_SAME_IN_BOTH = re.compile('[^\t\ufeff\x85\u2028\u2029!]*').fullmatch


def _parse_fast(text: str) -> tuple[Any, yaml.Node | None] | None:
    """(data, root node) in one pass of libyaml; None when there is no libyaml, the text is not
    for it (_SAME_IN_BOTH) or does not parse, and then PyYAML's own parser reads it and reports
    what is wrong as it always did."""
    if _CLoader is None or not _SAME_IN_BOTH(text):
        return None
    loader = _CLoader(text)
    try:
        root = loader.get_single_node()
        return (loader.construct_document(root) if root is not None else None), root
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        return None
    finally:
        loader.dispose()


def load(path: str | os.PathLike) -> tuple[Any, Lines]:
    """(data, key lines) of a YAML file; YamlFileError names the file and line on failure."""
    try:
        with open(path, encoding='utf-8') as fh:
            text = fh.read()
    except OSError as exc:
        raise YamlFileError(f'{path}: cannot read: {exc.strerror}') from None
    except UnicodeDecodeError as exc:
        raise YamlFileError(f'{path}: not a text (UTF-8) file: {exc.reason}') from None
    parsed = _parse_fast(text)
    if parsed is not None:
        return parsed[0], Lines(parsed[1])
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
