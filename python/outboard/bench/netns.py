"""Two network namespaces joined by a veth pair: a two-host run on one machine (root only).

Processes in the namespaces still share the IPC namespace, so UCX could pick shared memory
between them; runs across the pair therefore set UCX_TLS=tcp,self, and the lanes in use are
recorded to show it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from types import TracebackType

#: Addresses on the veth pair (a /24 unlikely to clash with a real network).
SERVER_IP, CLIENT_IP = "10.231.77.1", "10.231.77.2"


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces (run as root, or skip the netns transport)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    return None


class VethPair:
    """``with VethPair() as pair:`` run the server under ``pair.server`` and the client under
    ``pair.client`` (command prefixes); both namespaces go away on exit."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.names = (f"ob-srv-{tag}", f"ob-cli-{tag}")
        self.links = (f"obs{tag}", f"obc{tag}")
        self.server = ["ip", "netns", "exec", self.names[0]]
        self.client = ["ip", "netns", "exec", self.names[1]]

    def __enter__(self) -> VethPair:
        srv, cli = self.names
        ls, lc = self.links
        steps = [
            ["ip", "netns", "add", srv], ["ip", "netns", "add", cli],
            ["ip", "link", "add", ls, "type", "veth", "peer", "name", lc],
            ["ip", "link", "set", ls, "netns", srv], ["ip", "link", "set", lc, "netns", cli],
            ["ip", "-n", srv, "addr", "add", f"{SERVER_IP}/24", "dev", ls],
            ["ip", "-n", cli, "addr", "add", f"{CLIENT_IP}/24", "dev", lc],
            ["ip", "-n", srv, "link", "set", ls, "up"], ["ip", "-n", cli, "link", "set", lc, "up"],
            ["ip", "-n", srv, "link", "set", "lo", "up"], ["ip", "-n", cli, "link", "set", "lo", "up"],
        ]
        try:
            for step in steps:
                r = subprocess.run(step, capture_output=True, text=True, timeout=10)
                if r.returncode != 0:
                    raise OSError(f"`{' '.join(step)}` failed: {r.stderr.strip()}")
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._remove()

    def _remove(self) -> None:
        for name in self.names:  # deleting a namespace deletes its end of the veth pair
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
