"""What stage 1 names when a broker refuses it, from the table of grants (runtime/grants.py)."""

from __future__ import annotations

from replicator.access import source_reads, staging_writes


def test_a_refused_source_read_names_the_group_and_the_topic() -> None:
    assert source_reads("exactly.dr.replicator", "orders") == {
        "GROUP": ("READ", "exactly.dr.replicator"),
        "TOPIC": ("READ", "orders"),
    }
    assert source_reads("g", None)["TOPIC"] == ("READ", "(a source topic)")


def test_a_refused_staging_write_names_staging() -> None:
    assert staging_writes("__exactly.dr.staging") == {"TOPIC": ("WRITE", "__exactly.dr.staging")}
