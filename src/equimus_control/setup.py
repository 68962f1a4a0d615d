"""ament_python package equimus_control."""

from setuptools import Extension, setup

package_name = 'equimus_control'

# The estimator's and the PID's per-frame arithmetic, compiled (equimus_control/kernels.py).
# The compiled functions must give the Python reference's bits: no fused multiply-add, and pow
# called, not rewritten (GCC turns pow(x, 2.0) into x * x, which differs from the C library's
# pow, and so from Python's x**2, in the last bit now and then). Optional: without a C compiler
# the package builds and runs the Python form.
kernels = Extension(
    'equimus_control._kernels',
    sources=['equimus_control/_kernels.c'],
    extra_compile_args=['-O2', '-ffp-contract=off', '-fno-builtin-pow'],
    optional=True,
)

setup(
    name=package_name,
    version='0.2.0',
    packages=['equimus_control'],
    ext_modules=[kernels],
    package_data={'equimus_control': ['_kernels.pyi']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/equimus_control']),
        ('share/equimus_control', ['package.xml']),
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
            'estimator = equimus_control.entry:estimator',
            'controller = equimus_control.entry:controller',
            'reference = equimus_control.entry:reference',
        ],
    },
)
