"""Real Apache Kafka clusters as local processes from the official jars.

For the demo, the tests, benchmarks and people trying kafka-exactly by hand: no Docker needed.
"""

from localkafka.cluster import ClusterInfo, LocalCluster
from localkafka.errors import (
    ClusterStartError,
    ClusterStateError,
    KafkaInstallError,
    LocalKafkaError,
)
from localkafka.install import KAFKA_VERSION, KafkaDistribution, ensure_kafka
from localkafka.readiness import wait_until_ready
from localkafka.registry import DEFAULT_NAMES, ClusterRegistry, default_state_dir, start_all

__all__ = [
    "DEFAULT_NAMES",
    "KAFKA_VERSION",
    "ClusterInfo",
    "ClusterRegistry",
    "ClusterStartError",
    "ClusterStateError",
    "KafkaDistribution",
    "KafkaInstallError",
    "LocalCluster",
    "LocalKafkaError",
    "default_state_dir",
    "ensure_kafka",
    "start_all",
    "wait_until_ready",
]
