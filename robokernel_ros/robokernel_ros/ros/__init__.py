"""All rclpy code of the package but the nodes (`nodes/` holds one thin node per file).

- `wire`: the policy-server protocol's names and the message conversions (observations,
  action chunks, images, kernel events); no rclpy.
- `served_wire`: the served endpoint's JSON payloads and `served.*` arrays; no rclpy.
- `transport`: this process's private rclpy link, `DirectReader`, `ServerWatch`.
- `qos`: the QoS profiles, each with its reason.
- `params`: `declare` (parameters with descriptors, validated) and `ParameterError`;
  `runner_params`: the runner node's parameters (`RunnerParams`), described once.
- `node`: `run_node` / `run_multithreaded` / `exit_main`, the executors.
- `policy_host`: the node base of the policy server and the served endpoint.
- `ros_env`: `RosRobotEnv`, a kernel Environment over ROS topics; `env_config`: its
  typed configuration (`RosEnvConfig`: state sources, cameras, one route per controller
  and its shield), no rclpy; `commands`: the controllers' command messages;
  `workcell_contract`: the runner's parameters or `contract_file` as that configuration.
- `contract_live`: a topic contract against the live graph (types, rates, stamps:
  `robokernel contract check --live`); `contract_recorder`: the bag_recorder's contract mode.
- `remote_policy`: the `remote` policy provider.
- `actions`: the runner's long calls as actions (goal, feedback, cancel).
- `requests`: the runner's service requests as rollout API calls, typed results as responses.
- `lifecycle`: `LifecyclePeer`, another node's lifecycle state read and changed
  (`<node>/get_state`, `<node>/change_state`), and `wait_active`.
- `client`: `WorkcellClient`, the runner's API from Python (typed goals, `GoalTask`,
  `TaskResult`); the `robokernel ros` command is `robokernel_ros.cli.ros`.

Import rule: this package imports the layers below it (kernel, safety, tasks, envs,
policies, contract, recording, live, rollout, scoring), never `nodes/` or the CLI; nothing
below it imports rclpy (test/boundary.py's LAYER_IMPORTS; test_ros_imports). The `remote`
provider reaches the policy registry as an entry point (robokernel_ros/setup.py).
"""
