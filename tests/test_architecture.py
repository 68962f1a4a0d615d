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


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    """'equimus_hw.valve.protocol' for src/equimus_hw/equimus_hw/valve/protocol.py (a package's
    __init__.py is the package)."""
    parts = list(path.relative_to(root).with_suffix('').parts)[1:]  # below the ament package
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def module_imports(path: pathlib.Path, name: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that one file imports: absolute and relative imports, inside
    functions and under TYPE_CHECKING too (a cycle there is still one module needing the other)."""
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = '.'.join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod
            targets = [
                f'{base}.{a.name}' if f'{base}.{a.name}' in modules else base for a in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_cycles(root: pathlib.Path) -> list[list[str]]:
    """Groups of modules under `root` that import each other, directly or round a circle
    (strongly connected components of the import graph with more than one module)."""
    sources = [
        p
        for pkg in sorted(root.iterdir())
        if pkg.is_dir()
        for p in sorted(pkg.glob(f'{pkg.name}/**/*.py'))
    ]
    files = {module_name(p, root): p for p in sources}
    assert files, f'no Python package under {root}'
    modules = set(files)
    graph = {m: module_imports(p, m, modules) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(m: str) -> None:  # Tarjan's algorithm
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for n in graph[m]:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in on_stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = []
            while True:
                n = stack.pop()
                on_stack.discard(n)
                group.append(n)
                if n == m:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return cycles


def test_no_module_imports_itself_round_a_circle():
    """Inside a package too, data flows one way: a circle of imports (even a lazy one, or one for
    type checking only) means two modules that each need the other, so neither has one job."""
    cycles = import_cycles(SRC)
    assert not cycles, f'modules that import each other: {cycles}'


def test_the_cycle_check_sees_relative_and_lazy_imports(tmp_path):
    pkg = tmp_path / 'equimus_x' / 'equimus_x'
    (pkg / 'sub').mkdir(parents=True)
    (pkg / '__init__.py').write_text('')
    (pkg / 'sub' / '__init__.py').write_text('')
    (pkg / 'a.py').write_text('from .sub import b\n')
    (pkg / 'sub' / 'b.py').write_text('def f():\n    from ..c import g\n')
    (pkg / 'c.py').write_text(
        'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import equimus_x.a\n'
    )
    (pkg / 'd.py').write_text('from equimus_x import c\n')
    assert import_cycles(tmp_path) == [['equimus_x.a', 'equimus_x.c', 'equimus_x.sub.b']]
