"""ament_python package equimus_identification."""

from setuptools import setup

package_name = 'equimus_identification'

setup(
    name=package_name,
    version='0.2.0',
    packages=[package_name],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_identification']),
        ('share/equimus_identification', ['package.xml']),
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
            'identify = equimus_identification.cli:main',
        ],
    },
)
