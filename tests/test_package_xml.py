"""Every package.xml declares what its code imports, with rosdep keys that resolve.

`rosdep install --from-paths ros2_ws/src` can only make a workspace runnable if each import has a
key. Keys are checked against: the workspace's own packages, ROS packages of the distro, the
rosdistro database's python keys (rosdep/python.yaml, checked by hand: listed below), and this
repository's rosdep/equimus.yaml for the PyPI-only packages the database lacks.
"""

import ast
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]

# Top-level module -> rosdep key. ROS packages are their own key.
MODULE_KEYS = {
    'numpy': 'python3-numpy',
    'scipy': 'python3-scipy',
    'yaml': 'python3-yaml',
    'serial': 'python3-serial',
    'matplotlib': 'python3-matplotlib',
    'mujoco': 'python3-mujoco-pip',
    'osqp': 'python3-osqp-pip',
    'rosbags': 'python3-rosbags-pip',
    'mcap': 'python3-mcap-pip',
    'gymnasium': 'python3-gymnasium-pip',
    'tqdm': 'python3-tqdm-pip',
}
# Keys of the rosdistro database (rosdep/python.yaml) that the package.xml files use.
ROSDISTRO_PYTHON_KEYS = {
    'python3-numpy',
    'python3-scipy',
    'python3-yaml',
    'python3-serial',
    'python3-matplotlib',
    'python3-pytest',
    'python3-pytest-timeout',
    'python3-hypothesis',
}
ROS_PACKAGES = {
    'ament_python',
    'ament_index_python',
    'rclpy',
    'rcl_interfaces',
    'std_msgs',
    'std_srvs',
    'sensor_msgs',
    'geometry_msgs',
    'diagnostic_msgs',
    'rosgraph_msgs',
    'tf2_msgs',
    'lifecycle_msgs',
    'builtin_interfaces',
    'launch',
    'launch_ros',
}
# Imported only by an optional path that says how to install it: identification --mapper dask,
# the `rl` extra (equimus train --algo ppo, a stable-baselines3 policy file).
OPTIONAL = {'dask', 'torch', 'stable_baselines3', 'tensorboard'}


def packages():
    return {p.name: p for p in sorted((REPO / 'src').glob('equimus_*')) if p.is_dir()}


def imports(pkg_dir: pathlib.Path) -> set[str]:
    found = set()
    for path in (pkg_dir / pkg_dir.name).rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name.split('.')[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split('.')[0])
    return found - set(sys.stdlib_module_names) - {'__future__', pkg_dir.name} - OPTIONAL


def declared(pkg_dir: pathlib.Path) -> dict[str, set[str]]:
    root = ET.parse(pkg_dir / 'package.xml').getroot()
    out: dict[str, set[str]] = {}
    for el in root:
        if el.tag.endswith('depend'):
            out.setdefault(el.tag, set()).add(el.text.strip())
    return out


def test_every_import_is_a_declared_dependency():
    missing = {}
    for name, pkg in packages().items():
        deps = declared(pkg)
        run = deps.get('depend', set()) | deps.get('exec_depend', set())
        keys = {MODULE_KEYS.get(m, m) for m in imports(pkg)}
        if keys - run:
            missing[name] = sorted(keys - run)
    assert not missing, f'package.xml lacks (add <depend>/<exec_depend>): {missing}'


def test_every_key_resolves():
    local = set(yaml.safe_load((REPO / 'rosdep' / 'equimus.yaml').read_text()))
    known = set(packages()) | ROS_PACKAGES | ROSDISTRO_PYTHON_KEYS | local
    unknown = {}
    for name, pkg in packages().items():
        keys = set().union(*declared(pkg).values())
        if keys - known:
            unknown[name] = sorted(keys - known)
    assert not unknown, f'keys rosdep cannot resolve: {unknown}'
    for key, rule in yaml.safe_load((REPO / 'rosdep' / 'equimus.yaml').read_text()).items():
        assert key.endswith('-pip') and {'debian', 'ubuntu'} <= set(rule), key


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
@pytest.mark.parametrize('symlink', [False, True])
def test_colcon_build_from_ros2_ws(tmp_path, symlink):
    out = _colcon(
        'build',
        '--build-base',
        str(tmp_path / 'build'),
        '--install-base',
        str(tmp_path / 'install'),
        *(['--symlink-install'] if symlink else []),
        cwd=REPO / 'ros2_ws',
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for name in packages():
        index = tmp_path / 'install' / name / 'share' / 'ament_index' / 'resource_index'
        assert (index / 'packages' / name).exists(), name


def test_colcon_test_covers_every_test_folder_once():
    """`colcon test` runs pytest in each package folder with its setup.cfg testpaths: together
    they must name every test folder and top-level test file, each once."""
    import configparser

    named = []
    for pkg in packages().values():
        cfg = configparser.ConfigParser()
        cfg.read(pkg / 'setup.cfg')
        for path in cfg['tool:pytest']['testpaths'].split():
            named.append((pkg / path).resolve().relative_to(REPO / 'tests').as_posix())
    tests = REPO / 'tests'
    wanted = [p.name for p in tests.iterdir() if p.is_dir() and any(p.glob('test_*.py'))]
    wanted += [p.name for p in tests.glob('test_*.py')]
    assert sorted(named) == sorted(wanted)
