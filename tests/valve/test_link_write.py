"""The link's one-call frame write on a real pseudo-terminal: a full output buffer (a board that
reads slowly) must still deliver every byte, in order, through pyserial's waiting write."""

import os
import threading
import time

import pytest
import serial

from equimus_hw.valve.link import _write_frame


def test_a_partial_write_is_completed_in_order_when_the_reader_catches_up():
    master, slave = os.openpty()
    ser = serial.Serial(os.ttyname(slave), timeout=0.005, write_timeout=5.0)
    blob = bytes(range(256)) * 1024  # 256 KiB: far more than the pty buffers
    got = bytearray()

    def drain():
        time.sleep(0.1)  # the write finds the buffer full first
        while len(got) < len(blob):
            got.extend(os.read(master, 65536))

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        _write_frame(ser, blob)
        reader.join(10.0)
    finally:
        ser.close()
        os.close(slave)
        os.close(master)
    assert bytes(got) == blob


def test_a_reader_that_never_reads_ends_in_a_serial_timeout():
    master, slave = os.openpty()
    ser = serial.Serial(os.ttyname(slave), timeout=0.005, write_timeout=0.1)
    try:
        t0 = time.monotonic()
        with pytest.raises(serial.SerialTimeoutException):
            _write_frame(ser, b'\x00' * (1 << 20))
        assert time.monotonic() - t0 < 2.0
    finally:
        ser.close()
        os.close(slave)
        os.close(master)
