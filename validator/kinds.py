"""What the audit says about each record: the kinds of findings, shared by the Spark plans, the
report and its renderings."""

from __future__ import annotations

PROVENANCE = "provenance"
CONTENT = "content"

MATCHED = "matched"
DISCREPANCY_KINDS = (
    "missing",
    "duplicated",
    "out_of_order",
    "key_mismatch",
    "value_mismatch",
    "headers_mismatch",
    "timestamp_mismatch",
    "wrong_partition",
    "unexpected",
)
IN_FLIGHT = "in_flight"
# Not findings: one row per record read on each side, counted in the same pass as the findings
# (the partition of a DESTINATION_RECORD row is the destination partition).
SOURCE_RECORD = "_source_record"
DESTINATION_RECORD = "_destination_record"
RECORD_COUNTS = (SOURCE_RECORD, DESTINATION_RECORD)
# Records outside the checked range: not discrepancies, but counted and shown, never dropped.
OUTSIDE_KINDS = (
    "source_retention",  # the destination still holds what the source's retention deleted
    "destination_retention",  # the destination's retention deleted what the source still holds
    "compacted",  # the source compacted the record away after it was replicated
    "other_origin",  # written by a flow from another source cluster (aggregation)
    "before_range",  # names a source offset before the checked range (--since)
    "after_range",  # names a source offset past the range's end (--until, or the snapshot)
)
