"""`equimus check rig` as a lab runs it: its own process against rig_emulator in another (the
simulated leg behind a NatNet server on real UDP and a DAC board on a real pty), its report read
back. A rig whose DAC chains are off passes and the calibration it writes puts every valve within
1 kPa of the command; a Motive project without one of the bodies, a board that answers nothing
and a valve whose setpoint wire is broken each fail with one line on stderr and exit 2."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from equimus_bringup.main_job import free_udp_port_pair
from equimus_description.interface import ACTUATORS
from equimus_hw.valve.board_emulator import ValveModel
from equimus_hw.valve.calibration import ValveCalibration, load_calibration

GAIN, OFFSET, NOISE = (1.06, 0.94), (-2.5, 1.8), 0.3  # per channel (maa, baa): the injected chain
HOLD = '1.0'  # s per valve level (the emulated valve's τ is 0.2 s)
START_S = 60.0  # s for the rig emulator to come up on a loaded machine


@contextlib.contextmanager
def emulated_rig(tmp_path: Path, *options: str):
    """rig_emulator in its own process; yields (hardware launch arguments for it, its output
    so far as a callable). Stopped with SIGINT, as the launch stops it; its last line checked."""
    port = free_udp_port_pair()
    link = tmp_path / 'dac'
    log = tmp_path / 'rig.log'
    with open(log, 'w') as out:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'equimus_bringup.rig_emulator', '--link', str(link),
             '--command-port', str(port), '--data-port', str(port + 1), '--unicast', *options],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        end = time.monotonic() + START_S
        while not link.exists():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < end, log.read_text()
            time.sleep(0.1)
        yield (
            [f'serial_port:={link}', 'natnet_server:=127.0.0.1', 'natnet_local:=127.0.0.1',
             'natnet_multicast:=false', f'natnet_command_port:={port}',
             f'natnet_data_port:={port + 1}'],
            log.read_text,
        )  # fmt: skip
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert 'code-limit violations 0, outputs at stop [0, 0]' in text, text  # left vented


def check_rig(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, '-m', 'equimus_bringup.cli', 'check', 'rig', *args, '--out', str(out),
         '--hold', HOLD, '--wait', '10'],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def marks(report: str) -> dict[str, str]:
    """Section -> PASS | FAIL | SKIP, from report.txt."""
    found = {}
    for line in report.splitlines():
        for mark in ('PASS', 'FAIL', 'SKIP'):
            head, sep, _ = line.partition(f' {mark}  ')
            if sep:
                found[head.strip()] = mark
    return found


def assert_fails(r: subprocess.CompletedProcess[str], section: str, says: str) -> None:
    """Exit 2, exactly one line on stderr: the failing section's, saying `says`."""
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stdout + r.stderr
    assert lines[0].startswith(f'equimus check rig: {section}: '), lines
    assert says in lines[0], lines
    assert 'Traceback' not in r.stdout + r.stderr


def test_a_rig_with_dac_errors_passes_and_is_calibrated(tmp_path):
    cal_path = tmp_path / 'cal.yaml'
    with emulated_rig(
        tmp_path,
        '--dac-gain', ','.join(map(str, GAIN)),
        f'--dac-offset-kpa={",".join(map(str, OFFSET))}',
        '--adc-noise-kpa', str(NOISE),
    ) as (args, _):  # fmt: skip
        r = check_rig([*args, f'calibration:={cal_path}'], tmp_path / 'report')
    assert r.returncode == 0 and r.stderr == '', r.stdout + r.stderr
    report = (tmp_path / 'report' / 'report.txt').read_text()
    assert marks(report) == {
        'Motive': 'PASS', 'Estimator': 'PASS', 'Board': 'PASS', 'Valve maa': 'PASS',
        'Valve baa': 'PASS',
    }, report  # fmt: skip
    assert (tmp_path / 'report' / 'rig_check.png').stat().st_size > 10_000
    cal = load_calibration(str(cal_path), ACTUATORS)
    nominal = ValveCalibration()
    fitted_chains = cal.calibrations(nominal, ACTUATORS)  # what the valve driver applies
    for ch, name in enumerate(ACTUATORS):
        fit = cal.channels[name]
        print(f'{name}: injected gain {GAIN[ch]}, offset {OFFSET[ch]:+} kPa; recovered gain '
              f'{fit.dac_gain:.4f}, offset {fit.dac_offset_kpa:+.2f} kPa')  # fmt: skip
        truth = ValveModel(nominal, dac_gain=GAIN[ch], dac_offset_kpa=OFFSET[ch])
        fitted, top = fitted_chains[ch], truth.target(cal.board_max_code)
        # every pressure the valve regulates (6 kPa up to what the board's largest code gives)
        kpas = [kpa for kpa in range(7, 51) if kpa <= top]
        errors = [abs(truth.target(fitted.kpa_to_code(kpa)) - kpa) for kpa in kpas]
        assert len(errors) > 35 and max(errors) < 1.0, (name, fit, errors)
        # without the file (the nominal chain) the same valve misses by more
        assert max(abs(truth.target(nominal.kpa_to_code(kpa)) - kpa) for kpa in kpas) > 1.3


def test_a_motive_project_without_a_body(tmp_path):
    with emulated_rig(tmp_path, '--omit-body', 'calf') as (args, _):
        r = check_rig([*args, 'calibration:=none'], tmp_path / 'report')
    assert_fails(r, 'Motive', 'calf')
    report = marks((tmp_path / 'report' / 'report.txt').read_text())
    assert report['Estimator'] == 'SKIP' and report['Valve maa'] == 'SKIP', report


def test_a_silent_board(tmp_path):
    """Motive answers; the serial port opens and nothing on it ever replies."""
    master, slave = os.openpty()
    try:
        with emulated_rig(tmp_path) as (args, _):
            args = [a for a in args if not a.startswith('serial_port:=')]
            t0 = time.monotonic()
            r = check_rig(
                [*args, f'serial_port:={os.ttyname(slave)}', 'calibration:=none'],
                tmp_path / 'report',
            )
            took = time.monotonic() - t0
    finally:
        os.close(master)
        os.close(slave)
    assert_fails(r, 'Board', 'did not answer HELLO')
    report = marks((tmp_path / 'report' / 'report.txt').read_text())
    assert report['Motive'] == 'PASS' and report['Valve baa'] == 'SKIP', report
    assert took < 30.0, took


def test_a_valve_that_does_not_follow_its_setpoint(tmp_path):
    """baa's setpoint wire broken (its chain gives 0 V): maa passes, baa fails after its first
    level, and no calibration is written."""
    cal_path = tmp_path / 'cal.yaml'
    with emulated_rig(tmp_path, '--dac-gain', '1.0,0.0') as (args, _):
        r = check_rig([*args, f'calibration:={cal_path}'], tmp_path / 'report')
    assert_fails(r, 'Valve baa', 'valve baa does not follow its setpoint')
    report = marks((tmp_path / 'report' / 'report.txt').read_text())
    assert report['Valve maa'] == 'PASS', report
    assert not cal_path.exists()
    assert 'calibration NOT written' in r.stdout


@pytest.mark.parametrize('bad', ['hold', 'argument'])
def test_bad_input_is_one_line(tmp_path, bad):
    args = ['--hold', '0.01'] if bad == 'hold' else ['serial_prot:=/dev/ttyACM0']
    r = subprocess.run(
        [sys.executable, '-m', 'equimus_bringup.cli', 'check', 'rig', *args,
         '--out', str(tmp_path / 'report')],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / 'report').exists()
