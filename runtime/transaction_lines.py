"""librdkafka's lines about a transaction that failed, which the roles handle and say in lines of
their own: a WARNING, not an ERROR or a CRITICAL.

librdkafka logs at ERROR a transaction that failed and a transactional request it will retry
(TXNERR "Current transaction failed ...", ADDOFFSETS "Failed to add offsets to transaction ...")
and at CRITICAL a producer fenced by a newer one of its ``transactional.id`` (TXNERR "Fatal
transaction error: ... fenced", FATAL "This instance has been fenced by a newer instance"). Stage 2
meets each and says what it does: it aborts and rewinds (``transaction aborted``), retries
(``retrying``), replaces a hung producer, whose fencing by its replacement is the point
(``transactional producer hung; replacing it``), and stops on a live twin at ERROR (``fenced:
another live instance ...``). In a rolling restart of a three-node target each node's restart
wrote such lines, CRITICAL among them: log-based alerting would have paged on maintenance.

Any other line, and any other fatal error, keeps librdkafka's level.
"""

from __future__ import annotations

import logging

from runtime.broker_reach import librdkafka_line

# Facilities of transactional failures the roles handle whatever the error.
_HANDLED_FACILITIES = frozenset({"TXNERR", "ADDOFFSETS"})
# A fatal error that is the fencing stage 2 causes itself, or reports as a twin.
_FENCED = "fenced by a newer instance"


def demote_handled_transaction_lines(record: logging.LogRecord) -> bool:
    """A filter of ``LIBRDKAFKA_LOG``: lowers the lines above to WARNING; passes every line."""
    line = librdkafka_line(record)
    if line is None:
        return True
    facility, text = line
    handled = facility in _HANDLED_FACILITIES or (facility == "FATAL" and _FENCED in text)
    if handled and record.levelno > logging.WARNING:
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
    return True
