"""Named local clusters under one state directory, so that `exactly kafka down` finds what
`exactly kafka up` started, also from another shell.

    <state dir>/<name>/       one LocalCluster each (see cluster.py)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from localkafka.cluster import READY_TIMEOUT_S, LocalCluster
from localkafka.errors import ClusterStateError

STATE_DIR_VARIABLE = "LOCALKAFKA_STATE_DIR"
DEFAULT_NAMES = ("source", "target")


def default_state_dir() -> Path:
    configured = os.environ.get(STATE_DIR_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "kafka-exactly" / "clusters"


class ClusterRegistry:
    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = state_dir or default_state_dir()

    def names(self) -> list[str]:
        if not self.state_dir.is_dir():
            return []
        return sorted(p.name for p in self.state_dir.iterdir() if (p / "cluster.json").is_file())

    def get(self, name: str) -> LocalCluster:
        return LocalCluster.open(self._directory(name))

    def get_or_create(
        self,
        name: str,
        *,
        proxied: Sequence[str] = (),
        secure: bool | None = None,
        nodes: int | None = None,
    ) -> LocalCluster:
        """The cluster ``name``; made with the ``proxied`` listeners (and the secured ones, if
        ``secure``; ``nodes`` nodes, one if None) if it does not exist yet. An existing cluster
        keeps the listeners and nodes it was made with; asked for with ``secure`` True or False,
        or with a number of nodes, it must match."""
        directory = self._directory(name)
        if (directory / "cluster.json").is_file():
            cluster = LocalCluster.open(directory)
            if secure is not None and cluster.secure != secure:
                made = "with" if cluster.secure else "without"
                raise ClusterStateError(
                    f"cluster {name!r} was made {made} secured listeners; remove it first "
                    f"(exactly kafka down --purge {name})"
                )
            if nodes is not None and len(cluster.nodes) != nodes:
                raise ClusterStateError(
                    f"cluster {name!r} was made with {len(cluster.nodes)} node(s), not {nodes}; "
                    f"remove it first (exactly kafka down --purge {name})"
                )
            return cluster
        # The other clusters' ports may be unbound now (stopped, or not started yet): they
        # are theirs all the same.
        taken = [port for other in self.names() for port in self.get(other).ports]
        return LocalCluster.create(
            directory,
            name,
            proxied=proxied,
            reserved_ports=taken,
            secure=bool(secure),
            nodes=nodes or 1,
        )

    def _directory(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ClusterStateError(f"bad cluster name {name!r}")
        return self.state_dir / name


def start_all(
    clusters: Iterable[LocalCluster],
    ready_timeout_s: float = READY_TIMEOUT_S,
    *,
    tie_to_parent: bool = False,
) -> None:
    """Launch every cluster that is not running, then wait for each: the JVMs boot side by side."""
    launched = []
    try:
        for cluster in clusters:
            if not cluster.is_running():
                cluster.launch(tie_to_parent=tie_to_parent)
                launched.append(cluster)
        for cluster in launched:
            cluster.wait_ready(ready_timeout_s)
    except BaseException:
        for cluster in launched:
            cluster.abort()
        raise
