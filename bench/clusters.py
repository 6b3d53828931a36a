"""The throw-away local clusters every bench runs on (a source and a target, unless it asks for
others): made in a temporary directory, started together, stopped and deleted when the bench
ends (or dies: tie_to_parent)."""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from localkafka import LocalCluster, start_all


@contextmanager
def bench_clusters(
    prefix: str, nodes: int = 1, names: Sequence[str] = ("source", "target")
) -> Iterator[tuple[Path, list[LocalCluster]]]:
    """The bench's scratch directory and its started clusters of ``nodes`` nodes each, one per
    name in ``names`` (by default source then target), in that order."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        base = Path(tmp)
        clusters: list[LocalCluster] = []
        for name in names:
            taken = [port for cluster in clusters for port in cluster.ports]
            clusters.append(
                LocalCluster.create(base / name, name, nodes=nodes, reserved_ports=taken)
            )
        start_all(clusters, tie_to_parent=True)
        try:
            yield base, clusters
        finally:
            gc.collect()  # clients of ours left in reference cycles: gone before their brokers
            for cluster in clusters:
                cluster.stop()
