"""What a 120 Hz loop costs on this machine when it wakes up, against the same work run hot.

    python benchmarks/bench_machine.py [--quick]

Every control-path figure here (the sim node's tick, the fused loop's frame) is work done once
per 8.3 ms frame after the thread slept. This measures two fixed pieces of work: 5 mj_step of
the leg model (one 120 Hz frame of physics at Δt = 1/600 s, compiled code) and the NatNet
client taking one Motive frame datagram of the emulated rig (decode, checks, bookkeeping: the
fused loop's first stage, Python), each run back to back and after each kind of gap, side by
side in one run:
- back to back (the hot figure micro-benchmarks give);
- after reading 64 MB (caches evicted by our own process);
- after 8.3 ms of a Python busy loop (the CPU never idles);
- after an 8.3 ms sleep (what every loop of the stack does).
On a dedicated machine the gaps cost little more than the cache refill; on a shared virtual
machine the CPU's state may be lost whenever the vCPU leaves it, and the ratios show how much.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

PERIOD = 1 / 120


def _busy(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def _physics():
    """One 120 Hz frame of the leg's physics."""
    import mujoco

    from equimus_sim.simulator import make_simulator

    sim = make_simulator(timestep=1 / 600)
    m, d = sim.model, sim.data

    def frame() -> None:
        for _ in range(5):
            mujoco.mj_step(m, d)

    return frame


def _natnet(frames: int):
    """One frame datagram of the emulated rig's Motive stream into the NatNet client (after its
    handshake), each with the next frame number, as the fused loop's receive thread takes it."""
    from equimus_hw.natnet import protocol as P
    from equimus_hw.natnet.client import NatNetClient
    from equimus_hw.natnet.emulator import NatNetEmulator

    emu = NatNetEmulator()
    taken = []
    client = NatNetClient(on_frame=taken.append, server_address='127.0.0.1')
    sender = ('127.0.0.1', emu.command_port)
    client.handle_datagram(P.encode_message(emu.server_info()), time.perf_counter_ns(), sender)
    modeldef = P.encode_message(emu.model_definitions(), emu.version)
    client.handle_datagram(modeldef, time.perf_counter_ns(), sender)
    datagrams = []
    for i in range(frames):
        f = emu.build_frame(i / 120)
        f.frame_number = i + 1
        datagrams.append(emu._stamp_and_encode(f))
    it = iter(datagrams)

    def frame() -> None:
        client.handle_datagram(next(it), time.perf_counter_ns(), sender)

    def check() -> None:
        if len(taken) != frames:
            raise RuntimeError(f'the client took {len(taken)} of {frames} frames')

    return frame, check


def run(quick: bool = False) -> dict:
    t = time.perf_counter()
    _busy(200_000)
    busy_n = int(PERIOD / ((time.perf_counter() - t) / 200_000))
    big = np.ones(64 * 2**20 // 8)
    gaps = {
        'back_to_back': None,
        'after_64MB_read': big.sum,
        'after_8ms_busy_loop': lambda: _busy(busy_n),
        'after_8ms_sleep': lambda: time.sleep(PERIOD),
    }
    frames = 150 if quick else 600
    natnet, natnet_check = _natnet(len(gaps) * (frames + 20))
    out = {}
    for work_name, work in (('physics', _physics()), ('natnet', natnet)):
        for name, gap in gaps.items():
            took = []
            for _ in range(frames + 20):
                if gap is not None:
                    gap()
                t = time.perf_counter()
                work()
                took.append(time.perf_counter() - t)
            w = np.array(took[20:]) * 1e6
            out[f'frame_{work_name}_us_{name}_p50'] = float(np.median(w))
            out[f'frame_{work_name}_us_{name}_p90'] = float(np.percentile(w, 90))
        hot = out[f'frame_{work_name}_us_back_to_back_p50']
        prefix = '' if work_name == 'physics' else f'{work_name}_'
        for name in list(gaps)[1:]:
            out[f'{prefix}{name}_vs_back_to_back'] = out[f'frame_{work_name}_us_{name}_p50'] / hot
    natnet_check()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument('--quick', action='store_true', help='fewer frames')
    r = run(p.parse_args(argv).quick)
    for k, v in r.items():
        print(f'{k:48s} {v:.4g}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
