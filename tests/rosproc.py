"""Helpers for tests that start real ROS 2 node processes (no mocks: real rclpy and DDS)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from equimus_bringup.supervisor import STACK_DUMP_WAIT_S, find_executable
from equimus_ros.main import STACK_DUMP_SIGNAL


def start_node(
    package: str, executable: str, *ros_args: str, args=(), domain: int | None = None
) -> subprocess.Popen:
    """Start an installed node in its own process group, output captured; on `domain` when
    given (else the session's ROS_DOMAIN_ID)."""
    cmd = [find_executable(package, executable), *args]
    if ros_args:
        cmd += ['--ros-args', *ros_args]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(
            os.environ,
            PYTHONUNBUFFERED='1',
            **({} if domain is None else {'ROS_DOMAIN_ID': str(domain)}),
        ),
    )


def stop(proc: subprocess.Popen, sig=signal.SIGINT, timeout: float = 10.0) -> str:
    """Signal the process, wait, and return everything it printed."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # A node that ignored the signal prints where it hangs (run_node's stack dump).
            os.killpg(proc.pid, STACK_DUMP_SIGNAL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(STACK_DUMP_WAIT_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.stdout.read() if proc.stdout else ''


def vented_on_stop(log: str, prefix: str = '') -> bool:
    """A graph's output says its valves were vented when it stopped: the driver's vent
    acknowledged by the board, or (an emulated rig's board starved past the driver's wait on a
    loaded machine) the board's own outputs at 0 when it stopped. `prefix`: the driver's process
    tag in a supervisor's log ('[control_loop] ')."""
    acked = f'{prefix}valve_driver: vented on shutdown (acknowledged)' in log
    unconfirmed = f'{prefix}valve_driver: vented on shutdown (NOT acknowledged' in log
    return acked or (unconfirmed and 'outputs at stop [0, 0]' in log)
