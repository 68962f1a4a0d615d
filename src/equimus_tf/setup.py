"""ament_python package equimus_tf."""

from setuptools import setup

package_name = 'equimus_tf'

setup(
    name=package_name,
    version='0.2.0',
    packages=[package_name],
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_tf']),
        ('share/equimus_tf', ['package.xml']),
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
            'state_publisher = equimus_tf.entry:state_publisher',
        ],
    },
)
