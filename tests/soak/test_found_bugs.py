"""Regression tests for bugs the 10-minute soak found."""
import sys
import threading


from equimus_hw.natnet.client import NatNetClient


def test_frame_rate_is_safe_while_frames_arrive():
    """NatNetClient.frame_rate once iterated _arrivals while the receive thread appended:
    "deque mutated during iteration" killed natnet_bridge at t=186 s of the 10-minute soak."""
    client = NatNetClient()
    stop = threading.Event()

    def receive():
        n = 0
        while not stop.is_set():
            n += 1
            client._arrivals.append((client.clock_ns(), n))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    t = threading.Thread(target=receive, daemon=True)
    t.start()
    try:
        for _ in range(3000):
            client.frame_rate()
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
