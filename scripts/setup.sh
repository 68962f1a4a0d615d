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
for extra in ${EQUIMUS_EXTRAS:-}; do
  log "installing optional extra '$extra' (requirements-$extra.txt)"
  "$VENV/bin/python" -m pip install -q -r "requirements-$extra.txt" 2>"$VENV/pip.err" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
done

if [ "$MODE" = pypi-ros ] && ! "$VENV/bin/python" -c 'import tf2_msgs.msg' 2>/dev/null; then
  # /tf and /tf_static need tf2_msgs, which has no PyPI wheel: build its message from source.
  log "building tf2_msgs (TFMessage) with the rosidl wheels (one time, about 10 s)"
  bash third_party/tf2_msgs/build.sh "$VENV" constraints.txt || log "tf2_msgs not built: /tf and /tf_static stay off"
fi

# Optional extra on request: `scripts/setup.sh --rl` (or EQUIMUS_EXTRAS=rl) adds
# requirements-rl.txt (stable-baselines3, torch CPU, TensorBoard) for `equimus train --algo ppo`.
if [[ " $* " == *" --rl "* || "${EQUIMUS_EXTRAS:-}" == *rl* ]]; then
  rl_stamp="$VENV/.equimus-setup-rl"
  rl_want="$(sha256sum requirements-rl.txt | cut -c1-16)"
  if [ "$(cat "$rl_stamp" 2>/dev/null)" != "$rl_want" ]; then
    log "installing the rl extra (torch CPU, stable-baselines3; one time, a few minutes)"
    # colcon needs setuptools < 80; torch's dependencies would upgrade it
    echo 'setuptools<80' > "$VENV/constraints-rl.txt"
    "$VENV/bin/python" -m pip install -q -c "$VENV/constraints-rl.txt" torch \
      --index-url https://download.pytorch.org/whl/cpu 2>"$VENV/pip.err" \
      || "$VENV/bin/python" -m pip install -q -c "$VENV/constraints-rl.txt" torch 2>"$VENV/pip.err" \
      || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
    "$VENV/bin/python" -m pip install -q -c "$VENV/constraints-rl.txt" -r requirements-rl.txt \
      2>"$VENV/pip.err" || { grep -v "^WARNING: Location" "$VENV/pip.err" >&2; exit 1; }
    echo "$rl_want" > "$rl_stamp"
  fi
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
log "ready: source scripts/env.sh"
