"""LifecycleClient.trigger with `again_every` (what `equimus valve disarm|estop` uses): a
request left unanswered is sent again, and the answer to the new one is taken; without it the
call waits for the first. Real rclpy over DDS: the service runs in a process of its own, whose
first request is answered only after 3 s (as a reply lost to a not yet matched client is never
answered at all)."""

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip('rclpy')

SERVICE = '/trigger_again_probe/estop'

SERVER = f"""
import threading, time
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from std_srvs.srv import Trigger

rclpy.init()
node = rclpy.create_node('trigger_again_probe')
calls = []
lock = threading.Lock()

def estop(request, response):
    with lock:
        calls.append(time.monotonic())
        n = len(calls)
    if n == 1:
        time.sleep(3.0)
    response.success, response.message = True, f'answer to request {{n}}'
    return response

node.create_service(Trigger, '{SERVICE}', estop, callback_group=ReentrantCallbackGroup())
print('ready', flush=True)
executor = MultiThreadedExecutor(num_threads=4)
executor.add_node(node)
try:
    executor.spin()
except KeyboardInterrupt:
    pass
"""


@pytest.fixture
def server():
    from equimus_bringup.graph import graph_environment

    env = dict(os.environ, **graph_environment('sim'))
    proc = subprocess.Popen(
        [sys.executable, '-c', SERVER], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == 'ready'
        yield env
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize('again_every', [None, 0.5])
def test_an_unanswered_request_is_sent_again(server, again_every):
    from equimus_bringup.supervisor import LifecycleClient

    client = LifecycleClient(server)
    try:
        t0 = time.monotonic()
        ok, message = client.trigger(SERVICE, 2.5, again_every)
        took = time.monotonic() - t0
    finally:
        client.close()
    if again_every is None:
        assert not ok and 'did not answer within 2.5 s' in message, message
    else:
        assert ok and message == 'answer to request 2', (message, took)
        assert took < 2.5, took
