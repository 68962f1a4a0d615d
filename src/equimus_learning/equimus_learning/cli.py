"""`equimus tune pid` and `equimus train` (also the package's `learning` executable).

equimus tune pid [--task triangle|steps|upright] [--out tuned_pid.yaml]
    tune the PID gains on the model; writes a parameter file for params_file:=
equimus train [--algo distil|ppo|dagger] [--steps N] [--out runs/policy]
    train a tracking policy; writes policy.npz for controller:=policy policy_file:=
equimus train --task kick [--reward shaped|authors] [--steps N] [--out runs/kick]
    train the ball kick (PPO); writes policy.zip and vecnormalize.pkl
equimus rollout --task kick|triangle|steps|random --policy FILE [--episodes N] [--video out.mp4]
    run a trained policy: success rate and ball speed (kick) or RMSE (tracking), and a video
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any


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

    from .train import DistilConfig, RLExtraMissing, distil_pid, train_ppo

    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    if ns.task == 'kick':
        from .train import KickTrainConfig, train_kick

        kcfg = KickTrainConfig(steps=ns.steps, seed=ns.seed, reward=ns.reward)
        _say(f'PPO on the kick task ({kcfg.reward} reward), {kcfg.steps} steps')
        try:
            zip_path = train_kick(str(out), kcfg, progress_bar=ns.progress)
        except RLExtraMissing as exc:
            print(f'equimus train: {exc}', file=sys.stderr)
            return 2
        _say(f'wrote {zip_path}')
        _say(f'evaluate it: equimus rollout --task kick --policy {zip_path}')
        return 0
    if ns.algo == 'ppo':
        try:
            cfg = ppo_config(ns)
        except (ValueError, OSError, KeyError) as exc:
            print(f'equimus train: {exc}', file=sys.stderr)
            return 2
        _say(
            f'PPO on {cfg.n_envs} batched environments ({cfg.reference} references'
            f'{", randomised legs" if "randomize" in cfg.env else ""}'
            f'{", residual on the PID of " + ns.residual if ns.residual else ""}), '
            f'{cfg.steps} steps{f", at most {cfg.minutes:g} min" if cfg.minutes else ""}'
        )
        try:
            zip_path, npz = train_ppo(str(out), cfg, progress_bar=ns.progress)
        except RLExtraMissing as exc:
            print(f'equimus train: {exc}', file=sys.stderr)
            return 2
        _say(f'wrote {zip_path} and {npz}; TensorBoard: tensorboard --logdir {out / "tb"}')
    elif ns.algo == 'dagger':
        return train_dagger(ns, out)
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


def train_dagger(ns: argparse.Namespace, out: Path) -> int:
    """`equimus train --algo dagger`: a previewing policy taught by the LTV MPC."""
    import json

    from equimus_control.policy import save_mlp

    from .imitate import ImitateConfig, imitate

    try:
        cfg = ImitateConfig(
            iterations=ns.iterations,
            episodes=ns.episodes,
            leg=ns.leg,
            randomize=ns.randomize,
            workers=ns.workers,
            minutes=ns.minutes,
            seed=ns.seed,
        )
        for option, path in (('--randomize', ns.randomize), ('--leg', ns.leg)):
            if path and not Path(path).is_file():
                raise ValueError(f'{option} {path}: no such file')
    except ValueError as exc:
        print(f'equimus train: {exc}', file=sys.stderr)
        return 2
    _say(
        f'DAgger from the LTV MPC: {cfg.iterations} iterations of {cfg.episodes} episodes '
        f'({cfg.episode_s:g} s'
        f'{", legs drawn from " + str(cfg.randomize) if cfg.randomize else ", nominal leg"}'
        f'{", the MPC planning on " + cfg.leg if cfg.leg else ""}) on '
        f'{cfg.workers} processes{f", at most {cfg.minutes:g} min" if cfg.minutes else ""}'
    )
    res = imitate(cfg, progress=_say)
    npz = out / 'policy.npz'
    save_mlp(npz, res.mlp, algo='dagger', expert='ltv_mpc', iteration=res.best_iteration)
    with open(out / 'dagger.json', 'w', encoding='utf-8') as f:
        json.dump({'best_iteration': res.best_iteration, 'iterations': res.history}, f, indent=1)
    _say(
        f'wrote {npz} (iteration {res.best_iteration + 1}, the best learner alone on the '
        f'nominal leg) and {out / "dagger.json"} in {res.seconds:.0f} s'
    )
    _say(f'run it: equimus launch sim controller:=policy policy_file:={npz}')
    return 0


def ppo_config(ns: argparse.Namespace) -> Any:
    """The `PPOConfig` of `equimus train --algo ppo`'s options (ValueError/OSError/KeyError:
    a bad option or file)."""
    from equimus_control.policy import RESIDUAL_LAYOUT, PolicyIO

    from .train import PPOConfig
    from .tune import read_gains

    env: dict[str, Any] = {}
    if ns.randomize:
        from .randomize import identified

        env['randomize'] = identified(ns.randomize)
    if ns.substeps:
        from equimus_control.step import PERIOD

        env['physics_dt'] = PERIOD / ns.substeps
    if ns.reference in ('mix', 'triangle', 'steps'):
        env['random_start'] = True
    if ns.rest_start:
        env['rest_start'] = ns.rest_start
    io = PolicyIO()
    if ns.residual:
        gains = read_gains(ns.residual)
        io = PolicyIO(RESIDUAL_LAYOUT, 'pid', gains, residual_kpa=ns.residual_kpa)
    return PPOConfig(
        steps=ns.steps,
        n_envs=ns.envs,
        seed=ns.seed,
        reference=ns.reference,
        env=env,
        io=io,
        minutes=ns.minutes,
        log_std_init=ns.log_std_init,
    )


def cmd_rollout(ns: argparse.Namespace) -> int:
    from equimus_control.policy import load_policy
    from equimus_description.config import ConfigError
    from equimus_sim.render import RenderError

    from .rollout import kick_policy, run
    from .train import RLExtraMissing, _import_sb3

    path = Path(ns.policy)
    if not path.is_file():
        print(f'equimus rollout: policy file {path} does not exist', file=sys.stderr)
        return 2
    try:
        policy: Any
        if ns.task == 'kick':
            if path.suffix != '.zip':
                raise ConfigError(f'{path}: the kick policy is the policy.zip of equimus train')
            _import_sb3()
            policy = kick_policy(path)
            env_kwargs: dict[str, Any] = {'reward': ns.reward}
        else:
            policy = load_policy(path)
            env_kwargs = {'io': policy.io}  # observe and act as it was trained
        res = run(
            ns.task, policy, ns.episodes, ns.seed, ns.video or None, ns.video_episodes, env_kwargs
        )
    except (ConfigError, RenderError, RLExtraMissing, ValueError) as exc:
        print(f'equimus rollout: {exc}', file=sys.stderr)
        return 2
    _say(f'{ns.task}: {res.episodes} episodes (seeds {ns.seed}..{ns.seed + res.episodes - 1})')
    for key, value in res.figures.items():
        _say(f'  {key:22s} {value:.4g}')
    if res.video:
        _say(f'video: {res.video}')
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The `equimus tune|train|rollout` argument parser."""
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
    p.add_argument(
        '--workers', type=int, default=1, help='processes for the closed-loop evaluations'
    )
    p.add_argument('--seed', type=int, default=0)
    p.set_defaults(func=cmd_tune)
    p = sub.add_parser('train', help='train a tracking policy for controller:=policy')
    p.add_argument(
        '--algo',
        default='ppo',
        choices=('ppo', 'distil', 'dagger'),
        help='ppo: stable-baselines3 (rl extra); distil: imitate the PID (NumPy, seconds); '
        'dagger: a previewing policy taught by the LTV MPC (NumPy, minutes)',
    )
    p.add_argument('--steps', type=int, default=2_000_000, help='ppo: environment steps')
    p.add_argument('--envs', type=int, default=128, help='ppo: batched environments')
    p.add_argument(
        '--episodes', type=int, default=12, help='distil: PID episodes; dagger: per iteration'
    )
    p.add_argument('--iterations', type=int, default=8, help='dagger: iterations')
    p.add_argument(
        '--leg',
        default='',
        metavar='PARAMS_YAML',
        help='dagger: the leg the MPC plans on and the nominal episodes run on (e.g. an '
        'identified params.yaml; default config/leg.yaml)',
    )
    p.add_argument('--workers', type=int, default=2, help='dagger: processes for the episodes')
    p.add_argument('--reference', default='random', choices=('random', 'triangle', 'steps', 'mix'))
    p.add_argument(
        '--residual',
        default='',
        metavar='PARAMS_YAML',
        help='ppo: act as a residual on the PID with these gains (e.g. config/tuned_pid.yaml)',
    )
    p.add_argument(
        '--residual-kpa', type=float, default=25.0, help="ppo: the residual's range, ±kPa"
    )
    p.add_argument(
        '--randomize',
        default='',
        metavar='FIT_YAML',
        help="ppo, dagger: draw each episode's leg between config/leg.yaml and this fit "
        '(e.g. config/leg_fit.yaml, ± 2 standard errors)',
    )
    p.add_argument(
        '--substeps',
        type=int,
        default=0,
        help="ppo: physics steps per 120 Hz period (0: the environments' 10; sim graph: 5)",
    )
    p.add_argument(
        '--rest-start',
        type=float,
        default=0.0,
        help='ppo: probability that a triangle/steps episode starts at rest at 0 kPa (as the '
        'sim graph does) instead of settled at a random waypoint',
    )
    p.add_argument(
        '--minutes', type=float, default=0.0, help='ppo, dagger: wall-clock budget (0: none)'
    )
    p.add_argument(
        '--log-std-init', type=float, default=0.0, help='ppo: initial log σ of the actions'
    )
    p.add_argument(
        '--task', default='track', choices=('track', 'kick'), help='kick: PPO on equimus/Kick-v0'
    )
    p.add_argument(
        '--reward', default='shaped', choices=('shaped', 'authors'), help='kick: reward terms'
    )
    p.add_argument('--no-progress', dest='progress', action='store_false', help='no progress bar')
    p.add_argument('--out', default='runs/policy', help='output folder')
    p.add_argument('--seed', type=int, default=0)
    p.set_defaults(func=cmd_train)
    p = sub.add_parser('rollout', help='run a trained policy: figures and a video')
    p.add_argument('--task', required=True, choices=('kick', 'triangle', 'steps', 'random'))
    p.add_argument('--policy', required=True, help='policy.zip (kick) or policy.npz / .zip')
    p.add_argument('--episodes', type=int, default=10)
    p.add_argument('--seed', type=int, default=1000, help='first episode seed (unseen in training)')
    p.add_argument('--video', default='', help='mp4 to write (the first --video-episodes)')
    p.add_argument('--video-episodes', type=int, default=2)
    p.add_argument(
        '--reward', default='shaped', choices=('shaped', 'authors'), help='kick: reward reported'
    )
    p.set_defaults(func=cmd_rollout)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns))


if __name__ == '__main__':
    sys.exit(main())
