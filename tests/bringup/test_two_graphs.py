"""Two graphs on one host and ROS domain (issue 28): the second start refuses before it starts
anything, names a free ROS_DOMAIN_ID, and never drives the first graph's valve driver.

Graph A (split sim graph, its valve driver a managed node in its own process) runs; then
1. `equimus launch` of a second graph on the same domain: exit 2, one line, no process started,
   no bag made (equimus_bringup.prestart.check_domain);
2. a supervisor that got past that check (another graph started in the meantime) finds a second
   valve driver when it is about to configure its own, and sends no lifecycle request, which
   would reach A's driver too (Supervisor.other_driver).
Either way A's driver sees no lifecycle transition and A goes on commanding its valves.
Real processes and rclpy/DDS.
"""

import os
import re
import time

import pytest
from rosspin import BackgroundSpin

from equimus_bringup import cli, prestart
from equimus_bringup.graph import describe_graph
from equimus_bringup.supervisor import GraphError, Supervisor
from equimus_description.interface import VALVE_APPLIED
from equimus_ros.qos import qos_for

rclpy = pytest.importorskip('rclpy')


class Applied:
    """/valve/applied as seen from this process, spun by a thread of its own."""

    def __init__(self) -> None:
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState

        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('applied_watch', context=self.ctx)
        self.rows: list[tuple[float, list[float]]] = []
        self.node.create_subscription(
            JointState,
            VALVE_APPLIED.name,
            lambda m: self.rows.append((time.monotonic(), list(m.effort))),
            qos_for(VALVE_APPLIED),
        )
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.spin = BackgroundSpin(self.ex, self.ctx)

    def flowing(self, since: float) -> bool:
        rows = [d for t, d in self.rows if t > since]
        return len(rows) >= 20 and any(max(d) > 1.0 for d in rows)

    def close(self) -> None:
        self.spin.stop()
        self.ex.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


def _wait(sup, cond, timeout, what):
    end = time.monotonic() + timeout
    while not cond():
        assert sup.poll() is None, sup.failed
        assert time.monotonic() < end, f'timed out after {timeout} s waiting for {what}'
        time.sleep(0.05)


def _transitions(sup) -> list[str]:
    """The lifecycle transitions A's valve driver logged."""
    log = ''.join(sup.output.get('valve_driver', []))
    return re.findall(r'\]: (configured|active|deactivated|cleaned up|shut down)\b', log)


SPLIT = {'composed': 'false', 'sim_mode': 'realtime'}


@pytest.mark.slow
def test_a_second_graph_on_the_domain_is_refused_and_never_drives_the_first(
    capsys, monkeypatch, tmp_path
):
    domain = os.environ['ROS_DOMAIN_ID']
    a = Supervisor(describe_graph('sim', SPLIT), echo=False)
    applied = Applied()
    b = None
    try:
        a.start()
        t0 = time.monotonic()
        _wait(a, lambda: applied.flowing(t0), 90.0, "graph A's loop")
        assert _transitions(a) == ['configured', 'active'], _transitions(a)

        # 1. A second `equimus launch`: refused by the domain check, nothing started. (The
        #    listening window is widened for a loaded machine; it ends once A is heard.)
        monkeypatch.setattr(prestart, 'DOMAIN_LISTEN_S', 20.0)
        bag = tmp_path / 'bag'
        t1 = time.monotonic()
        code = cli.main(['launch', 'sim', *(f'{k}:={v}' for k, v in SPLIT.items()),
                         'record:=true', f'bag:={bag}'])  # fmt: skip
        took = time.monotonic() - t1
        out, err = capsys.readouterr()
        assert code == 2, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and 'Traceback' not in err, err
        assert f'another graph is running on ROS_DOMAIN_ID={domain}' in lines[0], lines[0]
        free = re.search(r'free domain: ROS_DOMAIN_ID=(\d+)', lines[0])
        assert free and free[1] != domain, lines[0]
        assert '[equimus]' not in out and not bag.exists(), out  # no process, no bag
        print(f'refused in {took:.1f} s: {lines[0]}')

        # 2. A supervisor past that check (as if A had started meanwhile): its own driver's
        #    process starts, but no lifecycle request is sent while a second driver is listed.
        b = Supervisor(describe_graph('sim', SPLIT), echo=False, drivers_listed=[])
        with pytest.raises(GraphError, match=f'another graph started on ROS_DOMAIN_ID={domain}'):
            b.start()
        b.stop()
        b = None

        # A was never driven: the same two transitions, and its loop runs on.
        t2 = time.monotonic()
        _wait(a, lambda: applied.flowing(t2), 30.0, "graph A's loop after the refusals")
        assert _transitions(a) == ['configured', 'active'], _transitions(a)
    finally:
        if b is not None:
            b.stop()
        codes = a.stop()
        applied.close()
    # a process that had to be killed printed its threads' stacks last: show them
    tails = {n: ''.join(a.output.get(n, [])[-40:]) for n, c in codes.items() if c != 0}
    assert all(c == 0 for c in codes.values()), (codes, tails)
