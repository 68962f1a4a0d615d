#!/usr/bin/env bash
# Build tf2_msgs (TFMessage: the /tf and /tf_static type) into a venv whose ROS 2 comes from PyPI
# wheels, which include no tf2_msgs. Needs cmake and a C/C++ compiler; about 10 s of compiling.
# Usage: build.sh VENV [CONSTRAINTS]. A no-op when tf2_msgs is already importable.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$1"
CONSTRAINTS="${2:-}"
if "$VENV/bin/python" -c 'import tf2_msgs.msg' 2>/dev/null; then exit 0; fi
for tool in cmake cc c++; do
  command -v "$tool" >/dev/null || { echo "tf2_msgs: $tool not found (apt-get install cmake g++); /tf stays off" >&2; exit 1; }
done
"$VENV/bin/python" -m pip install -q -r "$HERE/requirements.txt" ${CONSTRAINTS:+-c "$CONSTRAINTS"}
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT
(
  cd "$BUILD"
  export AMENT_PREFIX_PATH="$VENV"
  cmake "$HERE" -DCMAKE_PREFIX_PATH="$VENV" -DCMAKE_INSTALL_PREFIX="$VENV" \
    -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF >cmake.log 2>&1 \
    || { tail -30 cmake.log >&2; exit 1; }
  make -j2 install >make.log 2>&1 || { tail -30 make.log >&2; exit 1; }
)
"$VENV/bin/python" -c 'import tf2_msgs.msg'
