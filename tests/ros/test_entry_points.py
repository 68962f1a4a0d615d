"""A node stopped by Ctrl-C while it still imports (launch stopping a graph that is starting on a
loaded machine) says so in one line and exits 0, as after a Ctrl-C once running; before, a
KeyboardInterrupt traceback from inside scipy or MuJoCo. The installed console scripts are run,
and the signal is sent once Python reports (-X importtime) the first import made after the
shared entry module loaded, so it lands in the node module's own imports. (The console
script's own start, importlib.metadata finding the entry point, stays outside: tens of ms.)"""

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from equimus_bringup.supervisor import find_executable


def _default_interrupts() -> None:
    """In the node, before exec: SIGINT and SIGQUIT at their defaults, as launch starts a node.
    A test run started by a script's `cmd &` has both ignored (SigIgn 0x81001006), which a child
    inherits and Python keeps: the node then ran on through a Ctrl-C sent while importing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _signal_status(pid: int) -> str:
    """The node's signal dispositions when it is signalled (for the failure message: a SIGINT
    that the node ignores, inherited from the test process, would explain a node that runs on)."""
    try:
        with open(f'/proc/{pid}/status') as fh:
            return ' '.join(x.strip() for x in fh if x.startswith(('SigIgn', 'SigCgt', 'State')))
    except OSError as exc:
        return f'no status: {exc}'


@pytest.mark.parametrize(
    ('package', 'executable', 'module'),
    [
        ('equimus_control', 'controller', 'controller_node'),
        ('equimus_sim', 'sim_node', 'sim_node'),
        ('equimus_hw', 'valve_driver', 'driver_node'),
    ],
)
def test_ctrl_c_while_importing_is_one_line(package, executable, module):
    # A one-page pipe: the node blocks writing its import times at most 4 KiB ahead of what was
    # read here (28-64 KB of them follow the entry module), where a 64 KiB pipe let a node that
    # this process read late finish its imports first. (The failures in .ci/run under load were
    # the inherited ignored SIGINT: see _default_interrupts.)
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [find_executable(package, executable)],
        stdout=subprocess.PIPE,
        stderr=w,
        preexec_fn=_default_interrupts,
        text=True,
        env=dict(os.environ, PYTHONPROFILEIMPORTTIME='1'),
    )
    os.close(w)
    proc.stderr = open(r, encoding='utf-8', errors='replace')  # noqa: SIM115 (closed by communicate)
    lines = []
    entered = False
    status = 'never signalled'
    t0 = time.monotonic()
    guard = threading.Timer(120.0, proc.kill)  # the line never came: fail, do not hang
    guard.start()
    try:
        for line in proc.stderr:
            lines.append(line)
            if entered:  # an import inside run() has finished: the node's module imports on
                status = _signal_status(proc.pid)
                proc.send_signal(signal.SIGINT)
                break
            entered = line.rstrip().endswith(' equimus_ros.entry')
        out, err = proc.communicate(timeout=120)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    time_taken = f'exited after {time.monotonic() - t0:.1f} s, rc {proc.returncode}'
    said = [x for x in ''.join(lines).splitlines() + err.splitlines() if x.strip()]
    said = [x for x in said if not x.startswith('import time:')]
    assert said == [f'{module}: stopped by Ctrl-C while starting'], (said[-20:], status, time_taken)
    assert proc.returncode == 0 and out == '', (proc.returncode, out[-1000:])


QUIRK = """
import os, signal, time
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5.0)
except KeyboardInterrupt:
    # what an import's C code made of the interrupt in a CI run (numpy's _distributor_init)
    raise TypeError('expected a message argument')
def main():
    return 0
"""
PLAIN_ERROR = """
raise TypeError('a bug, no Ctrl-C')
"""


@pytest.mark.parametrize(
    ('source', 'said', 'rc'),
    [
        (QUIRK, ['quirk: stopped by Ctrl-C while starting'], 0),
        (PLAIN_ERROR, None, 1),
    ],
)
def test_a_ctrl_c_that_an_import_turned_into_another_error_is_still_one_line(
    tmp_path, source, said, rc
):
    """entry.run: the Ctrl-C is remembered by the handler, so whatever exception an import made
    of it ends in the one line; an error without a Ctrl-C keeps its traceback."""
    name = 'quirk' if said else 'buggy'
    (tmp_path / f'{name}.py').write_text(source)
    proc = subprocess.run(
        [
            sys.executable,
            '-c',
            f'import sys; sys.path.insert(0, {str(tmp_path)!r}); '
            f'from equimus_ros.entry import run; sys.exit(run({name!r}))',
        ],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_default_interrupts,
    )
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == rc, proc.stderr
    if said is None:
        assert lines[0].startswith('Traceback') and 'a bug, no Ctrl-C' in lines[-1], lines
    else:
        assert lines == said, lines
