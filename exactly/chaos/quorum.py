"""Which node of a cluster of several combined nodes is the active KRaft controller, read from
the nodes' own logs.

Each node's QuorumController logs "Becoming the active controller at epoch E" when it wins an
election, and epochs only grow: of the running nodes, the one whose last such line has the
highest epoch is the active controller. A node that won and died keeps its line, but a later
winner's epoch is higher. The answer can be a second stale (an election under way, the winner
not yet logged): the fault then kills a node that is not the controller, and says so.

Reading the logs costs milliseconds (the last line of each, found from the end). The
alternative, Kafka's own `MetadataQuorumCommand describe --status` through the cluster's
classpath, answered in 2.8-3.1 s of a JVM start on this 2-core machine beside two clusters:
too long to hold the fault loop at every controller fault.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterable
from pathlib import Path

BECOMING_ACTIVE = b"Becoming the active controller at epoch "
_EPOCH = re.compile(rb"\d+")


def active_controller(logs: Iterable[tuple[int, Path]]) -> int | None:
    """Of (node id, its log) for the running nodes, the node that became the active controller
    at the highest epoch; None when no log says any node did."""
    best: tuple[int, int] | None = None  # (epoch, node id)
    for node, log in logs:
        epoch = last_active_epoch(log)
        if epoch is not None and (best is None or epoch > best[0]):
            best = (epoch, node)
    return None if best is None else best[1]


def last_active_epoch(log: Path) -> int | None:
    """The epoch of the last "Becoming the active controller" line in ``log``, if any."""
    try:
        with log.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as text:
            at = text.rfind(BECOMING_ACTIVE)
            if at < 0:
                return None
            start = at + len(BECOMING_ACTIVE)
            match = _EPOCH.match(text[start : start + 20])
    except (FileNotFoundError, ValueError):  # ValueError: an empty file cannot be mapped
        return None
    return int(match.group()) if match else None
