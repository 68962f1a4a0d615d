"""Put the figures of two benchmark reports side by side (before / after a change).

    python benchmarks/compare.py OLD.md NEW.md [--sections control soak bringup] [--match rmse]

Reads the `| figure | value |` tables of two files written by run_all.py (e.g. the committed
docs/benchmarks.md from `git show REV:docs/benchmarks.md`, and a new run) and prints one markdown
table: section, figure, before, after and after/before for numbers. Figures present in only one
report are listed with a dash on the other side.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROW = re.compile(r'^\|\s*(?P<name>[^|]+?)\s*\|\s*(?P<value>[^|]*?)\s*\|\s*$')


def figures(text: str) -> dict[tuple[str, str], str]:
    """(section, figure) -> value, from every two-column table under a `## section` heading."""
    out: dict[tuple[str, str], str] = {}
    section = ''
    for line in text.splitlines():
        if line.startswith('## '):
            section = line[3:].strip()
            continue
        m = ROW.match(line)
        if m and section and m['name'] not in ('figure', '---') and not m['name'].startswith('-'):
            out[(section, m['name'])] = m['value']
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def table(old: dict, new: dict, sections: list[str] | None, match: str | None) -> str:
    keys = list(dict.fromkeys([*old, *new]))
    rows = ['| section | figure | before | after | after / before |', '|---|---|---|---|---|']
    for key in keys:
        section, name = key
        if sections and section not in sections:
            continue
        if match and not re.search(match, name):
            continue
        a, b = old.get(key, '–'), new.get(key, '–')
        x, y = _number(a), _number(b)
        ratio = f'{y / x:.3g}' if x not in (None, 0.0) and y is not None else ''
        rows.append(f'| {section} | {name} | {a} | {b} | {ratio} |')
    return '\n'.join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('old', type=Path)
    p.add_argument('new', type=Path)
    p.add_argument('--sections', nargs='*', default=None, help='only these sections')
    p.add_argument('--match', default=None, help='only figures whose name matches this regex')
    ns = p.parse_args(argv)
    for path in (ns.old, ns.new):
        if not path.is_file():
            print(
                f'compare: {path} not found: pass two reports written by run_all.py',
                file=sys.stderr,
            )
            return 2
    print(table(figures(ns.old.read_text()), figures(ns.new.read_text()), ns.sections, ns.match))
    return 0


if __name__ == '__main__':
    sys.exit(main())
