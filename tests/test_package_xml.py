"""Every package.xml declares what its code uses, with rosdep keys that really resolve.

`rosdep install --from-paths src --ignore-src` (from ros2_ws/) can only make a workspace runnable if
each import has a key. The imports are read from the code (ast), each mapped to the rosdep key of
its provider, and must be declared in the package's package.xml; the keys are then resolved by
rosdep itself, offline, against the rosdistro databases vendored in ../shared plus this
repository's rosdep/equimus.yaml (which holds only what rosdistro lacks).
"""

import ast
import configparser
import os
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS = REPO / 'tests'
LOCAL_KEYS = REPO / 'rosdep' / 'equimus.yaml'

# Top-level module -> rosdep key, for modules that are not ROS packages (a ROS package, e.g.
# rclpy, std_msgs, launch_ros, is its own key). A new PyPI import needs its line here.
MODULE_KEYS = {
    'numpy': 'python3-numpy',
    'scipy': 'python3-scipy',
    'yaml': 'python3-yaml',
    'serial': 'python3-serial',
    'matplotlib': 'python3-matplotlib',
    'tqdm': 'python3-tqdm',
    'mujoco': 'python3-mujoco-pip',
    'rosbags': 'python3-rosbags-pip',
    'gymnasium': 'python3-gymnasium-pip',
    'osqp': 'python3-osqp-pip',
    'mcap': 'python3-mcap-pip',
    'pytest': 'python3-pytest',
    'hypothesis': 'python3-hypothesis',
    'packaging': 'python3-packaging',
    'colcon_core': 'python3-colcon-common-extensions',
    'colcon_python_setup_py': 'python3-colcon-common-extensions',
}
# Imported only by an optional path that says how to install it: identification --mapper dask,
# the `rl` extra (equimus train --algo ppo, a stable-baselines3 policy file), videos (imageio-ffmpeg
# has no rosdep key; write_video says to run scripts/setup.sh).
OPTIONAL = {'dask', 'torch', 'stable_baselines3', 'tensorboard', 'imageio_ffmpeg'}
# `colcon test` runs pytest with each setup.cfg, whose `timeout` needs pytest-timeout.
TEST_TOOLS = {'python3-pytest', 'python3-pytest-timeout'}
DISTROS = [('jazzy', 'ubuntu:noble'), ('kilted', 'ubuntu:noble')]


def packages() -> dict[str, pathlib.Path]:
    return {p.name: p for p in sorted((REPO / 'src').glob('equimus_*')) if p.is_dir()}


def references(paths) -> set[str]:
    """Top-level modules and ROS packages that these files use.

    Imports anywhere (inside functions too), absolute dotted module names given as strings to
    importlib (`'equimus_learning.cli'`), and `package='...'` keywords (a launch Node such as
    rviz2).
    """
    found = set()
    workspace = set(packages())
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name.split('.')[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split('.')[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                top = node.value.split('.')[0]
                if top in workspace and re.fullmatch(r'\w+(\.\w+)*', node.value):
                    found.add(top)
            elif (
                isinstance(node, ast.keyword)
                and node.arg == 'package'
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                found.add(node.value.value)
    return found - set(sys.stdlib_module_names) - {'__future__'} - OPTIONAL


def code_files(pkg: pathlib.Path) -> list[pathlib.Path]:
    """The installed code: the Python package and the launch files (not setup.py)."""
    return sorted((pkg / pkg.name).rglob('*.py')) + sorted((pkg / 'launch').glob('*.py'))


def files_under_test(pkg: pathlib.Path) -> list[pathlib.Path]:
    """What `colcon test` runs for the package: its setup.cfg testpaths, the conftest.py files
    above them, and the shared helper modules of tests/ that these import."""
    cfg = configparser.ConfigParser()
    cfg.read(pkg / 'setup.cfg')
    files = [TESTS / 'conftest.py']
    for entry in cfg['tool:pytest']['testpaths'].split():
        path = (pkg / entry).resolve()
        files += [path] if path.is_file() else sorted(path.rglob('*.py'))
    helpers = {p.stem: p for p in TESTS.glob('*.py') if not p.name.startswith('test_')}
    while True:
        more = [helpers[m] for m in references(files) if m in helpers and helpers[m] not in files]
        if not more:
            return files
        files += more


def key(module: str) -> str:
    return MODULE_KEYS.get(module, module)


def declared(pkg_dir: pathlib.Path) -> dict[str, set[str]]:
    """{'depend' | 'exec_depend' | 'test_depend' | ...: keys} of one package.xml."""
    root = ET.parse(pkg_dir / 'package.xml').getroot()
    out: dict[str, set[str]] = {}
    for el in root:
        if el.tag.endswith('depend'):
            out.setdefault(el.tag, set()).add((el.text or '').strip())
    return out


def run_keys(deps: dict[str, set[str]]) -> set[str]:
    return deps.get('depend', set()) | deps.get('exec_depend', set())


def test_every_import_of_the_code_is_a_run_dependency():
    missing = {}
    for name, pkg in packages().items():
        keys = {key(m) for m in references(code_files(pkg))} - {name}
        lacking = keys - run_keys(declared(pkg))
        if lacking:
            missing[name] = sorted(lacking)
    assert not missing, (
        f'package.xml lacks (add <depend>/<exec_depend>; a PyPI module also needs its rosdep key '
        f'in MODULE_KEYS): {missing}'
    )


def test_every_third_party_import_of_the_tests_is_declared():
    """The tests `colcon test` runs for a package need their tools declared (test_depend).

    Workspace packages are left out: `colcon test` runs on the whole built workspace, and a
    test_depend up the stack would make the dependency graph cyclic. So are the checkout's own
    modules: the tests' helpers and the benchmark scripts some tests load from benchmarks/.
    """
    local_modules = {p.stem for p in [*TESTS.rglob('*.py'), *(REPO / 'benchmarks').glob('*.py')]}
    missing = {}
    for name, pkg in packages().items():
        deps = declared(pkg)
        modules = references(files_under_test(pkg)) - set(packages()) - local_modules
        lacking = (
            ({key(m) for m in modules} | TEST_TOOLS)
            - run_keys(deps)
            - deps.get('test_depend', set())
        )
        if lacking:
            missing[name] = sorted(lacking)
    assert not missing, f'package.xml lacks <test_depend> for what its tests import: {missing}'


def test_the_reference_scanner_sees_lazy_and_launch_references(tmp_path):
    """The scanner must see what an import statement does not show."""
    f = tmp_path / 'm.py'
    f.write_text(
        'import importlib\n'
        'def f():\n'
        '    from rosbags.typesys import Stores\n'
        "    return importlib.import_module('equimus_learning.cli')\n"
        "NODE = dict(package='rviz2', executable='rviz2')\n"
        "TEXT = 'equimus_learning is not a module path'\n"
    )
    assert references([f]) == {'rosbags', 'equimus_learning', 'rviz2'}


def test_no_package_lists_ament_python_as_a_dependency():
    """ament_python is a build type (<export><build_type>), not a rosdep key."""
    for name, pkg in packages().items():
        root = ET.parse(pkg / 'package.xml').getroot()
        assert root.findtext('export/build_type') == 'ament_python', name
        keys = set().union(*declared(pkg).values())
        assert 'ament_python' not in keys, name


def test_colcon_test_runs_pytest_in_every_package():
    """colcon picks pytest only when setup.py lists it in extras_require['test']; otherwise it
    runs unittest, which finds no test here and passes with 'Ran 0 tests'. Decided by colcon's
    own code on each setup.py."""
    from colcon_core.task.python.test import get_python_testing_step_extensions
    from colcon_python_setup_py.package_identification.python_setup_py import (
        get_setup_information,
    )

    steps = get_python_testing_step_extensions()
    chosen = {}
    for name, pkg in packages().items():
        data = get_setup_information(pkg / 'setup.py')
        chosen[name] = next(k for k, step in steps.items() if step.match(None, {}, data))
    assert chosen == dict.fromkeys(packages(), 'pytest')


def _colcon(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ['colcon', '--log-base', os.devnull, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_colcon_finds_every_package_as_ament_python():
    """From ros2_ws/ with colcon's defaults (an invalid package.xml would demote a package to
    plain python, without the ament index; ros2_ws/ must not hold a COLCON_IGNORE)."""
    out = _colcon('list', cwd=REPO / 'ros2_ws')
    assert out.returncode == 0, out.stderr
    found = dict(line.split('\t')[::2] for line in out.stdout.splitlines())
    assert found == dict.fromkeys(packages(), '(ros.ament_python)')


@pytest.mark.slow
def test_colcon_build_from_ros2_ws(tmp_path):
    """A copying install, as a deployment builds. The symlink install is scripts/setup.sh's own
    build, run before every test session; every launch test finds its packages through it."""
    out = _colcon(
        'build',
        '--build-base',
        str(tmp_path / 'build'),
        '--install-base',
        str(tmp_path / 'install'),
        cwd=REPO / 'ros2_ws',
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for name in packages():
        index = tmp_path / 'install' / name / 'share' / 'ament_index' / 'resource_index'
        assert (index / 'packages' / name).exists(), name
    # the compiled kernels are built and installed with their package (optional in setup.py,
    # so a build without them would pass unnoticed)
    kernels = list((tmp_path / 'install' / 'equimus_control').rglob('_kernels.*.so'))
    assert len(kernels) == 1, kernels


def test_colcon_test_covers_every_test_folder_once():
    """`colcon test` runs pytest in each package folder with its setup.cfg testpaths: together
    they must name every test folder and top-level test file, each once."""
    named = []
    for pkg in packages().values():
        cfg = configparser.ConfigParser()
        cfg.read(pkg / 'setup.cfg')
        for path in cfg['tool:pytest']['testpaths'].split():
            named.append((pkg / path).resolve().relative_to(TESTS).as_posix())
    wanted = [p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob('test_*.py'))]
    wanted += [p.name for p in TESTS.glob('test_*.py')]
    assert sorted(named) == sorted(wanted)


# --- rosdep, offline ----------------------------------------------------------------------------


@pytest.fixture(scope='module')
def rosdistro() -> pathlib.Path:
    """The rosdistro databases vendored in ../shared, found as tests/conftest.py finds it."""
    shared = pathlib.Path(os.environ.get('EQUIMUS_SHARED') or REPO.parent / 'shared')
    path = shared / 'vendor' / 'rosdistro'
    if not (path / 'index-v4.yaml').is_file():
        pytest.skip(
            f'{path} not found: the offline rosdep check resolves keys against the rosdistro '
            'databases vendored in ../shared (or set EQUIMUS_SHARED)'
        )
    return path


@pytest.fixture(scope='module')
def rosdep(rosdistro, tmp_path_factory):
    """A function running rosdep against the vendored rosdistro plus rosdep/equimus.yaml only:
    its own sources list and cache, file:// URLs, so no network and no system rosdep set-up.
    Each project key file is one more `yaml file://` line, like the README's set-up."""
    exe = pathlib.Path(sys.executable).with_name('rosdep')
    if not exe.exists():
        pytest.skip(
            'rosdep is not installed: pip install -r requirements-dev.txt -c constraints.txt'
        )
    work = tmp_path_factory.mktemp('rosdep')
    sources = work / 'sources.list.d'
    sources.mkdir()
    template = (rosdistro / 'sources.list.d' / '20-offline.list.in').read_text()
    lines = [
        line.replace('@ROSDISTRO@', str(rosdistro))
        for line in template.splitlines()
        if line.strip() and not line.startswith('#')
    ]
    (sources / '20-offline.list').write_text('\n'.join(lines) + '\n')
    (sources / '50-equimus.list').write_text(f'yaml {LOCAL_KEYS.as_uri()}\n')
    env = dict(
        os.environ,
        ROSDEP_SOURCE_PATH=str(sources),
        ROSDISTRO_INDEX_URL=(rosdistro / 'index-v4.yaml').as_uri(),
        ROS_HOME=str(work / 'ros_home'),
        ROS_PYTHON_VERSION='3',
    )
    env.pop('ROS_DISTRO', None)

    def run(*args: str, cwd: pathlib.Path = REPO / 'ros2_ws') -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
        )

    out = run('update')  # every distribution of the vendored index (jazzy, kilted)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'ERROR' not in out.stdout + out.stderr, out.stdout + out.stderr
    return run


def simulate_install(rosdep, distro: str, os_name: str, cwd: pathlib.Path):
    """The README's command as a simulation (-s), without -r: an unresolved key fails it."""
    return rosdep(
        'install',
        '--from-paths',
        'src',
        '--ignore-src',
        '-s',
        f'--os={os_name}',
        f'--rosdistro={distro}',
        cwd=cwd,
    )


@pytest.mark.slow
@pytest.mark.parametrize(('distro', 'os_name'), DISTROS)
def test_rosdep_resolves_every_package_offline(rosdep, distro, os_name):
    """From ros2_ws/ (whose src/ holds the packages; the repository's src/ is COLCON_IGNOREd,
    which rosdep honours too): rosdep sees every package's keys and resolves all of them."""
    keys = rosdep('keys', '--from-paths', 'src', '--ignore-src', f'--rosdistro={distro}')
    assert keys.returncode == 0, keys.stderr
    wanted = set().union(*(set().union(*declared(p).values()) for p in packages().values()))
    assert set(keys.stdout.split()) == wanted - set(packages())
    out = simulate_install(rosdep, distro, os_name, REPO / 'ros2_ws')
    text = out.stdout + out.stderr
    assert out.returncode == 0 and 'ERROR' not in text and 'Cannot locate' not in text, text


@pytest.mark.slow
def test_rosdep_check_fails_on_an_unknown_key(rosdep, tmp_path):
    """The simulation above can fail: a build type given as a key is reported by name."""
    pkg = tmp_path / 'src' / 'demo_pkg'
    pkg.mkdir(parents=True)
    (pkg / 'package.xml').write_text(
        '<?xml version="1.0"?>\n<package format="3"><name>demo_pkg</name><version>0.0.0</version>'
        '<description>d</description><maintainer email="m@x.org">m</maintainer>'
        '<license>MIT</license><buildtool_depend>ament_python</buildtool_depend>'
        '<exec_depend>python3-tqdm</exec_depend>'
        '<export><build_type>ament_python</build_type></export></package>\n'
    )
    out = simulate_install(rosdep, 'jazzy', 'ubuntu:noble', tmp_path)
    assert out.returncode != 0
    assert 'demo_pkg: Cannot locate rosdep definition for [ament_python]' in out.stderr


def test_project_keys_are_only_those_rosdistro_lacks(rosdistro):
    """rosdep/equimus.yaml must not shadow a key of the rosdistro database (e.g. its
    python3-mujoco-pip or python3-tqdm): only PyPI packages that rosdistro has no key for."""
    local = yaml.safe_load(LOCAL_KEYS.read_text())
    upstream = set()
    for database in sorted((rosdistro / 'rosdep').glob('*.yaml')):
        upstream |= set(yaml.safe_load(database.read_text()))
    assert not set(local) & upstream, sorted(set(local) & upstream)
    used = set().union(*(set().union(*declared(p).values()) for p in packages().values()))
    assert set(local) <= used, f'keys no package uses: {sorted(set(local) - used)}'
    for name, rule in local.items():
        assert name.endswith('-pip') and {'debian', 'ubuntu'} <= set(rule), name
        for os_rule in rule.values():
            assert list(os_rule) == ['pip'] and os_rule['pip']['packages'], name


# Installed by pip and venv themselves; `pip freeze` (which writes constraints.txt) omits them.
PIP_TOOLS = {'pip', 'setuptools', 'wheel'}
REQUIREMENT_FILES = [
    'requirements.txt',
    'requirements-dev.txt',
    'third_party/tf2_msgs/requirements.txt',
]


def test_constraints_pin_everything_the_requirements_install():
    """Every distribution that the requirement files install (with all their dependencies, as
    installed in this environment) has an exact version in constraints.txt, so a fresh install
    gets the tested set; e.g. gymnasium pulls Farama-Notifications, rosdep pulls rosdistro.
    Versions are not compared: an optional extra (requirements-rl.txt, installed without the
    constraints) may move a shared dependency in a developer's venv."""
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (REPO / 'constraints.txt').read_text().splitlines():
        if line.strip() and not line.startswith('#'):
            name, version = line.split('==')
            pins[canonicalize_name(name)] = version.strip()
    todo = []
    for path in REQUIREMENT_FILES:
        for line in (REPO / path).read_text().splitlines():
            line = line.split('#')[0].strip()
            if line:
                todo.append(Requirement(line))
    seen: dict[str, str] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or name in PIP_TOOLS:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # e.g. the ROS wheels on a machine whose ROS comes from the distro
        seen[name] = dist.version
        for text in dist.requires or []:
            dep = Requirement(text)
            if dep.marker is None or any(
                dep.marker.evaluate({**default_environment(), 'extra': extra})
                for extra in req.extras or {''}
            ):
                todo.append(dep)
    assert 'rosdep' in seen, (
        'rosdep (the offline rosdep check) is not installed from requirements-dev.txt'
    )
    unpinned = sorted(f'{n}=={v}' for n, v in seen.items() if n not in pins)
    assert not unpinned, f'constraints.txt lacks (add these lines): {unpinned}'
