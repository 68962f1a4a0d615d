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
import threading

import pytest

from equimus_bringup.supervisor import find_executable


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
    # read here (28-64 KB of them follow the entry module), so on a loaded machine, where this
    # process reads late, the signal still lands in the imports (a 64 KiB pipe let them finish).
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [find_executable(package, executable)],
        stdout=subprocess.PIPE,
        stderr=w,
        text=True,
        env=dict(os.environ, PYTHONPROFILEIMPORTTIME='1'),
    )
    os.close(w)
    proc.stderr = open(r, encoding='utf-8', errors='replace')  # noqa: SIM115 (closed by communicate)
    lines = []
    entered = False
    guard = threading.Timer(120.0, proc.kill)  # the line never came: fail, do not hang
    guard.start()
    try:
        for line in proc.stderr:
            lines.append(line)
            if entered:  # an import inside run() has finished: the node's module imports on
                proc.send_signal(signal.SIGINT)
                break
            entered = line.rstrip().endswith(' equimus_ros.entry')
        out, err = proc.communicate(timeout=120)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    said = [x for x in ''.join(lines).splitlines() + err.splitlines() if x.strip()]
    said = [x for x in said if not x.startswith('import time:')]
    assert said == [f'{module}: stopped by Ctrl-C while starting'], said[-20:]
    assert proc.returncode == 0 and out == '', (proc.returncode, out[-1000:])
