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


def test_emulated_rig_keeps_no_frame_queue(tmp_path):
    """EmulatedRig used the frame VirtualMocap.capture returns and never released it, so every
    frame stayed queued: +14 MB/min in the soak process, whose garbage collection then stalled the
    emulated board (a 661 ms watchdog miss at t=500 s of the 10-minute soak)."""
    from equimus_bringup.rig_emulator import BODIES, EmulatedRig
    from equimus_hw.natnet.emulator import NatNetEmulator

    natnet = NatNetEmulator(bodies=BODIES)
    rig = EmulatedRig(str(tmp_path / 'dac'), natnet)
    for _ in range(240):
        rig.tick()
    assert rig.mocap.pending == 0
    assert rig.frames == 240
    frame = natnet.build_frame(0.0)
    assert len(frame.rigid_bodies) == len(BODIES)
    assert all(rb.tracking_valid for rb in frame.rigid_bodies)
