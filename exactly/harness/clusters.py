"""The demo's two Kafka clusters, fresh for every run, in a directory of their own:

    <LOCALKAFKA_STATE_DIR>/demo/demo.lock       held while a demo runs
    <LOCALKAFKA_STATE_DIR>/demo/demo-source/    the source cluster (localkafka layout)
    <LOCALKAFKA_STATE_DIR>/demo/demo-target/    the target cluster

`exactly kafka up|down|status` look at <state dir>/<name> only, and a test session keeps its
clusters under pytest's temporary directory: the demo never touches either, nor they the demo's.
Fresh clusters every run (formatting costs about 3 s) so that the verdict compares this run's
records only, and the stage-2 state on disk always belongs to the clusters it describes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from exactly.harness.errors import DemoError
from localkafka import ClusterRegistry, LocalCluster, default_state_dir, ensure_kafka, start_all

SOURCE_NAME = "demo-source"
TARGET_NAME = "demo-target"
_LOCK_NAME = "demo.lock"


def demo_directory() -> Path:
    """<LOCALKAFKA_STATE_DIR>/demo: everything a demo run writes."""
    return default_state_dir() / "demo"


class DemoLock:
    """Only one demo per directory: a second one would delete the first one's clusters."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / _LOCK_NAME
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            lock.close()
            raise DemoError(
                f"another `exactly demo` (pid {holder}) is running with {self.path.parent}; "
                "wait for it, or set LOCALKAFKA_STATE_DIR to another directory"
            ) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._file = lock

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None


class DemoClusters:
    """demo-source and demo-target: created fresh by start(), stopped (data kept) by stop()."""

    def __init__(
        self,
        directory: Path,
        *,
        proxied: Sequence[str] = (),
        secure: bool = False,
        nodes: int = 1,
    ) -> None:
        self.directory = directory
        self._proxied = tuple(proxied)  # listeners reached through a proxy (chaos/network.py)
        self._secure = secure  # secured listeners beside PLAINTEXT (localkafka/security.py)
        self._nodes = nodes  # combined broker+controller nodes per cluster (localkafka/cluster.py)
        self._registry = ClusterRegistry(directory)
        self._clusters: list[LocalCluster] = []

    @property
    def source(self) -> LocalCluster:
        return self._named(SOURCE_NAME)

    @property
    def target(self) -> LocalCluster:
        return self._named(TARGET_NAME)

    def start(self) -> None:
        """Delete the last run's clusters, create both anew and wait until both are ready.

        Raises localkafka's errors (jars not resolvable, java missing, a port in use, a broker
        that never became ready), each naming the problem.
        """
        ensure_kafka()  # before the clock of the first start: the first run downloads the jars
        for name in (SOURCE_NAME, TARGET_NAME):
            self._remove_last_run(name)
        for name in (SOURCE_NAME, TARGET_NAME):
            self._clusters.append(
                self._registry.get_or_create(
                    name, proxied=self._proxied, secure=self._secure, nodes=self._nodes
                )
            )
        # Tied to this process: a demo killed with SIGKILL leaves no broker behind either.
        start_all(self._clusters, tie_to_parent=True)

    def stop(self) -> None:
        """SIGTERM both brokers and controllers (SIGKILL after a timeout); the data stays for
        post-mortems until the next run."""
        for cluster in reversed(self._clusters):
            cluster.stop()

    def running(self) -> list[str]:
        """Names of the clusters with a JVM (broker or controller) still running."""
        return [
            cluster.name
            for cluster in self._clusters
            if any(node.is_running() for node in cluster.nodes.values())
            or (cluster.controller is not None and cluster.controller.is_running())
        ]

    def _named(self, name: str) -> LocalCluster:
        for cluster in self._clusters:
            if cluster.name == name:
                return cluster
        raise DemoError(f"cluster {name} has not been started")

    def _remove_last_run(self, name: str) -> None:
        directory = self.directory / name
        if (directory / "cluster.json").is_file():
            # destroy() stops only JVMs whose command line names this directory's config.
            LocalCluster.open(directory).destroy()
        else:
            shutil.rmtree(directory, ignore_errors=True)  # a creation that was interrupted
