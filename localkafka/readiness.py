"""When is a Kafka cluster ready for kafka-exactly: a metadata request answers AND the
transaction coordinator is loaded.

Both matter: right after start a broker answers metadata while `__transaction_state` is still
being created or loaded, and the first `init_transactions()` then fails with "coordinator load in
progress" (docs/design.md §9). Waiting for a real `init_transactions()` to succeed is the only check
that cannot be fooled. The same check serves local processes and containers alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from localkafka.errors import ClusterStartError
from runtime.kafka_errors import kafka_error_of

READINESS_PROBE_TRANSACTIONAL_ID = "localkafka-readiness-probe"
_POLL_INTERVAL_S = 0.2
QUIET_CLIENT_LOG = logging.getLogger("localkafka.client")
QUIET_CLIENT_LOG.addHandler(logging.NullHandler())
QUIET_CLIENT_LOG.propagate = False


def _always_alive() -> bool:
    return True


def wait_until_ready(
    bootstrap_servers: str,
    timeout_s: float,
    is_alive: Callable[[], bool] = _always_alive,
) -> str:
    """Block until the cluster answers metadata and commits transactions; return its cluster id.

    `is_alive` lets the caller stop waiting at once when the broker process has died.
    Raises ClusterStartError when the deadline passes or the process is gone.
    """
    deadline = time.monotonic() + timeout_s
    # librdkafka reports every refused connection while the broker boots; those are expected
    # here, so its log goes to a silent logger instead of the terminal.
    base = {"bootstrap.servers": bootstrap_servers, "logger": QUIET_CLIENT_LOG}
    admin = AdminClient(dict(base))
    cluster_id = _await_metadata(admin, deadline, is_alive, bootstrap_servers)
    producer = Producer(
        {
            **base,
            "transactional.id": READINESS_PROBE_TRANSACTIONAL_ID,
            "transaction.timeout.ms": 10000,
        }
    )
    try:
        while True:
            _check(deadline, is_alive, bootstrap_servers, "the transaction coordinator to load")
            try:
                producer.init_transactions(max(0.5, min(5.0, deadline - time.monotonic())))
                return cluster_id
            except KafkaException as exc:
                error = kafka_error_of(exc)
                if error.fatal():
                    raise ClusterStartError(
                        f"{bootstrap_servers}: init_transactions failed: {error.str()}"
                    ) from exc
                time.sleep(_POLL_INTERVAL_S)
    finally:
        producer.flush(0)


def _await_metadata(
    admin: AdminClient, deadline: float, is_alive: Callable[[], bool], bootstrap_servers: str
) -> str:
    while True:
        _check(deadline, is_alive, bootstrap_servers, "a metadata answer")
        try:
            metadata = admin.list_topics(timeout=1.0)
        except KafkaException:
            time.sleep(_POLL_INTERVAL_S)
            continue
        if metadata.brokers and metadata.cluster_id:
            return str(metadata.cluster_id)
        time.sleep(_POLL_INTERVAL_S)


def _check(
    deadline: float, is_alive: Callable[[], bool], bootstrap_servers: str, what: str
) -> None:
    if not is_alive():
        raise ClusterStartError(
            f"{bootstrap_servers}: the broker process exited while waiting for {what}"
        )
    if time.monotonic() > deadline:
        raise ClusterStartError(f"{bootstrap_servers}: timed out waiting for {what}")
