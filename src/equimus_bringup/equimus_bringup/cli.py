"""`equimus`: the project's command line.

equimus launch sim [name:=value ...]       run the simulated-leg graph (same graph as sim.launch.py)
equimus launch hardware [name:=value ...]  run the real-leg graph (same as hardware.launch.py)
equimus check rig [name:=value ...]         Motive, board, valves, pose; writes the calibration
equimus valve arm|disarm|estop              arm, disarm or emergency-stop the running valve driver
equimus args                                list the launch arguments
equimus bag repair <bag>                    close a dead recorder's bag, drop bad chunks
equimus bag info <bag>                      topics, counts and rates of a bag (read-only)
equimus identify <bags or CSVs> --out fit/  fit the model to recordings (see --help)
equimus natnet list|record|replay           Motive's rigid bodies; capture and replay a session
equimus evaluate <params> <bags or CSVs>    score a parameter set by open-loop replay (--help)
equimus excite --out excite/                design an identifying pressure trajectory (--help)
equimus adapt --truth random --seed 1    excite, identify, retune and deploy on the (emulated) rig
equimus tune pid [--task triangle]         tune the PID gains on the model -> params_file YAML
equimus train [--algo ppo|distil]           train a tracking policy -> controller:=policy
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import sys

from equimus_bringup import prestart
from equimus_bringup.graph import ARGUMENTS, MODES
from equimus_bringup.prestart import StartError


def parse_assignments(items: list[str]) -> dict[str, str]:
    """`name:=value` pairs as `ros2 launch` takes them."""
    out = {}
    for item in items:
        if ':=' not in item:
            raise StartError(f'expected name:=value, got {item!r} (see `equimus args`)')
        key, value = item.split(':=', 1)
        out[key.strip()] = value
    return out


def cmd_launch(ns: argparse.Namespace) -> int:
    from equimus_bringup.supervisor import GraphError, Supervisor

    if ns.duration is not None and not ns.duration > 0:
        print(
            f'equimus: --duration {ns.duration:g} must be > 0 s (leave it out to run until Ctrl-C)',
            file=sys.stderr,
        )
        return 2
    try:
        start = prestart.check(ns.mode, parse_assignments(ns.assignments))
    except StartError as exc:
        print(f'equimus: {exc}', file=sys.stderr)
        return 2
    print(
        f'[equimus] {ns.mode} graph: {", ".join(s.name for s in start.specs)}'
        + (f'; recording to {start.args["bag"]}' if start.args['record'] == 'true' else '')
    )
    sup = Supervisor(
        start.specs, log_level=start.args['log_level'], drivers_listed=start.drivers_listed
    )
    try:
        sup.start()
    except GraphError as exc:
        sup.stop()
        print(f'equimus: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C while the graph starts (the rig check runs ~20 s)
        sup.stop()
        return 130
    return sup.run_until(timeout=ns.duration)


def command_environment(mode: str) -> dict[str, str]:
    """Give this command's own process the DDS environment of a `mode` graph started from the
    same shell, before its first participant reads the profile: it then talks to the graph over
    UDP only, as the graph's processes do, and maps no shared memory that another process's
    kill could leave broken (docs/reliability.md). Returns the environment."""
    import os

    from equimus_bringup.graph import graph_environment

    os.environ.update(graph_environment(mode))
    return dict(os.environ)


#: `equimus valve <action>`: the valve driver's std_srvs/Trigger services.
VALVE_ACTIONS = ('arm', 'disarm', 'estop')
VALVE_RETRY_S = 1.0  # s without an answer before disarm or estop is sent again


def cmd_valve(ns: argparse.Namespace) -> int:
    """Call /valve_driver/<action> of the graph on this ROS_DOMAIN_ID; its answer is the line."""
    from equimus_bringup.supervisor import LifecycleClient

    if not ns.timeout > 0:
        print(f'equimus: --timeout {ns.timeout:g} must be > 0 s', file=sys.stderr)
        return 2
    client = LifecycleClient(command_environment('hardware'), profile_loaded=True)
    try:
        # disarm and estop may reach the driver twice (both end vented); arm may not (a second
        # arm restarts the output's slew from 0 kPa)
        again = VALVE_RETRY_S if ns.action in ('disarm', 'estop') else None
        ok, message = client.trigger(f'/valve_driver/{ns.action}', ns.timeout, again)
        # The answer before the middleware's teardown, which has crashed once (docs/
        # reliability.md): whoever stopped the valves learns that they did.
        if not ok and message.endswith('is not offered'):
            message += ' (no valve driver runs on this ROS_DOMAIN_ID: start the graph first)'
        if ok:
            print(f'valve_driver: {message}', flush=True)
        else:
            print(f'equimus: {message}', file=sys.stderr, flush=True)
    finally:
        client.close()
    return 0 if ok else 2


def cmd_args(ns: argparse.Namespace) -> int:
    for name, (default, text) in ARGUMENTS.items():
        print(f'{name:22s} {text} [default: {default or "(per mode)"}]')
    return 0


def cmd_bag(ns: argparse.Namespace) -> int:
    from equimus_record import bag

    try:
        if ns.action == 'repair':
            report = bag.repair(ns.path)
            print(report)
        else:
            print(bag.describe(ns.path))
    except bag.BagError as exc:
        print(f'equimus: {exc}', file=sys.stderr)
        return 2
    return 0


#: Subcommands that own their argument parsing: name -> (module, function, help, gets its name).
#: Imported only when called, so `equimus launch` never loads the fitting or learning stacks.
DELEGATED: dict[str, tuple[str, str, str, bool]] = {
    'identify': (
        'equimus_identification.cli',
        'main',
        'system identification from bags or CSVs (equimus identify --help)',
        False,
    ),
    'evaluate': (
        'equimus_identification.evaluate',
        'main',
        'score a parameter set on recordings (equimus evaluate --help)',
        False,
    ),
    'excite': (
        'equimus_identification.excite',
        'main',
        'design an excitation trajectory (equimus excite --help)',
        False,
    ),
    'check': (
        'equimus_bringup.rig_check',
        'main',
        'commissioning check of the real rig, before every session (equimus check rig --help)',
        False,
    ),
    'adapt': (
        'equimus_bringup.adapt',
        'main',
        'identify, retune and deploy on the running rig (equimus adapt --help)',
        False,
    ),
    'natnet': (
        'equimus_hw.natnet.cli',
        'main',
        'list Motive bodies, record/replay NatNet (equimus natnet -h)',
        False,
    ),
    'tune': (
        'equimus_learning.cli',
        'main',
        'tune the PID gains on the model (equimus tune pid --help)',
        True,
    ),
    'train': (
        'equimus_learning.cli',
        'main',
        'train a tracking or kicking policy (equimus train --help)',
        True,
    ),
    'rollout': (
        'equimus_learning.cli',
        'main',
        'run a trained policy: figures and a video (equimus rollout --help)',
        True,
    ),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in DELEGATED:
        module, function, _, gets_name = DELEGATED[argv[0]]
        entry = getattr(importlib.import_module(module), function)
        try:
            return int(entry(argv if gets_name else argv[1:]))
        except BrokenPipeError:
            return _output_closed()
    parser = argparse.ArgumentParser(
        prog='equimus', description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest='command', required=True)
    p = sub.add_parser('launch', help='run a graph (sim or hardware) without ros2 launch')
    p.add_argument('mode', choices=MODES)
    p.add_argument('assignments', nargs='*', help='launch arguments as name:=value')
    p.add_argument('--duration', type=float, default=None, help='stop after this many wall seconds')
    p.set_defaults(func=cmd_launch)
    p = sub.add_parser('args', help='list launch arguments')
    p.set_defaults(func=cmd_args)
    p = sub.add_parser('valve', help='arm, disarm or emergency-stop the running valve driver')
    p.add_argument('action', choices=VALVE_ACTIONS)
    p.add_argument('--timeout', type=float, default=10.0, help='s to wait for the driver')
    p.set_defaults(func=cmd_valve)
    for name, (_, _, text, _) in DELEGATED.items():
        sub.add_parser(name, help=text)
    p = sub.add_parser('bag', help='inspect or repair a recorded bag')
    p.add_argument('action', choices=('info', 'repair'))
    p.add_argument('path')
    p.set_defaults(func=cmd_bag)
    ns = parser.parse_args(argv)
    try:
        return int(ns.func(ns))
    except BrokenPipeError:
        return _output_closed()


#: Exit status of a command whose output pipe closed early (`equimus bag info | head`): what a
#: shell reports for a process ended by SIGPIPE (128 + 13), as `cat` or `git log` end there.
EXIT_PIPE_CLOSED = 141


def _output_closed() -> int:
    """The reader of stdout went away: stop quietly (no traceback, no line: not an error)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
    os.close(devnull)
    return EXIT_PIPE_CLOSED


def entry() -> int:
    """The command's process: a crash inside the DDS libraries prints the Python stack that led
    there, not only a bare "Segmentation fault" (attach it to a bug report)."""
    faulthandler.enable(all_threads=True)
    return main()


if __name__ == '__main__':
    sys.exit(entry())
