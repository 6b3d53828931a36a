"""A cluster's properties reach every client of ours on it: librdkafka's warning that a producer
ignores a consumer's property (or the other way round) is DEBUG, not a WARNING on every start;
other configuration warnings keep their level."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, Producer

from runtime import LIBRDKAFKA_LOG

# Nothing listens there: the client is made, warns about its configuration, and is closed.
_NOWHERE = "127.0.0.1:9"


def _confwarn_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == LIBRDKAFKA_LOG.name and "CONFWARN" in r.getMessage()
    ]


def _producer_with(config: dict[str, object]) -> None:
    producer = Producer({"bootstrap.servers": _NOWHERE, "logger": LIBRDKAFKA_LOG, **config})
    producer.poll(0.2)  # the creation's lines are served by poll
    producer.flush(0)


def _consumer_with(config: dict[str, object]) -> None:
    consumer = Consumer(
        {"bootstrap.servers": _NOWHERE, "group.id": "g", "logger": LIBRDKAFKA_LOG, **config}
    )
    consumer.poll(0.2)
    consumer.close()


def test_a_consumer_property_given_to_a_producer_is_not_a_warning(caplog):
    caplog.set_level(logging.INFO, logger=LIBRDKAFKA_LOG.name)
    _producer_with({"group.protocol": "consumer", "fetch.wait.max.ms": 10})
    assert _confwarn_lines(caplog) == []


def test_a_producer_property_given_to_a_consumer_is_not_a_warning(caplog):
    caplog.set_level(logging.INFO, logger=LIBRDKAFKA_LOG.name)
    _consumer_with({"acks": "all"})
    assert _confwarn_lines(caplog) == []


def test_at_debug_it_is_kept_and_other_configuration_warnings_keep_their_level(caplog):
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.name)
    # Beside a consumer's property, a deprecated one of the producer's own: librdkafka warns.
    _producer_with({"group.protocol": "consumer", "produce.offset.report": True})
    _consumer_with({"acks": "all"})
    lines = _confwarn_lines(caplog)
    assert [level for level, text in lines if "group.protocol" in text] == ["DEBUG"]
    assert [level for level, text in lines if "acks" in text] == ["DEBUG"]
    assert any(level == "WARNING" for level, text in lines if "group.protocol" not in text), lines
