"""Real Apache Kafka clusters as local processes from the official jars, and the local-run kit:
a role as a child process (``RoleProcess``), free ports, die-with-parent, log tails.

For the demo, ``exactly run``, the tests, benchmarks and people trying kafka-exactly by hand: no
Docker needed.
"""

from localkafka.classarchive import ensure_class_archive
from localkafka.cluster import LocalCluster
from localkafka.errors import (
    ClusterStartError,
    ClusterStateError,
    KafkaInstallError,
    LocalKafkaError,
)
from localkafka.install import KAFKA_VERSION, KafkaDistribution, ensure_kafka
from localkafka.layout import ClusterInfo
from localkafka.ports import ROLE_PORTS, free_port, free_port_block, free_ports, port_is_free
from localkafka.processes import (
    RoleProcess,
    die_with_parent,
    log_tail,
    peak_rss_mib,
    process_tree,
)
from localkafka.readiness import wait_until_ready
from localkafka.registry import DEFAULT_NAMES, ClusterRegistry, default_state_dir, start_all
from runtime.cache import cache_root

__all__ = [
    "DEFAULT_NAMES",
    "KAFKA_VERSION",
    "ROLE_PORTS",
    "ClusterInfo",
    "ClusterRegistry",
    "ClusterStartError",
    "ClusterStateError",
    "KafkaDistribution",
    "KafkaInstallError",
    "LocalCluster",
    "LocalKafkaError",
    "RoleProcess",
    "cache_root",
    "default_state_dir",
    "die_with_parent",
    "ensure_class_archive",
    "ensure_kafka",
    "free_port",
    "free_port_block",
    "free_ports",
    "log_tail",
    "peak_rss_mib",
    "port_is_free",
    "process_tree",
    "start_all",
    "wait_until_ready",
]
