"""ament_python package equimus_ros."""

from setuptools import setup

package_name = 'equimus_ros'

setup(
    name=package_name,
    version='0.2.0',
    packages=['equimus_ros'],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_ros']),
        ('share/equimus_ros', ['package.xml']),
    ],
    install_requires=['setuptools'],
    extras_require={'test': ['pytest']},
    zip_safe=True,
    maintainer='EquiMus HIL maintainers',
    maintainer_email='maintainers@equimus.dev',
    description='See package.xml.',
    license='MIT',
)
