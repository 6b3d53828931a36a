"""Stage 1's records and bytes counters count what staging acknowledged, nothing else: an
envelope refused, lost with its session or never produced is read again and copied later (a
dashboard summing ``exactly_replicator_records_total`` showed records copied that were not).
The producer is a fake whose delivery reports the test sends; the session and metrics are
real."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from replicator import session as session_module
from replicator.lanes import Lane
from replicator.metrics import ReplicatorMetrics
from replicator.session import StagingSession
from replicator.topics import StagingTopic
from runtime import load_settings

Report = Any  # the on_delivery callback the session gave produce()


class Producer:
    """Takes envelopes and keeps their delivery callbacks, for the test to answer."""

    def __init__(self, _config: dict[str, Any]) -> None:
        self.reports: list[Report] = []

    def produce(self, _topic: str, **record: Any) -> None:
        self.reports.append(record["on_delivery"])

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0

    def purge(self) -> None:
        pass

    def __len__(self) -> int:
        return 0


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> StagingSession:
    monkeypatch.setattr(session_module, "Producer", Producer)
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "REPLICATION_TOPICS_INCLUDE": "orders",
            "REPLICATION_FLOW": "records-counter-test",
        }
    )
    staging = StagingTopic("staging", 12, 1 << 20, {})
    return StagingSession(settings, staging, ReplicatorMetrics(), {})


def _copied(session: StagingSession) -> tuple[float | None, float | None]:
    registry = session.metrics.registry
    labels = {"topic": "orders"}
    return (
        registry.get_sample_value("exactly_replicator_records_total", labels),
        registry.get_sample_value("exactly_replicator_bytes_total", labels),
    )


def test_only_envelopes_staging_acknowledged_count_as_copied(session: StagingSession) -> None:
    lane = Lane("orders", 3, 1, b"\x01" * 16, committable=0, committed=-1)
    session.send(lane, b"first", 2, 2, 3, 300)  # records 0-2
    session.send(lane, b"second", 4, 4, 2, 200)  # records 3-4
    first, second = session.producer.reports
    assert _copied(session) == (None, None)  # sent is not copied

    first(None, None)
    second(KafkaError(KafkaError._MSG_TIMED_OUT), None)  # ends the session (invariant 2)
    assert _copied(session) == (3, 300)
    assert lane.committable == 3

    session.send(lane, b"third", 6, 6, 2, 200)  # records 5-6, in the failed session
    session.drop()  # the session ends: records 3-6 are read again
    session.producer.reports[-1](None, None)  # the dropped producer's late acknowledgement
    assert _copied(session) == (3, 300)
    assert lane.committable == 3
