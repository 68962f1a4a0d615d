"""Command-side safety logic of the valve driver, independent of ROS (no ROS imports).

Owns every decision about what pressure may reach the valves:
- starts DISARMED (there is no way to construct it armed); disarmed => 0 kPa on every channel;
- emergency stop latches: outputs 0 kPa until an explicit arm();
- non-finite channel values vent that channel (0 kPa) and report a warning;
- values are clamped to [0, max_kpa] (max_kpa <= calibration.HARD_MAX_KPA);
- the output moves toward the target at most slew_kpa_per_s (safety vents are immediate);
- command watchdog: if no valid command arrived within timeout_s, every channel vents until a
  fresh command arrives; after arm() or require_fresh_command() the output is 0 until a command
  newer than that moment arrives.

Time is passed in explicitly (seconds, monotonic), so the logic is deterministic in tests.
The slew limit may run on a time of its own (`step(now, elapsed=...)`): in the simulated graph it
follows sim time, so a lockstep run is the same however fast the wall clock goes. Which clock
`now` is, is the caller's choice: the steady clock on the rig and in the split graph (a
controller that stopped is noticed in wall seconds), sim time in the composed sim graph, where
the simulator owns time and a late wall clock must not change a message (driver_node).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from equimus_description.valve import HARD_MAX_KPA


@dataclasses.dataclass
class CommandResult:
    accepted: bool
    warnings: list[str]
    vented_channels: list[int]
    saturated_channels: list[int]


class SafetyFilter:
    """See module docstring. Not thread-safe: the caller serialises access."""

    def __init__(
        self,
        n_channels: int = 2,
        max_kpa: float = HARD_MAX_KPA,
        slew_kpa_per_s: float = 1000.0,
        timeout_s: float = 0.25,
    ):
        if n_channels < 1:
            raise ValueError('n_channels must be >= 1')
        self.n = n_channels
        self.configure(max_kpa, slew_kpa_per_s, timeout_s)
        self._armed = False
        self._estopped = False
        self._target = [0.0] * n_channels
        self._output = [0.0] * n_channels
        self._last_cmd: float | None = None
        self._fresh_after = -math.inf
        self._last_step: float | None = None
        self._watchdog_active = False
        # Counters for diagnostics.
        self.watchdog_trips = 0
        self.nonfinite_count = 0
        self.saturation_count = 0
        self.rejected_count = 0
        self.estop_count = 0

    def configure(self, max_kpa: float, slew_kpa_per_s: float, timeout_s: float) -> None:
        """Set the limits (at start, or while running: a lower ceiling applies at the next step)."""
        if not (math.isfinite(max_kpa) and 0 < max_kpa <= HARD_MAX_KPA):
            raise ValueError(f'max_kpa={max_kpa} must be in (0, {HARD_MAX_KPA}] kPa')
        if not (math.isfinite(slew_kpa_per_s) and slew_kpa_per_s > 0):
            raise ValueError('slew_kpa_per_s must be > 0 (use a large value to disable)')
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError('timeout_s must be a positive number of seconds')
        self.max_kpa = float(max_kpa)
        self.slew = float(slew_kpa_per_s)
        self.timeout_s = float(timeout_s)

    # ----------------------------------------------------------------- state
    @property
    def armed(self) -> bool:
        return self._armed

    @property
    def estopped(self) -> bool:
        return self._estopped

    @property
    def watchdog_active(self) -> bool:
        """True while the command watchdog holds the outputs vented."""
        return self._watchdog_active

    @property
    def output(self) -> list[float]:
        return list(self._output)

    def arm(self, now: float) -> None:
        """Arm (also clears a latched e-stop). Output stays 0 until a command newer than now."""
        self._armed = True
        self._estopped = False
        self._last_step = now
        self.require_fresh_command(now)

    def disarm(self) -> None:
        self._armed = False
        self._vent_all()

    def estop(self) -> None:
        """Latch the emergency stop: vent now, stay vented until arm()."""
        self._estopped = True
        self._armed = False
        self.estop_count += 1
        self._vent_all()

    def require_fresh_command(self, now: float) -> None:
        """Vent and ignore earlier commands (used after arming and after a reconnect)."""
        self._fresh_after = now
        self._last_cmd = None
        self._vent_all()

    def _vent_all(self) -> None:
        self._target = [0.0] * self.n
        self._output = [0.0] * self.n

    # ----------------------------------------------------------------- inputs
    def command(self, values: Sequence[float], now: float) -> CommandResult:
        """Take a command (kPa per channel). A wrong length is rejected as a whole."""
        warnings: list[str] = []
        try:
            vals = [float(v) for v in values]
        except (TypeError, ValueError):
            self.rejected_count += 1
            return CommandResult(False, ['command is not a list of numbers; ignored'], [], [])
        if len(vals) != self.n:
            self.rejected_count += 1
            return CommandResult(
                False,
                [f'command has {len(vals)} values, expected {self.n} [maa, baa]; ignored'],
                [],
                [],
            )
        vented, saturated = [], []
        target = []
        for i, v in enumerate(vals):
            if not math.isfinite(v):
                vented.append(i)
                self.nonfinite_count += 1
                warnings.append(f'channel {i}: non-finite command {v}; channel vented to 0 kPa')
                target.append(0.0)
                self._output[i] = 0.0
            elif v < 0.0 or v > self.max_kpa:
                saturated.append(i)
                self.saturation_count += 1
                target.append(min(max(v, 0.0), self.max_kpa))
            else:
                target.append(v)
        if now <= self._fresh_after:
            # Arrived (or was stamped) before the arm/reconnect moment: not fresh.
            return CommandResult(
                False,
                warnings + ['command older than the last arm/reconnect; ignored'],
                vented,
                saturated,
            )
        self._target = target
        self._last_cmd = now
        return CommandResult(True, warnings, vented, saturated)

    def step(self, now: float, elapsed: float | None = None) -> list[float]:
        """Advance to time now and return the pressures (kPa) to apply.

        elapsed: the time the slew limit allows for (s); default: now minus the previous step."""
        dt = 0.0 if self._last_step is None else max(0.0, now - self._last_step)
        if elapsed is not None:
            dt = max(0.0, float(elapsed))
        self._last_step = now
        if not self._armed or self._estopped:
            self._vent_all()
            return list(self._output)
        stale = self._last_cmd is None or (now - self._last_cmd) > self.timeout_s
        if stale:
            if not self._watchdog_active and self._last_cmd is not None:
                self.watchdog_trips += 1
            self._watchdog_active = self._last_cmd is not None
            self._vent_all()
            return list(self._output)
        self._watchdog_active = False
        max_step = self.slew * dt
        for i in range(self.n):
            delta = self._target[i] - self._output[i]
            if abs(delta) > max_step:
                delta = math.copysign(max_step, delta)
            self._output[i] = min(max(self._output[i] + delta, 0.0), self.max_kpa)
        return list(self._output)


class CommanderGuard:
    """One commander on /valve/command, decided by who is on the ROS graph, never by silence (no
    ROS imports; the driver passes in what the graph shows and who sent each command).

    Two inputs: the publishers the graph shows on the topic, by endpoint GID (`publishers()`),
    and the publisher GID of each command as it arrives (`heard()`).
    - Arming opens a claim (`arm()`); the first command after it binds its sender as THE
      commander, but only if no other publisher is on the graph. While two are, neither is
      obeyed (the claim stays open: when one leaves, the other's next command binds it).
    - Once bound, only the commander is obeyed. Any other publisher is never obeyed while the
      commander is on the graph, however long the commander has been silent: a stalled
      (SIGSTOPped) controller keeps its place, the safety filter's watchdog vents meanwhile, and
      each other sender is named (`heard()` answers 'intruder' for its first command).
    - The commander leaving the graph (a clean exit; a killed process when its DDS participant
      lease expires, measured 20 s) ends it (`publishers()` answers 'lost'): the driver disarms,
      and a new lone publisher is obeyed only after an explicit arm.
    - `hand_over()`: the commander's supervisor saw its process exit, so the driver need not
      wait for the lease: the GID is forgotten for good (never obeyed again, not counted as a
      publisher while still listed), the driver disarms, and the next arm binds the next lone
      publisher.
    """

    def __init__(self) -> None:
        self.commander: bytes | None = None
        self.claim = False
        self._graph: dict[bytes, str] = {}
        self._listed = False  # the commander has been seen on the graph (it can be lost)
        self._gone: set[bytes] = set()
        self._heard: dict[bytes, str] = {}  # others heard sending, until they leave the graph
        self._names: dict[bytes, str] = {}
        self.conflicts = 0
        self.ignored = 0

    # ----------------------------------------------------------------- inputs
    def publishers(self, graph: Mapping[bytes, str]) -> str:
        """The graph's publishers of the topic (GID -> node name). 'lost' when the commander
        has just left the graph (the caller disarms), else ''."""
        self._graph = dict(graph)
        self._names.update(graph)
        self._gone &= set(graph)  # once it has left the graph, a GID is never seen again
        for gid in [g for g in self._heard if g not in graph and g in self._names]:
            del self._heard[gid]
        if self.commander is None:
            return ''
        if self.commander in graph:
            self._listed = True
            return ''
        if self._listed:
            self.commander = None
            self.claim = False
            self._listed = False
            return 'lost'
        return ''

    def heard(self, sender: bytes) -> str:
        """A command from `sender` arrived: 'accept' (the commander), 'bound' (it has just
        become the commander: accept), 'intruder' (first command of another sender: ignored,
        name it now) or 'ignore'."""
        if self.commander is not None and sender == self.commander:
            return 'accept'
        alone = not (self._live() - {sender})
        if self.commander is None and self.claim and sender not in self._gone and alone:
            self.commander = sender
            self.claim = False
            self._listed = sender in self._graph
            return 'bound'
        if self.commander is None and not self.claim:
            return 'ignore'  # not armed: the safety filter would output 0 anyway
        self.ignored += 1
        if sender in self._heard:
            return 'ignore'
        self._heard[sender] = self._name(sender)
        self.conflicts += 1
        return 'intruder'

    def arm(self) -> None:
        """Open a claim: the next command binds its sender if it is the only publisher."""
        self.commander = None
        self.claim = True
        self._listed = False

    def hand_over(self) -> str:
        """The commander's process exited: forget it (see the class docstring); its name."""
        name = self.commander_name
        if self.commander is not None:
            self._gone.add(self.commander)
        self.commander = None
        self.claim = False
        self._listed = False
        return name

    # ----------------------------------------------------------------- state
    def _name(self, gid: bytes) -> str:
        return self._names.get(gid, 'an unlisted node')

    def _live(self) -> set[bytes]:
        return (set(self._graph) | set(self._heard)) - self._gone

    @property
    def graph_publishers(self) -> int:
        """Publishers the graph shows, not counting handed-over ones still listed."""
        return len(set(self._graph) - self._gone)

    @property
    def commander_name(self) -> str:
        if self.commander is None:
            return ''
        return self._name(self.commander)

    def others(self) -> list[str]:
        """Names of the publishers that are not obeyed (sorted; one entry per publisher)."""
        return sorted(self._name(g) for g in self._live() - {self.commander})

    @property
    def conflict(self) -> bool:
        """Another publisher than the commander (or, during a claim, more than one) is there."""
        live = self._live()
        if self.commander is not None:
            return bool(live - {self.commander})
        return self.claim and len(live) > 1

    def arm_refusal(self) -> str:
        """'' if arming is allowed; otherwise why not and what to do."""
        live = self._live()
        if len(live) <= 1:
            return ''
        who = ', '.join(sorted(self._name(g) for g in live))
        return (
            f'refused to arm: {len(live)} publishers on the command topic ({who}); stop all but '
            'one controller (a killed one stays on the ROS graph for its DDS lease, about 20 s, '
            'unless its supervisor calls ~/hand_over)'
        )

    def reason(self) -> str:
        """The conflict in one line ('' if none)."""
        if not self.conflict:
            return ''
        others = ', '.join(self.others())
        if self.commander is not None:
            return (
                f'not obeyed: {others} publishing the command topic while {self.commander_name} '
                'commands the valves; stop the other publisher(s)'
            )
        who = ', '.join(sorted(self._name(g) for g in self._live()))
        return (
            f'{len(self._live())} publishers on the command topic ({who}): none is obeyed '
            'until only one is left; stop all but one controller'
        )
