"""Loop prevention (docs/topologies.md): a source record that is a copy already is not copied.

A record that carries the provenance header (``envelope.carries_provenance``) was written by a
stage 2, so it is a copy already; copying it again would send it back where it came from
(active-active) or deliver it twice (a mesh). Counted and logged, never silent (invariant 7).
"""

from __future__ import annotations

from envelope import RecordRow, carries_provenance
from replicator.batching import Run, estimated_size
from replicator.lanes import Lane
from replicator.metrics import ReplicatorMetrics
from runtime import get_logger

# The copy loop's logger: this line was the loop's, and a log query selects on its logger name.
log = get_logger("replicator.loop")


def without_copies(run: Run) -> tuple[list[RecordRow], int]:
    """The rows of ``run`` to copy and their estimated size: every row but the copies. A run
    without headers holds no copy and is not searched (``Run.has_headers``)."""
    if not run.has_headers:
        return run.rows, run.size
    rows = [row for row in run.rows if not carries_provenance(row[5])]
    size = run.size
    if rows and len(rows) < len(run.rows):
        # The byte counter counts what is copied, as the record counter does.
        size -= sum(estimated_size(row) for row in run.rows if carries_provenance(row[5]))
    return rows, size


def count_passed_over(metrics: ReplicatorMetrics, lane: Lane, count: int) -> None:
    """Count the copies of ``lane`` not copied; log it once per partition."""
    metrics.copies_passed_over.labels(lane.topic).inc(count)
    if not lane.passed_over_logged:
        lane.passed_over_logged = True
        log.info(
            "records that are copies (exactly.origin header) are not copied again",
            topic=lane.topic,
            partition=lane.partition,
        )
