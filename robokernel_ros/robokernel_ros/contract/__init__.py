"""The topic contract: one file describing a robot's streams, read by the live workcell,
the recorder, `import-bag` and the LeRobot export. No ROS import.

    from robokernel_ros.contract import load_contract, resolve_types, extract
    contract = load_contract("contract.yaml")

spec: the Contract dataclasses, load/parse/validation (ContractError: one line per mistake).
fields: the supported message types and reading a message into a vector or an RGB frame.
"""

from .fields import FieldError, extract, header_stamp_ns, image_rgb
from .spec import (
    ALIGN_MODES,
    COMMAND_KINDS,
    Command,
    Contract,
    ContractError,
    EpisodeSplit,
    ImageStream,
    Stream,
    Takeover,
    Teleop,
    contract_mapping,
    load_contract,
    parse_contract,
    resolve_types,
    stream_names,
)

__all__ = [
    "ALIGN_MODES",
    "COMMAND_KINDS",
    "Command",
    "Contract",
    "ContractError",
    "EpisodeSplit",
    "FieldError",
    "ImageStream",
    "Stream",
    "Takeover",
    "Teleop",
    "contract_mapping",
    "extract",
    "header_stamp_ns",
    "image_rgb",
    "load_contract",
    "parse_contract",
    "resolve_types",
    "stream_names",
]
