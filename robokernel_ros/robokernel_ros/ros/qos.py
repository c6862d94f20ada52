"""The QoS profiles of this package's topics, each chosen on purpose (its reason beside it).

    from robokernel_ros.ros.qos import COMMAND_QOS, ESTOP_QOS

E-stop and status: reliable + transient_local depth 1 (a late joiner gets the last
value); commands: reliable; sensor streams: sensor-data QoS; event streams: reliable
and deep; the policy server's observation/chunk pairs as their comments say.
"""

from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

#: Latched operator inputs (e-stop): reliable, transient_local, depth 1. A subscriber
#: that starts late (or restarts) receives the last value the publisher sent.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
ESTOP_QOS = LATCHED_QOS
#: The e-stop's reader, taken by its owner (a DirectReader): ESTOP_QOS with a history
#: that keeps the samples of a stall of the taker (64: 6.4 s of a 10 Hz source), so the
#: source's silence is judged between every two samples that arrived, not only the last.
ESTOP_READER_QOS = QoSProfile(
    history=ESTOP_QOS.history,
    depth=64,
    reliability=ESTOP_QOS.reliability,
    durability=ESTOP_QOS.durability,
)

#: Commands to controllers: reliable, volatile, depth 10 (what ros2_control's
#: forward_command_controller and joint_trajectory_controller subscribe with).
COMMAND_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
#: The safety shield's reader of a command stream, taken by the shield (a DirectReader):
#: COMMAND_QOS with a history that keeps every command of a stall of the shield's own
#: process up to its watchdog (64: 1.3 s at 50 Hz, 0.64 s at 100 Hz). With depth 10 a
#: 0.4 s stall lost 10 of 20 commands (measured); their successor is then a jump.
COMMAND_READER_QOS = QoSProfile(
    history=COMMAND_QOS.history,
    depth=64,
    reliability=COMMAND_QOS.reliability,
    durability=COMMAND_QOS.durability,
)

#: Subscribing to sensor streams (joint states, images): best effort, depth 5. A best
#: effort subscription matches both reliable and best-effort publishers.
SENSOR_QOS = qos_profile_sensor_data

#: Publishing /joint_states the way ros2_control's joint_state_broadcaster does
#: (reliable, depth 10), so that subscribers of either reliability match.
JOINT_STATE_PUB_QOS = COMMAND_QOS

#: A node's status topic: the latest value for late joiners (reliable, transient_local).
STATUS_QOS = LATCHED_QOS
#: A status reader taken by its owner (a DirectReader): STATUS_QOS with a history that
#: keeps every change published between two takes. A shield's ~/state carries only its
#: last sender's counts, and its owner (the runner's ShieldLedger) takes nothing between
#: episodes: 256 states are ~13 s of another sender's commands at the shield's 20 Hz
#: (16 were lost behind a second source's one second of commands during an e-stop).
STATUS_READER_QOS = QoSProfile(
    history=STATUS_QOS.history,
    depth=256,
    reliability=STATUS_QOS.reliability,
    durability=STATUS_QOS.durability,
)

#: A stream of discrete events (interventions, trace events): reliable, deep queue.
EVENT_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=100,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

#: Live kernel events (KernelEvent): reliable, volatile, depth 1000 (an episode step
#: publishes about five events in a burst; a shallower history drops some before a
#: subscriber acks).
EVENTS_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1000,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)


# --- the policy server -------------------------------------------------------------------------

#: The policy server's observations (driven mode): reliable, depth 2; the inference thread
#: answers the latest one waiting, so a deeper history would only hold stale requests.
OBSERVATION_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=2, reliability=ReliabilityPolicy.RELIABLE
)
#: Action chunks (and the remote policy's observations): reliable, depth 10.
CHUNK_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
)
#: Served steps: reliable like the driven pair, but every step counts (none may be
#: replaced by a later one), so the history is as deep as the chunks'.
SERVED_OBSERVATION_QOS = CHUNK_QOS
#: Served episode status changes: reliable, deep enough for a burst of episodes.
EPISODE_STATUS_QOS = EVENT_QOS
