"""Errors of localkafka (the whole tree: runtime/errors.py)."""

from __future__ import annotations

from runtime.errors import ExactlyError


class LocalKafkaError(ExactlyError):
    """Root of every error localkafka raises."""


class KafkaInstallError(LocalKafkaError):
    """Maven could not resolve the Kafka distribution."""


class ClusterStateError(LocalKafkaError):
    """The cluster directory does not hold what the operation needs."""


class ClusterStartError(LocalKafkaError):
    """The broker exited or did not become ready; the message ends with its log tail."""
