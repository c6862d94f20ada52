"""config/fastdds_shm.xml: its shared-memory segment holds an observation with two
640x480 rgb8 frames, and the demo (and env.sh) point Fast DDS at it only when the user
has not chosen a profile."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from robokernel_ros.demo import DDS_PROFILE_VARS, config_dir, use_dds_profile

NS = {"p": "http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles"}
REPO = Path(__file__).resolve().parents[3]


def test_the_shm_segment_holds_two_camera_frames_and_udp_stays_for_the_rest() -> None:
    root = ET.parse(config_dir() / "fastdds_shm.xml").getroot()
    kinds = {
        d.find("p:transport_id", NS).text: d.find("p:type", NS).text
        for d in root.iterfind("p:transport_descriptors/p:transport_descriptor", NS)
    }
    assert sorted(kinds.values()) == ["SHM", "UDPv4"]
    shm = next(
        d
        for d in root.iterfind("p:transport_descriptors/p:transport_descriptor", NS)
        if d.find("p:type", NS).text == "SHM"
    )
    assert int(shm.find("p:segment_size", NS).text) >= 4 * 640 * 480 * 3  # 2 observations
    participant = root.find("p:participant", NS)
    assert participant.get("is_default_profile") == "true"
    used = [t.text for t in participant.iterfind("p:rtps/p:userTransports/p:transport_id", NS)]
    assert sorted(used) == sorted(kinds)
    assert participant.find("p:rtps/p:useBuiltinTransports", NS).text == "false"


def test_a_profile_the_user_set_wins() -> None:
    for name in DDS_PROFILE_VARS:
        environ = {name: "/mine.xml"}
        use_dds_profile(environ)
        assert environ == {name: "/mine.xml"}
    environ: dict[str, str] = {}
    use_dds_profile(environ)
    assert environ == {"FASTDDS_DEFAULT_PROFILES_FILE": str(config_dir() / "fastdds_shm.xml")}
    environ = {"ROS_DISTRO": "jazzy"}  # Fast DDS 2 reads the older name
    use_dds_profile(environ)
    assert environ["FASTRTPS_DEFAULT_PROFILES_FILE"].endswith("fastdds_shm.xml")


def test_env_sh_sets_the_profile_unless_one_is_set() -> None:
    def profile(**env: str) -> str:
        clean = {k: v for k, v in os.environ.items() if k not in DDS_PROFILE_VARS}
        out = subprocess.run(
            [
                "bash",
                "-c",
                f". {REPO / 'env.sh'} >/dev/null 2>&1; echo $FASTDDS_DEFAULT_PROFILES_FILE",
            ],
            env={**clean, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    assert profile() == str(REPO / "robokernel_ros" / "config" / "fastdds_shm.xml")
    assert profile(FASTDDS_DEFAULT_PROFILES_FILE="/mine.xml") == "/mine.xml"
    assert profile(FASTRTPS_DEFAULT_PROFILES_FILE="/mine.xml") == ""
