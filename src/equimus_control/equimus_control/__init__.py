"""equimus_control."""

#: The controllers the controller node can run (parameter `controller`), as launch files,
#: `equimus launch` and the main job accept them; the first is the default.
CONTROLLERS = ('pid', 'mpc', 'sampling', 'open_loop', 'policy', 'ltv_mpc')
