# Source this file: activates the venv and the colcon workspace overlay.
_equimus_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
source "${EQUIMUS_VENV:-$_equimus_root/.venv}/bin/activate"
# shellcheck disable=SC1091
source "$_equimus_root/ros2_ws/install/setup.bash"
export PYTHONUNBUFFERED=1
# The EquiMus authors' data (meshes, measurements): the shared folder beside the checkout.
if [ -z "${EQUIMUS_SHARED:-}" ] && [ -d "$_equimus_root/../shared/data" ]; then
  EQUIMUS_SHARED="$(cd "$_equimus_root/../shared" && pwd)"
  export EQUIMUS_SHARED
fi
unset _equimus_root
# Keep DDS discovery on this machine unless the user chose otherwise.
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
