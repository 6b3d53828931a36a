"""What stage 2 names when a broker refuses it, from the table of grants (runtime/grants.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from deduplicator.access import needs, raise_unacknowledged
from deduplicator.errors import DeduplicatorError, TransactionFailedError
from runtime.names import FlowNames

NAMES = FlowNames("dr")


def test_a_refused_transaction_names_the_id_the_group_and_every_topic_written() -> None:
    wanted = needs(NAMES, "tx-1", {"orders", "audit"}, NAMES.changelog)
    assert wanted == {
        "TRANSACTIONAL_ID": ("WRITE", "tx-1"),
        "GROUP": ("READ", NAMES.deduplicator_group),
        "TOPIC": ("WRITE", " or ".join(sorted({"orders", "audit", NAMES.changelog}))),
    }
    assert list(wanted) == ["TRANSACTIONAL_ID", "GROUP", "TOPIC"]


def test_a_refused_read_names_staging() -> None:
    wanted = needs(NAMES, "tx-1", {"orders"}, NAMES.changelog, writing=False)
    assert wanted["TOPIC"] == ("READ", NAMES.staging)
    assert wanted["GROUP"] == ("READ", NAMES.deduplicator_group)


def test_a_changelog_record_refused_for_good_stops_stage_2_naming_it() -> None:
    """The changelog's records are the only ones with a delivery callback; one refused for its
    size would fail every transaction again, so stage 2 stops rather than abort for ever."""
    refused = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
    wanted = needs(NAMES, "tx-1", {"orders"}, NAMES.changelog)
    with pytest.raises(DeduplicatorError, match="refuses a changelog record for good"):
        raise_unacknowledged(Producer({}), [refused], wanted)


def test_a_changelog_record_that_timed_out_is_a_transaction_to_abort() -> None:
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")
    wanted = needs(NAMES, "tx-1", {"orders"}, NAMES.changelog)
    with pytest.raises(TransactionFailedError):
        raise_unacknowledged(Producer({}), [timed_out], wanted)
