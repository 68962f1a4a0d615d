"""ament_python package equimus_bringup."""

from glob import glob

from setuptools import setup

package_name = 'equimus_bringup'

setup(
    name=package_name,
    version='0.2.0',
    packages=['equimus_bringup'],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_bringup']),
        ('share/equimus_bringup', ['package.xml']),
        ('share/equimus_bringup/launch', sorted(glob('launch/*.py'))),
        ('share/equimus_bringup/config', sorted(glob('config/*.yaml'))),
        ('share/equimus_bringup/dds', sorted(glob('dds/*.xml'))),
        ('share/equimus_bringup/dds/fastdds2', sorted(glob('dds/fastdds2/*.xml'))),
        ('share/equimus_bringup/viewers', sorted(glob('viewers/*'))),
    ],
    install_requires=['setuptools'],
    extras_require={'test': ['pytest']},
    zip_safe=True,
    maintainer='EquiMus HIL maintainers',
    maintainer_email='maintainers@equimus.dev',
    description='See package.xml.',
    license='MIT',
    entry_points={
        'console_scripts': [
            'equimus = equimus_bringup.cli:entry',
            'rig_emulator = equimus_bringup.entry:rig_emulator',
            'control_loop = equimus_bringup.entry:control_loop',
            'sim_graph = equimus_bringup.entry:sim_graph',
            'pressure_player = equimus_bringup.entry:pressure_player',
        ],
    },
)
