"""librdkafka's lines about transactions the roles handle come out as WARNING, whatever level
librdkafka gave them; other lines, and other fatal errors, keep theirs."""

from __future__ import annotations

import logging

import pytest

from runtime import LIBRDKAFKA_LOG


def _line(level: int, facility: str, text: str) -> logging.LogRecord:
    # As confluent_kafka hands a librdkafka line to a client's logger.
    return LIBRDKAFKA_LOG.makeRecord(
        LIBRDKAFKA_LOG.name,
        level,
        __file__,
        0,
        "%s [%s] %s",
        (facility, "rdkafka#producer-5", text),
        None,
    )


@pytest.mark.parametrize(
    ("level", "facility", "text", "seen"),
    [
        (
            logging.CRITICAL,
            "FATAL",
            "Fatal error: Local: This instance has been fenced by a newer instance: ProduceRequest",
            logging.WARNING,
        ),
        (
            logging.CRITICAL,
            "TXNERR",
            "Fatal transaction error: ProduceRequest failed: transactional producer fenced by "
            "newer producer instance",
            logging.WARNING,
        ),
        (
            logging.ERROR,
            "TXNERR",
            "Current transaction failed in state InTransaction: Failed to commit offsets",
            logging.WARNING,
        ),
        (
            logging.ERROR,
            "ADDOFFSETS",
            "TxnCoordinator/1: Failed to add offsets to transaction on broker TxnCoordinator/1: "
            "Local: Timed out",
            logging.WARNING,
        ),
        # Not a fencing: a fatal error the role exits on keeps its level.
        (
            logging.CRITICAL,
            "FATAL",
            "Fatal error: Local: Inconsistent state: Unable to reconstruct MessageSet",
            logging.CRITICAL,
        ),
        (logging.INFO, "TXNERR", "an informational line", logging.INFO),
        (logging.ERROR, "SSL", "SSL handshake failed: certificate verify failed", logging.ERROR),
    ],
)
def test_handled_transaction_lines_are_warnings(caplog, level, facility, text, seen):
    with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.name):
        LIBRDKAFKA_LOG.handle(_line(level, facility, text))
    (record,) = [r for r in caplog.records if r.name == LIBRDKAFKA_LOG.name]
    assert record.levelno == seen
    assert record.getMessage() == f"{facility} [rdkafka#producer-5] {text}"
