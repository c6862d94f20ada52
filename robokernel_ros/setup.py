from glob import glob

from setuptools import find_packages, setup

package_name = "robokernel_ros"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.launch.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.xml")),
    ],
    install_requires=["setuptools", "numpy", "pyyaml", "mujoco", "rosbags"],
    extras_require={"lerobot": ["lerobot[diffusion]==0.6.1"]},
    zip_safe=True,
    maintainer="robokernel maintainers",
    maintainer_email="maintainers@robokernel.dev",
    description="One episode loop for robot-learning policies on ROS 2 workcells.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "robokernel = robokernel_ros.cli:main",
            "runner = robokernel_ros.nodes.runner:main",
            "policy_server = robokernel_ros.nodes.policy_server:main",
            "served_endpoint = robokernel_ros.nodes.served_endpoint:main",
            "safety_shield = robokernel_ros.nodes.safety_shield:main",
            "estop_panel = robokernel_ros.nodes.estop_panel:main",
            "sim_robot = robokernel_ros.nodes.sim_robot:main",
            "bag_recorder = robokernel_ros.nodes.bag_recorder:main",
            "sim_operator = robokernel_ros.nodes.sim_operator:main",
        ],
        # policy providers of layers above policies/ (robokernel_ros.policies.base)
        "robokernel_ros.policies": [
            "remote = robokernel_ros.ros.remote_policy:RemotePolicy",
        ],
    },
)
