"""ament_python package equimus_sim."""

from setuptools import setup

package_name = 'equimus_sim'

setup(
    name=package_name,
    version='0.2.0',
    packages=['equimus_sim'],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_sim']),
        ('share/equimus_sim', ['package.xml']),
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
            'sim_node = equimus_sim.entry:sim_node',
            'equivalence = equimus_sim.equivalence:main',
        ],
        'equimus.plant_models': ['mujoco = equimus_sim.leg_model:LegModel'],
    },
)
