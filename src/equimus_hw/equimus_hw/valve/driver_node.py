"""valve_driver: pressure commands (kPa) -> safety filter -> DAC codes -> serial DAC board.

Thin rclpy wrapper around safety.SafetyFilter, calibration.ValveCalibration and link.BoardLink.
It starts DISARMED: the output is 0 kPa until `/valve_driver/arm` is called (or the parameter
auto_arm is true) AND a fresh command arrives. Timers and the watchdog run on the steady clock,
never on sim time: a paused /clock must not stop the keep-alive or the watchdog.
On shutdown (Ctrl-C, SIGTERM, or a normal exit) it writes SET all-zero and waits briefly for the
ACK before the port closes.
"""
from __future__ import annotations

import functools
import math
import sys
import threading
import time
from typing import List, Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from std_srvs.srv import Trigger

from equimus_ros.main import run_node
from equimus_ros.qos import COMMAND_QOS, DIAG_QOS

from .calibration import HARD_MAX_KPA, ValveCalibration
from .link import BoardLink
from .safety import SafetyFilter

ACTUATORS = ('maa', 'baa')


def _serialised(method):
    """Hold the driver's lock: its safety filter and link are driven from the executor (timers,
    services) and, in the fused control loop, from the NatNet receive thread (on_command)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return call


def _float_range(lo: float, hi: float) -> List[FloatingPointRange]:
    return [FloatingPointRange(from_value=lo, to_value=hi, step=0.0)]


class ValveDriver(Node):
    """`subscribe=False` is for the fused control loop: commands come by call (`on_command`)
    from the controller in the same process; /valve/command is then published, not read."""

    def __init__(self, subscribe: bool = True, **kwargs):
        super().__init__('valve_driver', **kwargs)
        self._lock = threading.RLock()
        p = self._declare_parameters()
        self.cal = ValveCalibration(
            kpa_per_volt=p['kpa_per_volt'], zero_offset_v=p['zero_offset_v'],
            dac_bits=p['dac_bits'], dac_vref=p['dac_vref'], output_gain=p['output_gain'],
            max_kpa=p['max_kpa'], low_band_policy=p['low_band_policy'],
            min_regulated_kpa=p['min_regulated_kpa'], hold_threshold_kpa=p['hold_threshold_kpa'],
            adc_bits=p['adc_bits'], adc_vref=p['adc_vref'], adc_input_gain=p['adc_input_gain'])
        self.safety = SafetyFilter(len(ACTUATORS), p['max_kpa'], p['slew_rate_kpa_s'],
                                   p['command_timeout_s'])
        self.keepalive_s = p['keepalive_period_s']
        self.shutdown_ack_timeout_s = p['shutdown_ack_timeout_s']
        self.link = BoardLink(p['port'], len(ACTUATORS), self.cal, baud=p['baud'],
                              ack_timeout_s=p['ack_timeout_s'],
                              link_timeout_s=p['link_timeout_s'],
                              backoff_min_s=p['reconnect_backoff_min_s'],
                              backoff_max_s=p['reconnect_backoff_max_s'], log=self._link_log)
        self._closing = False
        self.last_write_ns = 0
        self._last_sent: Optional[List[int]] = None
        self._last_send_t = 0.0
        self._generation = 0
        self._measured_count = 0
        self._last_commanded = [math.nan] * len(ACTUATORS)
        self._diag_key = None
        self._last_warn_t = -math.inf

        self.pub_applied = self.create_publisher(Float64MultiArray, '/valve/applied',
                                                 qos_profile_sensor_data)
        self.pub_pressure = self.create_publisher(Float64MultiArray, '/valve/pressure',
                                                  qos_profile_sensor_data)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', DIAG_QOS)
        if subscribe:
            self.create_subscription(Float64MultiArray, '/valve/command', self.on_command,
                                     COMMAND_QOS)
        self.create_service(Trigger, '~/arm', self._srv_arm)
        self.create_service(Trigger, '~/disarm', self._srv_disarm)
        self.create_service(Trigger, '~/estop', self._srv_estop)
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(1.0 / p['rate_hz'], self._tick, clock=steady)
        self.create_timer(1.0, self._publish_diagnostics, clock=steady)

        self.link.start()
        if p['auto_arm']:
            self.safety.arm(time.monotonic())
            self.get_logger().warning('auto_arm=true: ARMED at start-up; valves follow '
                                      '/valve/command as soon as a command arrives')
        else:
            self.get_logger().info('started DISARMED (0 kPa); call /valve_driver/arm to enable')
        self.get_logger().info(
            f'port {p["port"]}, max {self.cal.max_kpa:g} kPa = DAC code {self.cal.max_code}, '
            f'watchdog {p["command_timeout_s"]:g} s, slew {p["slew_rate_kpa_s"]:g} kPa/s')

    def _declare_parameters(self) -> dict:
        d = ValveCalibration()
        specs = [
            ('port', '/dev/ttyACM0', 'serial device of the DAC board (or the emulator link)', None),
            ('baud', 115200, 'serial baud rate (ignored by USB CDC boards)', None),
            ('auto_arm', False, 'arm at start-up; default false = start disarmed, use ~/arm', None),
            ('command_timeout_s', 0.25, 's without a valid command before every channel vents',
             _float_range(0.01, 10.0)),
            ('slew_rate_kpa_s', 1000.0, 'kPa/s max rate of change of the output',
             _float_range(1.0, 1e9)),
            ('max_kpa', HARD_MAX_KPA, f'kPa output ceiling, at most {HARD_MAX_KPA:g}',
             _float_range(0.0, HARD_MAX_KPA)),
            ('rate_hz', 120.0, 'Hz of the internal tick (slew steps, watchdog, publishing)',
             _float_range(1.0, 1000.0)),
            ('keepalive_period_s', 0.05, 's: a SET is re-sent at least this often',
             _float_range(0.001, 1.0)),
            ('ack_timeout_s', 0.05, 's before an unanswered SET counts as a timeout',
             _float_range(0.001, 1.0)),
            ('link_timeout_s', 0.5, 's without any reply before the link is declared lost',
             _float_range(0.01, 10.0)),
            ('reconnect_backoff_min_s', 0.1, 's first reconnect delay', _float_range(0.01, 10.0)),
            ('reconnect_backoff_max_s', 2.0, 's longest reconnect delay', _float_range(0.01, 60.0)),
            ('shutdown_ack_timeout_s', 0.2, 's to wait for the vent ACK on shutdown',
             _float_range(0.0, 5.0)),
            ('kpa_per_volt', d.kpa_per_volt, 'kPa per setpoint volt (VPPE 6 bar: 60)', None),
            ('zero_offset_v', d.zero_offset_v, 'V setpoint offset of the valve regression', None),
            ('dac_bits', d.dac_bits, 'DAC resolution in bits', [IntegerRange(from_value=1,
                                                                             to_value=16, step=1)]),
            ('dac_vref', d.dac_vref, 'V DAC full scale before the op-amp stage', None),
            ('output_gain', d.output_gain, 'op-amp gain DAC output -> valve setpoint', None),
            ('low_band_policy', d.low_band_policy, "'vent' or 'hold_min' for 0 < p < "
             'min_regulated_kpa', None),
            ('min_regulated_kpa', d.min_regulated_kpa, 'kPa lowest regulated pressure (0.1 V)',
             None),
            ('hold_threshold_kpa', d.hold_threshold_kpa, "kPa: with 'hold_min', commands below "
             'this vent', None),
            ('adc_bits', d.adc_bits, 'read-back ADC bits (the board reports its own)', None),
            ('adc_vref', d.adc_vref, 'V read-back ADC reference', None),
            ('adc_input_gain', d.adc_input_gain, 'valve output volts per ADC input volt', None),
        ]
        values = {}
        for name, default, text, rng in specs:
            desc = ParameterDescriptor(description=text, read_only=True)
            if rng and isinstance(rng[0], FloatingPointRange):
                desc.floating_point_range = rng
            elif rng:
                desc.integer_range = rng
            values[name] = self.declare_parameter(name, default, desc).value
        return values

    # ----------------------------------------------------------------- commands and output
    @_serialised
    def on_command(self, msg: Float64MultiArray) -> None:
        now = time.monotonic()
        self._check_reconnect(now)
        self._last_commanded = list(msg.data)
        res = self.safety.command(msg.data, now)
        if res.warnings and now - self._last_warn_t > 1.0:
            self._last_warn_t = now
            self.get_logger().warning('; '.join(res.warnings))
        self._send(self.safety.step(now), now)

    def _check_reconnect(self, now: float) -> None:
        """After every (re)connect, vent until a command newer than the connect arrives."""
        if self.link.generation != self._generation:
            self._generation = self.link.generation
            if self._generation > 1:
                self.get_logger().warning('DAC board reconnected: venting until a fresh '
                                          'command arrives')
            self.safety.require_fresh_command(now)
            self._last_sent = None

    @_serialised
    def _tick(self) -> None:
        now = time.monotonic()
        self._check_reconnect(now)
        out = self.safety.step(now)
        codes = self.cal.codes(out)
        if codes != self._last_sent or now - self._last_send_t >= self.keepalive_s:
            self._send(out, now)
        if not self.context.ok():
            return
        if self.link.measured_count != self._measured_count and self.link.measured_kpa:
            self._measured_count = self.link.measured_count
            self.pub_pressure.publish(self._array(self.link.measured_kpa))
        key = (self.link.state, self.safety.armed, self.safety.estopped,
               self.safety.watchdog_active)
        if key != self._diag_key:
            self._publish_diagnostics()

    def _send(self, out_kpa: List[float], now: float) -> None:
        codes = [0] * len(ACTUATORS) if self._closing else self.cal.codes(out_kpa)
        seq = self.link.send_codes(codes)
        if seq is not None:                            # written: the fused loop's latency ends here
            self.last_write_ns = time.perf_counter_ns()
        self._last_sent = codes
        self._last_send_t = now
        applied = [self.cal.code_to_kpa(c) for c in codes] if seq is not None \
            else [0.0] * len(ACTUATORS)
        if self.context.ok():  # a signal may have shut ROS down already; the serial side still runs
            self.pub_applied.publish(self._array(applied))

    @staticmethod
    def _array(values: List[float]) -> Float64MultiArray:
        msg = Float64MultiArray()
        msg.layout.dim = [MultiArrayDimension(label='maa,baa', size=len(values), stride=1)]
        msg.data = [float(v) for v in values]
        return msg

    # ----------------------------------------------------------------- services
    @_serialised
    def _srv_arm(self, request, response):
        now = time.monotonic()
        self.safety.arm(now)
        self._send(self.safety.step(now), now)
        link = 'board connected' if self.link.connected else \
            f'WARNING: board not connected ({self.link.last_error or self.link.state})'
        response.success = True
        response.message = f'armed; output stays 0 kPa until the next command ({link})'
        self.get_logger().info(response.message)
        self._publish_diagnostics()
        return response

    @_serialised
    def _srv_disarm(self, request, response):
        now = time.monotonic()
        self.safety.disarm()
        self._send(self.safety.step(now), now)
        response.success = True
        response.message = 'disarmed: all channels vented to 0 kPa'
        self.get_logger().info(response.message)
        self._publish_diagnostics()
        return response

    @_serialised
    def _srv_estop(self, request, response):
        now = time.monotonic()
        self.safety.estop()
        self._send(self.safety.step(now), now)
        response.success = True
        response.message = ('EMERGENCY STOP latched: all channels vented to 0 kPa; call '
                            '/valve_driver/arm to re-arm')
        self.get_logger().error(response.message)
        self._publish_diagnostics()
        return response

    # ----------------------------------------------------------------- diagnostics
    def _link_log(self, level: str, text: str) -> None:
        # rclpy requires one severity per call site, hence one call per level.
        if level == 'error':
            self.get_logger().error(text)
        elif level == 'warn':
            self.get_logger().warning(text)
        else:
            self.get_logger().info(text)

    def _publish_diagnostics(self) -> None:
        s, lk, st = self.safety, self.link, self.link.stats
        self._diag_key = (lk.state, s.armed, s.estopped, s.watchdog_active)
        if s.estopped:
            level, message = DiagnosticStatus.ERROR, 'EMERGENCY STOP latched (vented)'
        elif lk.state != 'connected':
            level, message = DiagnosticStatus.ERROR, f'DAC board {lk.state}: {lk.last_error}'
        elif not s.armed:
            level, message = DiagnosticStatus.OK, 'disarmed (vented); call /valve_driver/arm'
        elif s.watchdog_active:
            level, message = DiagnosticStatus.WARN, 'command watchdog tripped: vented'
        else:
            level, message = DiagnosticStatus.OK, 'armed'
        lat = lk.latency_percentiles_ms()
        info = lk.info
        values = {
            'link': lk.state,
            'port': lk.port,
            'last_error': lk.last_error,
            'firmware': '.'.join(map(str, info.firmware)) if info else '',
            'board_watchdog_ms': str(info.watchdog_ms) if info else '',
            'armed': str(s.armed).lower(),
            'estopped': str(s.estopped).lower(),
            'watchdog_active': str(s.watchdog_active).lower(),
            'watchdog_trips': str(s.watchdog_trips),
            'board_watchdog_vents': str(st.board_watchdog_vents),
            'board_bad_frame_vents': str(st.board_bad_frame_vents),
            'frames_sent': str(st.frames_sent),
            'acks': str(st.acks),
            'naks': str(sum(st.naks.values())),
            'nak_reasons': ','.join(f'{k}={v}' for k, v in sorted(st.naks.items())),
            'ack_timeouts': str(st.ack_timeouts),
            'rx_rejected': str(st.rx_rejected),
            'ack_latency_p50_ms': f'{lat["p50"]:.3f}' if lat else '',
            'ack_latency_max_ms': f'{lat["max"]:.3f}' if lat else '',
            'reconnects': str(st.reconnects),
            'connect_failures': str(st.connect_failures),
            'saturations': str(s.saturation_count),
            'nonfinite_commands': str(s.nonfinite_count),
            'rejected_commands': str(s.rejected_count),
            'commanded_kpa': ','.join(f'{v:.3f}' for v in self._last_commanded),
            'output_kpa': ','.join(f'{v:.3f}' for v in s.output),
            'board_codes': ','.join(map(str, lk.board_codes or [])),
            'measured_kpa': ','.join(f'{v:.3f}' for v in (lk.measured_kpa or [])),
        }
        status = DiagnosticStatus(level=level, name='valve_driver: DAC board', message=message,
                                  hardware_id=lk.port,
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        arr = DiagnosticArray(status=[status])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(arr)

    # ----------------------------------------------------------------- shutdown
    def vent_and_close(self) -> bool:
        """Vent every channel and close the port; safe to call more than once."""
        self._closing = True
        self.safety.disarm()
        acked = self.link.vent_and_close(self.shutdown_ack_timeout_s)
        return acked


def vent_on_exit(node: 'ValveDriver') -> None:
    acked = node.vent_and_close()
    print('valve_driver: vented on shutdown ('
          + ('acknowledged' if acked else 'NOT acknowledged: board unreachable, its watchdog vents')
          + ')', flush=True)


def main(args=None) -> int:
    return run_node(ValveDriver, args, close=vent_on_exit,
                    config_hint='Fix config/valve.yaml or the --ros-args overrides.')

if __name__ == '__main__':
    sys.exit(main())
