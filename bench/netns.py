"""Hosts in Linux network namespaces on one bridge, with loss and cuts (for bench/network.py).

    net = NetLab(["robot", "inference", "operator"])   # unique names per run
    net.up()                    # namespaces, veth pairs, a bridge; raises on any failure
    net.argv("robot", [python, "-m", ...])  # a command run on that host
    net.set_loss(5)             # 5 % of IPv4 packets crossing the bridge dropped (nftables)
    net.cut("operator"); net.restore("operator")
    net.down()                  # always (in a finally): every namespace made is deleted

Layout: one namespace per host (its own loopback and `eth0`, 10.<a>.<b>.<i>/24) and a
switch namespace holding a bridge with one veth port per host. Everything is created
inside the namespaces (`ip -n`), so no interface, address or rule touches the namespace
the caller runs in; deleting a namespace deletes its interfaces. Loss is one nftables
rule in the switch's bridge family (`numgen random mod 100 < N drop` on the forward
hook): every packet between two hosts crosses the bridge once, so N % is the loss of
each packet; traffic inside a host (its loopback) is not touched. A cut sets the host's
bridge port down (both directions), a restore sets it up.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), `ip` (iproute2) and `nft` (nftables);
`missing_tools()` names what is missing, and `up()` raises RuntimeError with the
command's own error.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence

PREFIX = "rk"  # every namespace this module makes starts with rk<tag>


def missing_tools() -> list[str]:
    """What this machine lacks to build the lab ([] when it can)."""
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)")
    return missing


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


class NetLab:
    """Network namespaces for one run (module docstring). `hosts`: short names."""

    def __init__(self, hosts: Sequence[str], tag: str | None = None) -> None:
        self.tag = tag or secrets.token_hex(3)
        self.switch = f"{PREFIX}{self.tag}sw"
        self.hosts = list(hosts)
        self.ns = {h: f"{PREFIX}{self.tag}{h[:6]}" for h in self.hosts}
        octets = bytes.fromhex(self.tag.ljust(4, "0")[:4])
        self.subnet = f"10.{10 + octets[0] % 200}.{octets[1]}"
        self.ip = {h: f"{self.subnet}.{i + 1}" for i, h in enumerate(self.hosts)}
        self.port = {h: f"p{i}" for i, h in enumerate(self.hosts)}  # in the switch namespace
        self.made: list[str] = []
        self.loss = 0

    def up(self) -> NetLab:
        try:
            for name in (self.switch, *self.ns.values()):
                _run(["ip", "netns", "add", name])
                self.made.append(name)
                _run(["ip", "-n", name, "link", "set", "lo", "up"])
            sw = ["ip", "-n", self.switch]
            _run([*sw, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])
            _run([*sw, "link", "set", "br0", "up"])
            for host, ns in self.ns.items():
                port = self.port[host]
                _run(
                    [*sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns]
                )
                _run([*sw, "link", "set", port, "master", "br0"])
                _run([*sw, "link", "set", port, "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.ip[host]}/24", "dev", "eth0"])
                _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
                # DDS discovery's multicast (239.255.0.1) leaves through eth0
                _run(["ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"])
            self._nft(
                "add table bridge rkloss; "
                "add chain bridge rkloss lossy { type filter hook forward priority 0; policy accept; }"
            )
            self.set_loss(0)
        except BaseException:
            self.down()
            raise
        return self

    def _nft(self, script: str) -> None:
        _run(["ip", "netns", "exec", self.switch, "nft", script])

    def argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """`argv` run in `host`'s namespace (ip netns exec execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns[host], *argv]

    def set_loss(self, percent: float) -> None:
        """Drop `percent` % of the IPv4 packets crossing the bridge (0: none)."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percent={percent}: must be in [0, 100]")
        rule = f"add rule bridge rkloss lossy ether type ip numgen random mod 100 < {int(percent)} counter drop"
        self._nft("flush chain bridge rkloss lossy" + (f"; {rule}" if percent > 0 else ""))
        self.loss = percent

    def cut(self, host: str) -> None:
        _run(["ip", "-n", self.switch, "link", "set", self.port[host], "down"])

    def restore(self, host: str) -> None:
        _run(["ip", "-n", self.switch, "link", "set", self.port[host], "up"])

    def dropped(self) -> int:
        """Packets the loss rule dropped so far (its counter)."""
        out = _run(["ip", "netns", "exec", self.switch, "nft", "list", "chain", "bridge", "rkloss", "lossy"],
                   check=False).stdout  # fmt: skip
        return 0 if "counter" not in out else int(out.split("packets")[1].split()[0])

    def down(self) -> list[str]:
        """Delete every namespace this lab made; returns those still listed after."""
        for name in reversed(self.made):
            _run(["ip", "netns", "del", name], check=False)
        listed = _run(["ip", "netns", "list"], check=False).stdout.split()
        left = [name for name in self.made if name in listed]
        self.made = left
        return left
