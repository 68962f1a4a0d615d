"""`equimus tune pid` and `equimus train` (also the package's `learning` executable).

equimus tune pid [--task triangle|steps|upright] [--out tuned_pid.yaml]
    tune the PID gains on the model; writes a parameter file for params_file:=
equimus train [--algo distil|ppo] [--steps N] [--out runs/policy]
    train a tracking policy; writes policy.npz for controller:=policy policy_file:=
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def _say(text: str) -> None:
    print(text, flush=True)


def cmd_tune(ns: argparse.Namespace) -> int:
    from equimus_control.pid import PIDGains

    from .tune import TuneConfig, read_gains, tune_pid, write_params

    try:
        cfg = TuneConfig(
            task=ns.task,
            duration=ns.duration,
            local_evals=ns.local_evals,
            global_generations=ns.generations,
            population=ns.population,
            seed=ns.seed,
            workers=ns.workers,
        )
        start = read_gains(ns.start) if ns.start else PIDGains()
    except (ValueError, OSError, KeyError) as exc:
        print(f'equimus tune pid: {exc}', file=sys.stderr)
        return 2
    _say(f'tuning PID on the {cfg.task} task ({cfg.duration:g} s closed loop per evaluation)')
    result = tune_pid(cfg, start, progress=_say)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_params(out, result, cfg)
    _say(
        f'RMSE {math.sqrt(result.start_cost):.4f} -> {math.sqrt(result.cost):.4f} rad in '
        f'{result.evaluations} evaluations ({result.seconds:.0f} s)\n'
        f'kp {list(result.gains.kp)}, ki {list(result.gains.ki)}, kd {list(result.gains.kd)}\n'
        f'wrote {out}: equimus launch sim params_file:={out}'
    )
    return 0


def cmd_train(ns: argparse.Namespace) -> int:
    from equimus_control.policy import save_mlp

    from .train import DistilConfig, PPOConfig, RLExtraMissing, distil_pid, train_ppo

    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    if ns.algo == 'ppo':
        cfg = PPOConfig(steps=ns.steps, n_envs=ns.envs, seed=ns.seed, reference=ns.reference)
        _say(
            f'PPO on {cfg.n_envs} batched environments ({cfg.reference} references), '
            f'{cfg.steps} steps'
        )
        try:
            zip_path, npz = train_ppo(str(out), cfg)
        except RLExtraMissing as exc:
            print(f'equimus train: {exc}', file=sys.stderr)
            return 2
        _say(f'wrote {zip_path} and {npz}; TensorBoard: tensorboard --logdir {out / "tb"}')
    else:
        mlp = distil_pid(
            DistilConfig(episodes=ns.episodes, reference=ns.reference, seed=ns.seed),
            progress=_say,
        )
        npz = str(out / 'policy.npz')
        save_mlp(npz, mlp, algo='distil')
        _say(f'wrote {npz}')
    _say(f'run it: equimus launch sim controller:=policy policy_file:={npz}')
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog='equimus', description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest='command', required=True)
    tune = sub.add_parser('tune', help='tune a controller on the model')
    tsub = tune.add_subparsers(dest='what', required=True)
    p = tsub.add_parser('pid', help='PID gains: L-BFGS-B, then differential evolution')
    p.add_argument('--task', default='triangle', choices=('triangle', 'steps', 'upright'))
    p.add_argument('--out', default='tuned_pid.yaml', help='parameter file to write')
    p.add_argument('--start', default='', help='parameter file with the start gains')
    p.add_argument('--duration', type=float, default=8.0, help='s of closed loop per evaluation')
    p.add_argument('--local-evals', type=int, default=40, help='L-BFGS-B evaluations (0: skip)')
    p.add_argument('--generations', type=int, default=4, help='differential evolution (0: skip)')
    p.add_argument('--population', type=int, default=3, help='per gain and generation')
    p.add_argument('--workers', type=int, default=1, help='processes for the global search')
    p.add_argument('--seed', type=int, default=0)
    p.set_defaults(func=cmd_tune)
    p = sub.add_parser('train', help='train a tracking policy for controller:=policy')
    p.add_argument(
        '--algo',
        default='ppo',
        choices=('ppo', 'distil'),
        help='ppo: stable-baselines3 (rl extra); distil: imitate the PID (NumPy, seconds)',
    )
    p.add_argument('--steps', type=int, default=2_000_000, help='ppo: environment steps')
    p.add_argument('--envs', type=int, default=128, help='ppo: batched environments')
    p.add_argument('--episodes', type=int, default=12, help='distil: PID episodes')
    p.add_argument('--reference', default='random', choices=('random', 'triangle', 'steps'))
    p.add_argument('--out', default='runs/policy', help='output folder')
    p.add_argument('--seed', type=int, default=0)
    p.set_defaults(func=cmd_train)
    ns = parser.parse_args(argv)
    return int(ns.func(ns))


if __name__ == '__main__':
    sys.exit(main())
