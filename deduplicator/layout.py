"""Where each staging partition's dedup state lives in the changelog (docs/design.md §3.5).

A flow made by this version keeps every staging partition's state in ONE changelog partition
(shared): a transaction then writes one changelog partition, not one per staging partition it
read, which is one produce request per commit instead of up to a dozen (librdkafka sends a
request per partition) and shortens every commit's flush. Each record carries the staging
partition it belongs to in the header ``exactly.lane``, so a restore picks its own partitions'
records out of the shared one. A flow made before keeps the layout it has: a changelog with as
many partitions as staging, staging partition p's state in changelog partition p
(co-partitioned). The changelog's partition count tells the two apart, so nothing else records
the layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Message

from deduplicator.errors import DeduplicatorError

LANE_HEADER = "exactly.lane"
# A new flow's changelog: one partition for every staging partition's state.
SHARED_PARTITIONS = 1


@dataclass(frozen=True, slots=True)
class ChangelogLayout:
    """The changelog ``topic`` and whether its one partition holds every staging partition's
    state (``shared``) or partition p holds staging partition p's."""

    topic: str
    shared: bool

    def partition_of(self, lane: int) -> int:
        """The changelog partition that holds staging partition ``lane``'s state."""
        return 0 if self.shared else lane

    @staticmethod
    def headers(lane: int) -> list[tuple[str, bytes]]:
        """The headers of a changelog record of staging partition ``lane``'s state (written in
        both layouts, so a record says whose it is wherever it is read)."""
        return [(LANE_HEADER, b"%d" % lane)]


def changelog_layout(
    changelog: str, found: int, staging: str, staging_partitions: int
) -> ChangelogLayout:
    """The layout of a changelog that has ``found`` partitions, for a staging topic of
    ``staging_partitions``. Any other count than one or staging's stops stage 2 at start-up:
    with fewer than staging's, some staging partitions would have no changelog partition;
    with more, staging's partitions changed and a partition's state would be another's."""
    if found == SHARED_PARTITIONS:
        # One staging partition: both layouts put its state in partition 0.
        return ChangelogLayout(changelog, shared=staging_partitions > 1)
    if found == staging_partitions:
        return ChangelogLayout(changelog, shared=False)
    raise DeduplicatorError(
        f"changelog topic {changelog} has {found} partitions and staging topic {staging} "
        f"{staging_partitions}: stage 2 keeps its state in one changelog partition, or (in a "
        "flow made before it did so) in as many as staging has, staging partition p's in "
        "changelog partition p. A changelog made before stage 2 made it: delete it while it "
        "holds nothing, or use a new REPLICATION_FLOW"
    )


def lane_of(message: Message) -> int:
    """The staging partition a shared changelog's record belongs to, from its header. A
    record without one was not written by stage 2: the restore stops on it rather than guess
    whose state it is (invariant 5: the changelog is the truth)."""
    for name, value in message.headers() or ():
        if name == LANE_HEADER and value is not None:
            try:
                return int(value)
            except ValueError:
                break
    raise DeduplicatorError(
        f"changelog record at {message.topic()}/{message.partition()}/{message.offset()} has "
        f"no valid {LANE_HEADER} header, so its staging partition is unknown (not written by "
        "stage 2?)"
    )
