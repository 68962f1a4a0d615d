"""Parameter declaration with descriptors, so `ros2 param describe` says what each one means."""
from rcl_interfaces.msg import ParameterDescriptor, ParameterType

_TYPES = {float: ParameterType.PARAMETER_DOUBLE, int: ParameterType.PARAMETER_INTEGER,
          str: ParameterType.PARAMETER_STRING, bool: ParameterType.PARAMETER_BOOL}


def declare(node, name, default, description):
    """Declare a parameter with a descriptor and return its value; list defaults become double arrays."""
    if isinstance(default, (list, tuple)):
        ptype = ParameterType.PARAMETER_DOUBLE_ARRAY
        default = [float(v) for v in default]
    else:
        ptype = _TYPES[type(default)]
    node.declare_parameter(name, default, ParameterDescriptor(description=description, type=ptype))
    return node.get_parameter(name).value
