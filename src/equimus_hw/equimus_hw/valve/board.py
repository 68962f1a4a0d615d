"""What the valve driver needs from a DAC board, and the simulated board (no ROS imports).

The driver (safety filter, calibration, arming, watchdog) is the same on both legs; only its
board differs:
- `link.BoardLink`: the serial DAC board of the rig (or the board emulator on a pty);
- `SimBoard`: the simulated leg's board. It takes the same DAC codes and regulates to what they
  mean (`ValveCalibration.code_to_kpa`, so quantisation matches the rig); the driver publishes
  those pressures on /valve/applied and the sim node's valves follow them. It has no watchdog
  of its own (the simulated valves hold their last setpoint), so it needs no keep-alive.
"""

from __future__ import annotations

from typing import Protocol

from . import protocol as P
from .calibration import ValveCalibration
from .link import LinkStats

__all__ = ['BOARDS', 'Board', 'SimBoard']

#: Values of the driver's `board` parameter.
BOARDS = ('serial', 'sim')


class Board(Protocol):
    """A DAC board as the valve driver uses it (BoardLink and SimBoard implement it)."""

    port: str
    cal: ValveCalibration  # the driver swaps it when a runtime parameter changes the limits
    state: str  # 'connecting' | 'connected' | 'disconnected' | 'closed' ...
    last_error: str
    generation: int  # +1 on every (re)connect: the driver vents after each
    info: P.Info | None
    stats: LinkStats
    measured_kpa: list[float] | None  # read-back pressures, None without a read-back
    measured_count: int  # +1 on every new read-back
    board_codes: list[int] | None  # codes the board reports it outputs
    #: True when the board vents by itself unless a SET arrives regularly.
    needs_keepalive: bool

    @property
    def connected(self) -> bool: ...

    @property
    def set_encoder(self) -> str:
        """How its SET frames are encoded: 'compiled', 'python' (protocol.set_encoder), 'none'."""

    def start(self) -> None: ...

    def send_codes(self, codes: list[int]) -> int | None:
        """Output these DAC codes now; the frame's seq, or None when the board is unreachable."""

    def rehearse(self, codes: list[int]) -> bytes:
        """What send_codes would put on the wire for these codes, written nowhere (the fused
        loop's rehearsal of a frame's code; nothing of the link changes)."""

    def vent_and_close(self, timeout_s: float = 1.0) -> bool:
        """Output zero on every channel and close; True when the board confirmed the vent."""

    def latency_percentiles_ms(self) -> dict[str, float]: ...


class SimBoard:
    """The simulated board: accepts every SET at once; see the module docstring."""

    needs_keepalive = False
    set_encoder = 'none'  # no wire

    def __init__(self, channels: int, calibration: ValveCalibration) -> None:
        self.port = 'sim'
        self.channels = channels
        self.cal = calibration
        self.state = 'connecting'
        self.last_error = ''
        self.generation = 0
        self.info: P.Info | None = None
        self.stats = LinkStats()
        self.measured_kpa: list[float] | None = None  # the sim node publishes /valve/pressure
        self.measured_count = 0
        self.board_codes: list[int] | None = [0] * channels
        self._seq = 0

    @property
    def connected(self) -> bool:
        return self.state == 'connected'

    def start(self) -> None:
        self.state = 'connected'
        self.generation += 1

    def rehearse(self, codes: list[int]) -> bytes:
        return b''  # no wire

    def send_codes(self, codes: list[int]) -> int | None:
        if self.state != 'connected':
            return None
        if len(codes) != self.channels or any(not 0 <= int(c) <= self.cal.max_code for c in codes):
            raise ValueError(
                f'DAC codes {codes} outside [0, {self.cal.max_code}] or not '
                f'{self.channels} channels'
            )
        self._seq = (self._seq + 1) & 0xFF
        self.board_codes = [int(c) for c in codes]
        self.stats.frames_sent += 1
        self.stats.acks += 1
        return self._seq

    def pressures(self) -> list[float]:
        """kPa the simulated valves regulate to for the last codes."""
        return [self.cal.code_to_kpa(c) for c in self.board_codes or []]

    def vent_and_close(self, timeout_s: float = 1.0) -> bool:
        self.board_codes = [0] * self.channels
        self.state = 'closed'
        return True

    def latency_percentiles_ms(self) -> dict[str, float]:
        return {}
