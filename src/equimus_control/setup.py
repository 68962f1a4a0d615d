"""ament_python package equimus_control."""

from setuptools import setup

package_name = 'equimus_control'

setup(
    name=package_name,
    version='0.2.0',
    packages=['equimus_control'],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_control']),
        ('share/equimus_control', ['package.xml']),
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
            'estimator = equimus_control.entry:estimator',
            'controller = equimus_control.entry:controller',
            'reference = equimus_control.entry:reference',
        ],
    },
)
