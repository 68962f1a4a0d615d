"""ament_python package equimus_learning."""

from setuptools import setup

package_name = 'equimus_learning'

setup(
    name=package_name,
    version='0.2.0',
    packages=[package_name],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_learning']),
        ('share/equimus_learning', ['package.xml']),
    ],
    install_requires=['setuptools', 'gymnasium>=1.0'],
    # Reinforcement learning (`equimus train --algo ppo`); the base install and tests need none.
    # 'test' lists pytest so that `colcon test` runs pytest (without it: unittest, 0 tests).
    extras_require={
        'rl': ['stable-baselines3>=2.3', 'torch', 'tensorboard', 'tqdm', 'rich'],
        'test': ['pytest'],
    },
    zip_safe=True,
    maintainer='EquiMus HIL maintainers',
    maintainer_email='maintainers@equimus.dev',
    description='See package.xml.',
    license='MIT',
    entry_points={
        'console_scripts': [
            'learning = equimus_learning.cli:main',
        ],
    },
)
