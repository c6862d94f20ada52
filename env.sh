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
# The workcell's DDS settings on one host (ros.launch_steps.dds_environment, the demo's and
# the launch files' rule): with neither a Fast DDS profile nor a discovery range set,
# robokernel_ros/config/fastdds_localhost.xml (discovery and data on UDP loopback, no
# shared memory) with the range SYSTEM_DEFAULT, since the profile keeps discovery on this
# host itself; with a profile of yours, the range LOCALHOST; a range of yours is left as is.
if [ -z "${ROS_AUTOMATIC_DISCOVERY_RANGE:-}" ]; then
  if [ -z "${FASTDDS_DEFAULT_PROFILES_FILE:-}" ] && [ -z "${FASTRTPS_DEFAULT_PROFILES_FILE:-}" ]; then
    export FASTDDS_DEFAULT_PROFILES_FILE="$_rk_root/robokernel_ros/config/fastdds_localhost.xml"
    # Fast DDS 2 (Humble, Jazzy) reads the older name; Fast DDS 3 warns that it is deprecated.
    case "${ROS_DISTRO:-}" in humble | jazzy) export FASTRTPS_DEFAULT_PROFILES_FILE="$FASTDDS_DEFAULT_PROFILES_FILE" ;; esac
    export ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT
  else
    export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
  fi
fi
export MUJOCO_GL="${MUJOCO_GL:-egl}"
unset _rk_root
