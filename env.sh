# Source this file for a shell with the venv, the ROS 2 wheels and the workspace:
#   source env.sh
# With a system ROS 2 install (Jazzy/Kilted) and no .venv, it sources the workspace only.
_rk_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
if [ -x "$_rk_root/.venv/bin/python" ]; then
  export VIRTUAL_ENV="$_rk_root/.venv"
  export PATH="$VIRTUAL_ENV/bin:$PATH"
  export AMENT_PREFIX_PATH="$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
  export CMAKE_PREFIX_PATH="$VIRTUAL_ENV${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
fi
if [ -f "$_rk_root/install/setup.bash" ] && [ -n "${BASH_VERSION:-}" ]; then
  # shellcheck disable=SC1091
  . "$_rk_root/install/setup.bash"
fi
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
# Camera frames on shared memory (a 16 MiB segment: robokernel_ros/config/fastdds_shm.xml),
# unless a Fast DDS profile is chosen already.
if [ -z "${FASTDDS_DEFAULT_PROFILES_FILE:-}" ] && [ -z "${FASTRTPS_DEFAULT_PROFILES_FILE:-}" ]; then
  export FASTDDS_DEFAULT_PROFILES_FILE="$_rk_root/robokernel_ros/config/fastdds_shm.xml"
  # Fast DDS 2 (Humble, Jazzy) reads the older name; Fast DDS 3 warns that it is deprecated.
  case "${ROS_DISTRO:-}" in humble | jazzy) export FASTRTPS_DEFAULT_PROFILES_FILE="$FASTDDS_DEFAULT_PROFILES_FILE" ;; esac
fi
export MUJOCO_GL="${MUJOCO_GL:-egl}"
unset _rk_root
