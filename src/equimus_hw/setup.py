"""ament_python package equimus_hw."""

from setuptools import Extension, setup

package_name = 'equimus_hw'

# The valve board's SET frame in one compiled call (equimus_hw/valve/_wire.c); it gives the bytes
# of protocol.encode_set, the interpreted form. Optional: without a C compiler the package builds
# and runs that form.
wire = Extension(
    'equimus_hw.valve._wire',
    sources=['equimus_hw/valve/_wire.c'],
    extra_compile_args=['-O2'],
    optional=True,
)

setup(
    name=package_name,
    version='0.2.0',
    packages=['equimus_hw', 'equimus_hw.natnet', 'equimus_hw.valve'],
    ext_modules=[wire],
    package_data={'equimus_hw.valve': ['_wire.pyi']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_hw']),
        ('share/equimus_hw', ['package.xml']),
    ],
    install_requires=['setuptools'],
    extras_require={'test': ['pytest']},
    zip_safe=False,  # a C extension
    maintainer='EquiMus HIL maintainers',
    maintainer_email='maintainers@equimus.dev',
    description='See package.xml.',
    license='MIT',
    entry_points={
        'console_scripts': [
            'natnet_bridge = equimus_hw.entry:natnet_bridge',
            'natnet_emulator = equimus_hw.entry:natnet_emulator',
            'valve_driver = equimus_hw.entry:valve_driver',
            'dac_board_emulator = equimus_hw.entry:dac_board_emulator',
        ],
    },
)
