"""System identification of the EquiMus leg from recordings (plain Python, no ROS imports).

data      -- load rosbag2 recordings and the authors' CSVs, cut them into pressure-step experiments
static    -- (k, S) by linear regression on equilibria (EquiMus Sec. IV-D)
dynamic   -- k, S, l0, c, joint damping (and valve τ) by simulating the recorded inputs in MuJoCo
parallel  -- the map-like candidate evaluator (process pool by default)
report    -- per-experiment error tables (Markdown), uncertainty tables and plots
evaluate  -- `equimus evaluate`: open-loop replay of a parameter set on any recording
crossval  -- the joint static + dynamic fit chosen by held-out error (k-fold over pressure pairs)
crosscheck -- the same least-squares problem solved by mujoco.sysid (optional extra)
excite    -- `equimus excite`: pressure trajectories designed on the Fisher information
synth     -- synthetic recordings with known parameters
"""
