"""The workcell's DDS settings on one host (config/fastdds_localhost.xml with the range
SYSTEM_DEFAULT): discovery and data on UDP loopback, no shared memory; env.sh, the demo,
the launch files and the tests apply them only where the user has set neither a Fast DDS
profile nor a discovery range (ros.launch_steps.dds_environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from robokernel_ros.demo import DDS_PROFILE_VARS, config_dir, use_dds_profile

NS = {"p": "http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles"}
REPO = Path(__file__).resolve().parents[3]
RANGE = "ROS_AUTOMATIC_DISCOVERY_RANGE"
PROFILE = config_dir() / "fastdds_localhost.xml"


def test_the_localhost_profile_is_udp_on_loopback_only() -> None:
    root = ET.parse(PROFILE).getroot()
    kinds = [
        d.find("p:type", NS).text
        for d in root.iterfind("p:transport_descriptors/p:transport_descriptor", NS)
    ]
    assert kinds == ["UDPv4"]  # no SHM transport
    participant = root.find("p:participant", NS)
    assert participant.get("is_default_profile") == "true"
    assert participant.find("p:rtps/p:useBuiltinTransports", NS).text == "false"
    addresses = {
        where: [a.text for a in participant.iterfind(f"p:rtps/{where}//p:address", NS)]
        for where in (
            "p:builtin/p:metatrafficUnicastLocatorList",
            "p:builtin/p:initialPeersList",
            "p:defaultUnicastLocatorList",
        )
    }
    assert all(found == ["127.0.0.1"] for found in addresses.values()), addresses
    assert participant.find("p:rtps/p:builtin/p:metatrafficMulticastLocatorList", NS) is None
    for kind in ("data_writer", "data_reader"):  # data sharing is shared memory too
        profile = root.find(f"p:{kind}", NS)
        assert profile.get("is_default_profile") == "true"
        assert profile.find("p:qos/p:data_sharing/p:kind", NS).text == "OFF"
    # a lost datagram is repaired while a keep-last-10 joint-state writer at 100 Hz
    # still has it (0.1 s), not after Fast DDS's 3 s heartbeat
    period = root.find("p:data_writer/p:times/p:heartbeat_period", NS)
    seconds = int(period.find("p:sec", NS).text) + int(period.find("p:nanosec", NS).text) / 1e9
    assert seconds <= 0.02, seconds


def test_the_settings_apply_only_where_the_user_set_none() -> None:
    environ: dict[str, str] = {}
    use_dds_profile(environ)
    assert environ == {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE), RANGE: "SYSTEM_DEFAULT"}
    environ = {"ROS_DISTRO": "jazzy"}  # Fast DDS 2 reads the older name
    use_dds_profile(environ)
    assert environ["FASTRTPS_DEFAULT_PROFILES_FILE"] == str(PROFILE)
    for name in DDS_PROFILE_VARS:  # a profile of the user's: discovery stays on the host
        environ = {name: "/mine.xml"}
        use_dds_profile(environ)
        assert environ == {name: "/mine.xml", RANGE: "LOCALHOST"}
    environ = {RANGE: "SUBNET"}  # a range of the user's: theirs, with Fast DDS's defaults
    use_dds_profile(environ)
    assert environ == {RANGE: "SUBNET"}


def test_env_sh_applies_the_same_rule() -> None:
    def sourced(**env: str) -> tuple[str, str]:
        clean = {k: v for k, v in os.environ.items() if k not in (*DDS_PROFILE_VARS, RANGE)}
        out = subprocess.run(
            ["bash", "-c", f". {REPO / 'env.sh'} >/dev/null 2>&1; "
             f"echo \"$FASTDDS_DEFAULT_PROFILES_FILE|${RANGE}\""],
            env={**clean, **env}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        profile, _, discovery = out.stdout.strip().partition("|")
        return profile, discovery

    assert sourced() == (str(REPO / "robokernel_ros" / "config" / PROFILE.name), "SYSTEM_DEFAULT")
    assert sourced(FASTDDS_DEFAULT_PROFILES_FILE="/mine.xml") == ("/mine.xml", "LOCALHOST")
    assert sourced(FASTRTPS_DEFAULT_PROFILES_FILE="/mine.xml") == ("", "LOCALHOST")
    assert sourced(**{RANGE: "SUBNET"}) == ("", "SUBNET")


_PEER = textwrap.dedent(
    """
    import sys, time, rclpy
    from rclpy.node import Node
    from std_msgs.msg import String
    rclpy.init()
    me = sys.argv[1]
    node = Node(me)
    pub = node.create_publisher(String, "profile_probe", 10)
    others: dict[str, str] = {}  # the other peer's name -> whether it has heard someone
    node.create_subscription(
        String, "profile_probe",
        lambda m: others.__setitem__(*m.data.split(":")) if not m.data.startswith(me + ":") else None,
        10,
    )
    deadline = time.monotonic() + 30
    # until this peer heard the other and the other says it heard this one (a handshake:
    # a peer that stopped at its own first message could leave the other deaf)
    while time.monotonic() < deadline and not (others and all(v == "1" for v in others.values())):
        pub.publish(String(data=f"{me}:{int(bool(others))}"))
        rclpy.spin_once(node, timeout_sec=0.1)
    for _ in range(10):  # the other may still wait for this one's "heard"
        pub.publish(String(data=f"{me}:{int(bool(others))}"))
        rclpy.spin_once(node, timeout_sec=0.1)
    with open("/proc/self/maps") as maps:
        shm = sorted({line.split()[-1] for line in maps if "/dev/shm/fastdds" in line})
    print("heard" if others else "deaf", len(shm), flush=True)
    """
)


def test_two_processes_on_the_profile_talk_without_shared_memory(tmp_path) -> None:
    pytest.importorskip("rclpy")
    env = {k: v for k, v in os.environ.items() if k not in (*DDS_PROFILE_VARS, RANGE)}
    use_dds_profile(env)
    script = tmp_path / "peer.py"
    script.write_text(_PEER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), name],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for name in ("peer_a", "peer_b")
    ]
    try:
        outputs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    # each heard the other, and neither mapped a Fast DDS shared-memory segment or port
    assert [out.strip().splitlines()[-1] for out in outputs] == ["heard 0", "heard 0"], outputs
