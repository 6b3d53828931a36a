"""Errors of localkafka.

LocalKafkaError
├── KafkaInstallError      the Kafka jars could not be resolved with Maven
├── ClusterStateError      a cluster directory is missing, foreign or in the wrong state
└── ClusterStartError      the broker process died or did not become ready in time
"""

from __future__ import annotations


class LocalKafkaError(Exception):
    """Root of every error localkafka raises."""


class KafkaInstallError(LocalKafkaError):
    """Maven could not resolve the Kafka distribution."""


class ClusterStateError(LocalKafkaError):
    """The cluster directory does not hold what the operation needs."""


class ClusterStartError(LocalKafkaError):
    """The broker exited or did not become ready; the message ends with its log tail."""
