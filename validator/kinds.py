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
    # A copy of a source record that carries exactly.origin (itself a copy, see LOOPED): the
    # flow copied a copy, which is how replication loops start in an active-active pair.
    "loop_copied",
)
IN_FLIGHT = "in_flight"
# Records that no copy is expected of (issue 19, active-active): counted and shown, never
# discrepancies. "Carries exactly.origin": a header of that name with a value, well-formed or not.
LOOPED = "looped"  # a source record carrying exactly.origin, so a copy itself: stage 1 skips it
LOCAL = "local"  # --two-way: a destination record without exactly.origin, produced there
NOT_COPIED_KINDS = (LOOPED, LOCAL)
# Not findings: one row per record read on each side, counted in the same pass as the findings
# (the partition of a DESTINATION_RECORD row is the destination partition).
SOURCE_RECORD = "_source_record"
DESTINATION_RECORD = "_destination_record"
RECORD_COUNTS = (SOURCE_RECORD, DESTINATION_RECORD)
# Records outside the checked range: not discrepancies, but counted and shown, never dropped.
OUTSIDE_KINDS = (
    "source_retention",  # the destination still holds what the source's retention deleted
    "destination_retention",  # the destination's retention deleted what the source still holds
    # The source compacted the record away after it was replicated, or the destination's cleaner
    # removed it there (a later record of its key was copied).
    "compacted",
    "other_origin",  # written by a flow from another source cluster (aggregation)
    "before_range",  # names a source offset before the checked range (--since)
    "after_range",  # names a source offset past the range's end (--until, or the snapshot)
)
