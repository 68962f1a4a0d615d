#!/usr/bin/env bash
# Prove requirements.txt's lower bounds: install exactly the minimum version of every non-ROS
# requirement into a throwaway venv, then run a smoke test of the plain (ROS-free) code that uses
# each of them: MuJoCo model and rollouts (mujoco), MPC (osqp, scipy), identification from a
# bag written and read back (mcap, rosbags with the Kilted typestore, scipy's rng=), the DAC
# board protocol on a pty (pyserial), the leg description (PyYAML, numpy), a plot (matplotlib),
# an mp4 (imageio-ffmpeg).
# CI runs it (.ci/run); 2-3 minutes here, most of it downloading.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
log() { printf '[lower-bounds] %s\n' "$*" >&2; }

# name>=X in the non-ROS section -> name==X
sed -n '/^# --- non-ROS/,$p' requirements.txt | grep -v '^#' | grep '>=' | sed 's/>=/==/' >"$WORK/lower.txt"
# The test tools at their tested versions (constraints.txt), not at lower bounds.
grep -iE '^(pytest|pytest-timeout|hypothesis|iniconfig|pluggy|packaging|attrs|sortedcontainers)==' \
  constraints.txt >"$WORK/tools.txt"
log "installing the lower bounds: $(tr '\n' ' ' <"$WORK/lower.txt")"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VPY" -m pip install -q -r "$WORK/lower.txt" -r "$WORK/tools.txt" setuptools wheel
# Built from a copy: a build in src/ would leave build/ and *.egg-info in the checkout.
cp -r src "$WORK/src"
"$VPY" -m pip install -q --no-deps --no-build-isolation \
  "$WORK"/src/equimus_{description,sim,control,record,identification,hw,ros}
"$VPY" -m pip freeze | grep -iE "^($(cut -d= -f1 "$WORK/lower.txt" | paste -sd'|'))==" >&2

log "smoke test"
cd "$WORK"  # the installed copies, not src/ on sys.path
"$VPY" -c '
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from equimus_description.urdf import build_urdf, forward_kinematics
fk = forward_kinematics(build_urdf(), {"hip": 1.2, "knee": 0.7})
fig, ax = plt.subplots()
ax.plot([p[0][1] for p in fk.values()], [p[0][2] for p in fk.values()])
fig.savefig("leg.png")
print("matplotlib plot ok")
import numpy as np
from equimus_sim.render import write_video
write_video("v.mp4", [np.full((48, 64, 3), i * 40, np.uint8) for i in range(5)], fps=5)
import os
assert os.path.getsize("v.mp4") > 0
print("imageio-ffmpeg video ok")
'
"$VPY" -m pytest -q -p no:cacheprovider -c "$ROOT/pytest.ini" --rootdir "$ROOT" \
  "$ROOT/tests/description" "$ROOT/tests/sim/test_model.py" "$ROOT/tests/control/test_mpc.py" \
  "$ROOT/tests/control/test_sampling.py" "$ROOT/tests/identification/test_data_dynamic.py" \
  "$ROOT/tests/valve/test_emulator.py"
