"""The dedup rule's verdict on one envelope, said (invariants 4 and 7): what it drops is tallied
for the counters (once its transaction commits), and an orphan, never written, is logged with
its coordinates."""

from __future__ import annotations

from deduplicator.rule import PartitionState, Verdict, judge
from deduplicator.transaction import Tally
from envelope import EnvelopeRows
from runtime import get_logger

# The loop's logger: these lines kept the name they had when the loop judged envelopes.
log = get_logger("deduplicator.loop")


def judged(tally: Tally, state: PartitionState | None, envelope: EnvelopeRows) -> Verdict:
    """``rule.judge``'s verdict on ``envelope`` given its source partition's ``state``, in the
    open transaction's ``tally``; an orphan logged."""
    verdict = judge(state, envelope)
    if verdict.stale:
        # Dropped as stale, not as duplicates: each record is counted once, under its reason.
        tally.stale += verdict.duplicates
    elif verdict.duplicates:
        tally.duplicates += verdict.duplicates
    if verdict.orphan:
        # Invariant 4: a gap in stage 1's session; the resend heals it. Never written.
        tally.orphans += 1
        log.warning(
            "orphan envelope not written",
            topic=envelope.topic,
            partition=envelope.partition,
            prev_offset=envelope.prev_offset,
            high=state.high if state else -1,
            first_offset=envelope.rows[0][0],
        )
    return verdict
