"""A class-data-sharing archive of the classes a Kafka node loads, made once per Kafka version
and mapped by every node started afterwards (``-XX:SharedArchiveFile``): the JVM then skips
reading, parsing and verifying thousands of classes at each start.

Starts are what the crash tests, the rolling restarts and the demo wait for. Measured here
(Kafka 4.3.1, Java 17, a one-broker cluster started alone, two runs each): the broker's start
took 8.6-10.2 s and 8.6-9.8 CPU seconds without the archive, 5.5-6.1 s and 5.0-6.4 CPU seconds
with it; the controller's CPU 6.7-8.6 s against 3.9-4.9 s. On two cores shared with five other
JVMs, a node's restart waits for CPU time, so the saving counts there most.

The archive is made by starting a throw-away one-broker cluster whose broker dumps the classes
it loaded when it exits (``-XX:ArchiveClassesAtExit``, Java 13 or later), then stopping it:
about 20 s, once, from ``exactly kafka install`` (``make install``). Without it nodes start as
before; a JVM that cannot use it (another Java build, changed jars) ignores it silently.
"""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

from localkafka.cluster import LocalCluster
from localkafka.install import KafkaDistribution, ensure_kafka
from runtime.cache import cache_root

_START_TIMEOUT_S = 120.0


def ensure_class_archive(distribution: KafkaDistribution | None = None) -> Path | None:
    """The distribution's class archive, made first if it is not there; None if the JVM wrote
    none (a Java before 13)."""
    distribution = distribution or ensure_kafka()
    archive = distribution.class_archive
    if archive.is_file():
        return archive
    with open(cache_root() / ".class-archive.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.is_file():
            _make(distribution, archive)
    return archive if archive.is_file() else None


def _make(distribution: KafkaDistribution, archive: Path) -> None:
    with tempfile.TemporaryDirectory(prefix=".class-archive-", dir=archive.parent) as tmp:
        cluster = LocalCluster.create(Path(tmp) / "cluster", "class-archive", distribution)
        dump = Path(tmp) / "classes.jsa"
        # The broker loads what a controller does and more (it runs a KRaft client too).
        cluster.broker.dump_classes_to = dump
        try:
            cluster.start(_START_TIMEOUT_S, tie_to_parent=True)
        finally:
            cluster.stop()  # a clean exit: the JVM writes the archive then
        if dump.is_file():
            dump.rename(archive)  # whole or not at all: a node never maps half an archive
