"""The packages' import rule (docs/architecture.md) holds for every file under src/.

The table in docs/architecture.md is the one source of the rule: this test reads its `may import`
column, parses every Python file of every package (imports inside functions included) and fails on
an import of an equimus package that the table does not allow, or on a package missing from it.
"""

from __future__ import annotations

import ast
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO / 'docs' / 'architecture.md'
SRC = REPO / 'src'


def allowed_imports() -> dict[str, set[str]]:
    """{package: packages it may import} from the table in docs/architecture.md."""
    text = DOC.read_text()
    header = re.search(r'^\| package \| one job \| may import \|$', text, re.M)
    assert header, f'{DOC}: the package table (| package | one job | may import |) is missing'
    table: dict[str, set[str]] = {}
    for line in text[header.end() :].splitlines()[2:]:
        if not line.startswith('|'):
            break
        cells = [c.strip() for c in line.strip('|').split('|')]
        package, may = cells[0], cells[-1]
        table[package] = {p.strip() for p in may.split(',') if p.strip() not in ('', '—', '-')}
    return table


def packages() -> dict[str, pathlib.Path]:
    """Every ament package under src/ (a folder with a package.xml)."""
    return {p.name: p for p in sorted(SRC.iterdir()) if (p / 'package.xml').exists()}


def equimus_imports(path: pathlib.Path) -> set[str]:
    """Top-level equimus packages that one file imports (absolute imports, anywhere in it)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(n.split('.')[0] for n in names if n.startswith('equimus_'))
    return found


def violations() -> set[tuple[str, str]]:
    table = allowed_imports()
    out = set()
    for name, root in packages().items():
        for path in sorted(root.rglob('*.py')):
            for imported in equimus_imports(path) - {name} - table.get(name, set()):
                out.add((str(path.relative_to(SRC)), imported))
    return out


def test_every_package_is_in_the_table():
    table = allowed_imports()
    missing = sorted(set(packages()) - set(table))
    assert not missing, f'packages missing from the table in {DOC.name}: {missing}'
    unknown = sorted(p for may in table.values() for p in may if p not in packages())
    assert not unknown, f'the table names packages that do not exist: {unknown}'


def test_imports_follow_the_table():
    found = violations()
    new = sorted(found)
    assert not new, f'imports that docs/architecture.md forbids (file, imported package): {new}'


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The parser must not miss an import hidden in a function body or an `from x.y import`."""
    f = tmp_path / 'm.py'
    f.write_text(
        'import os\n\ndef f():\n    from equimus_sim.simulator import Simulator\n'
        '    import equimus_hw.valve as v\n    from . import sibling\n'
    )
    assert equimus_imports(f) == {'equimus_sim', 'equimus_hw'}


def test_the_table_forbids_upward_imports():
    """The rule itself: the lower layers import no equimus package above them."""
    table = allowed_imports()
    assert table['equimus_ros'] == set() and table['equimus_description'] == set()
    assert 'equimus_sim' not in table['equimus_control'] | table['equimus_hw']
    assert 'equimus_soak' not in table['equimus_bringup']
