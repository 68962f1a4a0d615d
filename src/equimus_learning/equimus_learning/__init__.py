"""equimus_learning: Gymnasium environments of the leg, PID auto-tuning, policy training.

Importing the package registers the environments with Gymnasium:
`gymnasium.make('equimus/Track-v0')` (random references), `'equimus/TrackTriangle-v0'`,
`'equimus/TrackSteps-v0'` and `'equimus/Kick-v0'` (ball kicking). The tracking ids also make
the batched vector environment: `gymnasium.make_vec(id, num_envs=N,
vectorization_mode='vector_entry_point')`.
"""

from __future__ import annotations

ENV_IDS = (
    'equimus/Track-v0',
    'equimus/TrackTriangle-v0',
    'equimus/TrackSteps-v0',
    'equimus/Kick-v0',
)


def register_envs() -> None:
    """Register the environments (idempotent), each with its episode length as TimeLimit."""
    import gymnasium as gym

    from .env import TrackConfig, episode_steps
    from .kick import KickConfig

    refs = {'equimus/Track-v0': 'random', 'equimus/TrackTriangle-v0': 'triangle'}
    refs['equimus/TrackSteps-v0'] = 'steps'
    for env_id, reference in refs.items():
        if env_id not in gym.registry:
            gym.register(
                env_id,
                entry_point='equimus_learning.env:TrackEnv',
                vector_entry_point='equimus_learning.vector:VectorTrackEnv',
                kwargs={'reference': reference},
                max_episode_steps=episode_steps(TrackConfig().episode_s),
                disable_env_checker=True,
            )
    if 'equimus/Kick-v0' not in gym.registry:
        gym.register(
            'equimus/Kick-v0',
            entry_point='equimus_learning.kick:KickEnv',
            max_episode_steps=episode_steps(KickConfig().episode_s),
            disable_env_checker=True,
        )


register_envs()
