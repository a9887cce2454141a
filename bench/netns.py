"""Hosts on one machine for multi-host benchmarks and tests: network namespaces joined by a bridge.

    lab = NetnsLab("klr", "198.18.20.0/24", 3)   # namespaces klr<run>h1..h3 at 198.18.20.1..3
    lab.setup()
    proc = lab.popen(1, ["python", "-m", "broker.cli", ...])
    lab.cut(1, 2)          # nothing passes between hosts 1 and 2, both ways; each still reaches the others
    lab.heal(1, 2)
    lab.teardown()          # or: with NetnsLab(...) as lab

The bridge lives in the root namespace with the subnet's .254 address, so a process there (a client, a
ZooKeeper bound to `lab.gateway`) reaches every host. Addresses come from 198.18.0.0/15 (RFC 2544's
benchmarking range): nothing here leaves the machine. Each lab's names carry a per-run suffix, so labs of
concurrent runs never collide; give each user its own subnet and prefix (bench/run_recovery.py uses
198.18.20.0/24 and "klr").

A cut is a blackhole route to the other host's address inside each of the two namespaces (iproute2 only,
no iptables or nftables needed): packets either would send to the other are dropped without an error, so
connections between them time out, exactly as on a lost link, while both keep every other path. Needs root.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from typing import Any


def available() -> bool:
    """Root and iproute2: what network namespaces need."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    cp = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and cp.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {cp.stderr.strip()}")
    return cp


class NetnsLab:
    def __init__(self, prefix: str, subnet: str, hosts: int, suffix: str | None = None) -> None:
        net = ipaddress.ip_network(subnet)
        if net.prefixlen != 24 or not net.subnet_of(ipaddress.ip_network("198.18.0.0/15")):
            raise ValueError(f"{subnet}: a /24 inside 198.18.0.0/15 is expected")
        if not 1 <= hosts <= 200:
            raise ValueError("1 to 200 hosts")
        # Interface names are at most 15 characters: prefix + suffix + "br"/"v12"/"p12" must fit.
        self.prefix = prefix
        self.tag = prefix + (suffix if suffix is not None else f"{os.getpid() % 100000:x}")
        if len(self.tag) > 10:
            raise ValueError(f"name prefix {self.tag!r} too long (10 characters at most with the suffix)")
        self.net = net
        self.hosts = hosts
        self.bridge = f"{self.tag}br"
        self._cuts: set[tuple[int, int]] = set()
        self._isolated: set[int] = set()
        self._made: list[tuple[str, str]] = []  # ("ns"|"link", name), for teardown

    # --- names and addresses ---

    def ns(self, i: int) -> str:
        return f"{self.tag}h{i}"

    def addr(self, i: int) -> str:
        return str(self.net.network_address + i)

    @property
    def gateway(self) -> str:
        """The bridge's address in the root namespace (reachable from every host)."""
        return str(self.net.network_address + 254)

    # --- lifecycle ---

    def _clear_stale(self) -> None:
        """Remove what a lab of this prefix left behind when its process was killed before its teardown (a
        SIGKILLed test run): its namespaces, and any root-namespace device holding an address of this subnet, whose
        route would otherwise take this lab's traffic (every connection to a host refused)."""
        for line in _ip("netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(self.prefix) and not name.startswith(self.tag):
                _ip("netns", "del", name, check=False)
        for line in _ip("-o", "-4", "addr", "show", check=False).stdout.splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[2] == "inet":
                dev, addr = parts[1].split("@")[0], ipaddress.ip_interface(parts[3])
                if addr.ip in self.net and dev != self.bridge:
                    _ip("link", "del", "dev", dev, check=False)

    def setup(self) -> NetnsLab:
        self._clear_stale()
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i in range(1, self.hosts + 1):
                ns, outside, inside = self.ns(i), f"{self.tag}v{i}", f"{self.tag}p{i}"
                _ip("netns", "add", ns)
                self._made.append(("ns", ns))
                _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
                self._made.append(("link", outside))
                _ip("link", "set", inside, "netns", ns)
                _ip("link", "set", outside, "master", self.bridge)
                _ip("link", "set", outside, "up")
                _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", inside)
                _ip("-n", ns, "link", "set", inside, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except Exception:
            self.teardown()
            raise
        return self

    def teardown(self) -> None:
        for i in list(self._isolated):  # the root namespace's routes outlive the lab's namespaces
            self.rejoin(i)
        for kind, name in reversed(self._made):
            if kind == "ns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self._made.clear()
        self._cuts.clear()

    def __enter__(self) -> NetnsLab:
        return self.setup()

    def __exit__(self, *exc: Any) -> None:
        self.teardown()

    # --- processes ---

    def argv(self, i: int, argv: list[str]) -> list[str]:
        """`argv` run inside host i's namespace."""
        return ["ip", "netns", "exec", self.ns(i), *argv]

    def popen(self, i: int, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(self.argv(i, argv), **kwargs)

    # --- faults ---

    def cut(self, i: int, j: int) -> None:
        """Drop everything between hosts i and j, both ways; both keep every other path."""
        if (min(i, j), max(i, j)) in self._cuts:
            return
        _ip("-n", self.ns(i), "route", "add", "blackhole", f"{self.addr(j)}/32")
        _ip("-n", self.ns(j), "route", "add", "blackhole", f"{self.addr(i)}/32")
        self._cuts.add((min(i, j), max(i, j)))

    def heal(self, i: int, j: int) -> None:
        if (min(i, j), max(i, j)) not in self._cuts:
            return
        _ip("-n", self.ns(i), "route", "del", "blackhole", f"{self.addr(j)}/32", check=False)
        _ip("-n", self.ns(j), "route", "del", "blackhole", f"{self.addr(i)}/32", check=False)
        self._cuts.discard((min(i, j), max(i, j)))

    def heal_all(self) -> None:
        for i, j in list(self._cuts):
            self.heal(i, j)

    def isolate(self, i: int) -> None:
        """Host i loses the network: nothing it sends reaches another host or the root namespace (clients,
        through the bridge), nothing they send reaches it. Its connections hang, as behind a dead switch port:
        no reset, no error, only timeouts. Undo with `rejoin(i)`."""
        for j in range(1, self.hosts + 1):
            if j != i:
                self.cut(i, j)
        _ip("-n", self.ns(i), "route", "add", "blackhole", f"{self.gateway}/32")
        _ip("route", "add", "blackhole", f"{self.addr(i)}/32")  # the root namespace's own route to host i only
        self._isolated.add(i)

    def rejoin(self, i: int) -> None:
        self._isolated.discard(i)
        _ip("route", "del", "blackhole", f"{self.addr(i)}/32", check=False)
        _ip("-n", self.ns(i), "route", "del", "blackhole", f"{self.gateway}/32", check=False)
        for j in range(1, self.hosts + 1):
            if j != i:
                self.heal(i, j)
