"""Free TCP ports on this machine, for the local clusters, the roles the demo and the tests start,
and the benches. A port free now can be taken before it is bound; callers bind soon after."""

from __future__ import annotations

import random
import socket
from collections.abc import Collection

# Below both localkafka's broker ports (20000-32000) and the ephemeral range (32768+): a port a
# broker or an outgoing socket takes while a role restarts would make the role's restart fail.
ROLE_PORTS = (15000, 20000)
# The brokers' and controllers' ports, below the Linux ephemeral range (32768+): a fixed port up
# there could be taken by some client's outgoing socket while the broker is down, and a restart
# on the same port would then fail.
CLUSTER_PORTS = (20000, 32000)


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    """Whether ``port`` binds on ``host`` now (0.0.0.0: where the roles serve /metrics)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port the kernel picks from the ephemeral range: for a server started at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def free_ports(
    count: int,
    between: tuple[int, int] = ROLE_PORTS,
    host: str = "0.0.0.0",
    *,
    exclude: Collection[int] = (),
) -> list[int]:
    """``count`` distinct ports in ``between`` that are free now and not in ``exclude`` (ports
    promised to something not started yet); each can be kept by one process across its
    restarts (a kernel-picked ephemeral port could be taken meanwhile)."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(*between)
        if port not in ports and port not in exclude and port_is_free(port, host):
            ports.append(port)
    return ports


def free_port_block(count: int) -> int:
    """The first of ``count`` consecutive ports that are free now: a process's metrics port and
    its roles' on the ports after it (``exactly run``)."""
    while True:
        first = random.randrange(ROLE_PORTS[0], ROLE_PORTS[1] - count)
        if all(port_is_free(first + i) for i in range(count)):
            return first
