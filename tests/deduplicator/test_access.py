"""What stage 2 names when a broker refuses it, from the table of grants (runtime/grants.py)."""

from __future__ import annotations

from deduplicator.access import needs
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
