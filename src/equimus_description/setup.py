"""ament_python package equimus_description."""

from setuptools import setup

package_name = 'equimus_description'

setup(
    name=package_name,
    version='0.2.0',
    packages=[package_name],
    package_data={package_name: ['data/*.yaml']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_description']),
        ('share/equimus_description', ['package.xml']),
    ],
    install_requires=['setuptools'],
    extras_require={'test': ['pytest']},
    zip_safe=True,
    maintainer='EquiMus HIL maintainers',
    maintainer_email='maintainers@equimus.dev',
    description='See package.xml.',
    license='MIT',
)
