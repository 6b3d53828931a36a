"""Committed source offsets to destination offsets (docs/design.md §5): by timestamp, made exact by
the provenance header, for a whole sync cycle at once.

For a group that committed offset ``c`` on a source partition, the answer is the destination
offset of the copy of the first readable source record at or after ``c``: a consumer of the
destination that starts there reads exactly the records the group had not processed. The
timestamp of that source record finds where to look (``offsets_for_times`` on the destination
gives the first record with that timestamp or a later one, never one after the copy, because
copies keep their order and timestamps); the provenance header then walks forward to the exact
copy. Without the header the timestamp's answer stands: it may re-read records of the same
millisecond (or with out-of-order timestamps), and never skips one.

Only committed destination records are read (read_committed), so an answer never lies beyond
what stage 2 has committed: a group ahead of replication gets ``Waiting``, never a guess.

A source record that is itself a copy (a flow into the source cluster wrote it: active-active)
is never copied by this flow (loop prevention), so no copy of it can answer: the translation
looks for the first of the source's own records at or after ``c`` instead, and says the answer
is not exact (docs/topologies.md).

Many groups commit near one another in a partition, so each partition is read once per side
and cycle: from its smallest offset in question forward, jumping (a seek) over gaps longer than
``_GAP`` records instead of reading them.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Message

from envelope.provenance import carries_provenance, find_provenance
from offsetsync.reading import KEEP, STOP, Bounds, ClusterReader, Key
from offsetsync.translation import (
    BehindRetention,
    Request,
    Translated,
    Translation,
    Unavailable,
    Waiting,
)

# Records read through rather than sought over: a seek costs a round trip, reading 500 small
# records costs about as much.
_GAP = 500
# How far before the end of a caught-up partition to look for the last own record: a longer run
# of aborted records, markers or copies is read in further steps, each twice as long as the one
# before (up to the most one read should hold), so that a run of a million copies the reverse
# flow wrote (active-active, one side quiet) costs a few dozen reads, not thousands.
_LOOK_BACK = 64
_LOOK_BACK_MOST = 65_536


@dataclass(frozen=True, slots=True)
class _Copy:
    offset: int
    origin_offset: int | None  # None: the copy carries no provenance header


def translate_all(
    source: ClusterReader,
    destination: ClusterReader,
    requests: Collection[Request],
    source_cluster_id: str,
    *,
    header: bool = True,
) -> dict[Request, Translation]:
    """The translation of every request whose source partition exists. ``header``: whether
    stage 2 writes the provenance header (REPLICATION_PROVENANCE_HEADER)."""
    by_partition: dict[Key, list[Request]] = defaultdict(list)
    for request in requests:
        by_partition[(request.source_topic, request.partition)].append(request)
    bounds = source.bounds(by_partition)
    answers: dict[Request, Translation] = {}
    wanted: dict[Key, set[int]] = defaultdict(set)
    for key, partition_requests in by_partition.items():
        if key in bounds.unavailable:
            # Left for the next cycle, the other partitions translated now.
            for request in partition_requests:
                answers[request] = Unavailable(
                    "source", *key, bounds.unavailable[key], stale=key in bounds.stale
                )
            continue
        if key not in bounds:
            continue  # the topic is gone from the source: nothing to translate
        log_start, end = bounds[key]
        for request in partition_requests:
            if request.committed < log_start:
                answers[request] = BehindRetention(log_start)
            elif request.committed < end:
                wanted[key].add(request.committed)
    located, targets, passed_copies = _locate(source, by_partition, bounds, answers, wanted)
    copies, copy_bounds = _find_copies(destination, targets, source_cluster_id, header)
    empty_starts = destination.bounds(
        {(r.destination_topic, r.partition) for r, m in located.items() if m is None}
    )
    unavailable = copy_bounds.unavailable | empty_starts.unavailable
    stale = copy_bounds.stale | empty_starts.stale
    for request, record in located.items():
        destination_key = (request.destination_topic, request.partition)
        if destination_key in unavailable:
            # Not "waiting": nothing is known of the copy, and no guess is committed.
            answers[request] = Unavailable(
                "target",
                *destination_key,
                unavailable[destination_key],
                stale=destination_key in stale,
            )
            continue
        if record is None:
            # Not one readable record of the source's own in the partition below its end: the
            # group reads whatever the destination holds, once the destination partition exists.
            bounds_there = empty_starts.get(destination_key)
            answers[request] = (
                Waiting(request.committed)
                if bounds_there is None
                else Translated(bounds_there[0], exact=False)
            )
            continue
        copy = copies.get((destination_key, record.offset()))
        answers[request] = _answer(request, record, copy, exact=request not in passed_copies)
    return answers


def _locate(
    source: ClusterReader,
    by_partition: Mapping[Key, list[Request]],
    bounds: Mapping[Key, tuple[int, int]],
    answers: Mapping[Request, Translation],
    wanted: Mapping[Key, set[int]],
) -> tuple[dict[Request, Message | None], dict[Key, dict[int, Message]], set[Request]]:
    """The source record whose copy answers each request not answered yet (None: not one
    readable record of the source's own below the partition's end), those records by
    destination partition and offset, and the requests whose answer passed over copies."""
    firsts, passed = _first_records(source, wanted, bounds)
    # Caught up: no own record readable at or after the committed offset. Such a group resumes
    # right after the copy of the last own record before it (a copy of a later record, produced
    # since, is not skipped). That record is looked for back from the smallest such offset: the
    # forward read found none at or after it, so that stretch is not read again.
    look_back_from: dict[Key, int] = {}
    passed_after: set[Key] = set()  # copies seen at or after a caught-up offset
    for key, partition_requests in by_partition.items():
        for request in partition_requests:
            if key in bounds and request not in answers and (key, request.committed) not in firsts:
                stop = min(request.committed, bounds[key][1])
                look_back_from[key] = min(look_back_from.get(key, stop), stop)
                if (key, request.committed) in passed:
                    passed_after.add(key)
    lasts, last_passed = _last_records(source, look_back_from, bounds)
    last_passed |= passed_after
    located: dict[Request, Message | None] = {}
    targets: dict[Key, dict[int, Message]] = defaultdict(dict)
    passed_copies: set[Request] = set()
    for key, partition_requests in by_partition.items():
        for request in partition_requests:
            if key not in bounds or request in answers:
                continue
            # Not `or`: a Message's truth is its value's length, and a tombstone is falsy.
            record = firsts.get((key, request.committed))
            if record is None:
                record = lasts.get(key)
                if key in last_passed:
                    passed_copies.add(request)
            elif (key, request.committed) in passed:
                passed_copies.add(request)
            located[request] = record
            if record is not None:
                targets[(request.destination_topic, request.partition)][record.offset()] = record
    return located, targets, passed_copies


def _answer(request: Request, record: Message, copy: _Copy | None, *, exact: bool) -> Translation:
    """``exact`` False: copies from another flow lay where the group's next record would be
    (active-active): the answer is exact for the source's own records only."""
    if copy is None:
        return Waiting(record.offset())
    if copy.origin_offset is None:
        return Translated(copy.offset, exact=False)
    # The last record before a caught-up offset: the group has read it, so resume after its
    # copy; or at the copy of a later record when the copy found is of one.
    if record.offset() < request.committed and copy.origin_offset == record.offset():
        return Translated(copy.offset + 1, exact=exact)
    return Translated(copy.offset, exact=exact)


class _FirstAtOrAfter:
    """The first readable record of the source's own (not a copy) at or after each of a
    partition's offsets, and the offsets where copies were passed over to find it."""

    def __init__(
        self,
        key: Key,
        offsets: Iterable[int],
        found: dict[tuple[Key, int], Message],
        passed: set[tuple[Key, int]],
    ) -> None:
        self._key = key
        self._pending = deque(sorted(offsets))
        self._found = found
        self._passed = passed

    @property
    def start(self) -> int:
        return self._pending[0]

    def take(self, message: Message) -> int | None:
        offset = message.offset()
        if offset < self._pending[0]:
            return KEEP  # fetched before a seek
        if carries_provenance(message.headers()):
            # A copy from another flow: never copied by this one, so the group's next own
            # record answers, and not exactly for the records passed over.
            for pending in self._pending:
                if pending > offset:
                    break
                self._passed.add((self._key, pending))
            return KEEP
        while self._pending and self._pending[0] <= offset:
            self._found[(self._key, self._pending.popleft())] = message
        if not self._pending:
            return STOP
        if self._pending[0] - offset > _GAP:
            return self._pending[0]
        return KEEP

    def end(self) -> None:
        """The offsets still pending have no readable record at or after them."""


def _first_records(
    source: ClusterReader, wanted: Mapping[Key, set[int]], bounds: Mapping[Key, tuple[int, int]]
) -> tuple[dict[tuple[Key, int], Message], set[tuple[Key, int]]]:
    found: dict[tuple[Key, int], Message] = {}
    passed: set[tuple[Key, int]] = set()
    cursors = {key: _FirstAtOrAfter(key, offsets, found, passed) for key, offsets in wanted.items()}
    source.scan({key: (cursor.start, bounds[key][1]) for key, cursor in cursors.items()}, cursors)
    return found, passed


class _Last:
    """The last readable record of the source's own (not a copy) in a range, and whether a
    copy from another flow follows it there."""

    def __init__(self) -> None:
        self.record: Message | None = None
        self.passed_copy = False

    def take(self, message: Message) -> int | None:
        if carries_provenance(message.headers()):
            self.passed_copy = True
        else:
            self.record = message
            self.passed_copy = False
        return KEEP

    def end(self) -> None:
        pass


def _last_records(
    source: ClusterReader, below: Mapping[Key, int], bounds: Mapping[Key, tuple[int, int]]
) -> tuple[dict[Key, Message | None], set[Key]]:
    """The last readable own record of each partition below an offset (None when there is
    none), and the partitions where copies from another flow were passed over to find it."""
    found: dict[Key, Message | None] = {}
    passed: set[Key] = set()
    stops = dict(below)
    look_back = _LOOK_BACK
    while stops:
        ranges = {key: (max(bounds[key][0], stop - look_back), stop) for key, stop in stops.items()}
        look_back = min(2 * look_back, _LOOK_BACK_MOST)
        cursors = {key: _Last() for key in ranges}
        source.scan(ranges, cursors)
        stops = {}
        for key, cursor in cursors.items():
            start = ranges[key][0]
            if cursor.passed_copy:
                passed.add(key)
            if cursor.record is not None or start <= bounds[key][0]:
                found[key] = cursor.record
            else:
                # Only markers, aborted records or copies there: look further back.
                stops[key] = start
    return found, passed


class _CopyOf:
    """The first copy at or after each of a source partition's records, by provenance."""

    def __init__(
        self,
        key: Key,
        records: Iterable[Message],
        source_cluster_id: str,
        destination: ClusterReader,
        found: dict[tuple[Key, int], _Copy],
        header: bool,
    ) -> None:
        self._key = key
        self._pending = deque(sorted(records, key=Message.offset))
        self._cluster = source_cluster_id
        self._destination = destination
        self._found = found
        self._floor = 0
        self._hinted: int | None = None  # the pending source offset last asked a hint for
        self._header = header
        self.header_off = False
        # Records without the header were read past: the destination's own (active-active), or
        # copies written with the header off. A record whose found copy is of a later record
        # (its own may be one of those) gets the timestamp's answer (``unsure``): it may
        # re-read, it never skips.
        self.passed_headerless = False
        self.unsure: list[Message] = []

    @property
    def first(self) -> Message:
        return self._pending[0]

    def take(self, message: Message) -> int | None:
        if message.offset() < self._floor:
            return KEEP  # fetched before a seek
        origin = find_provenance(message.headers())
        if origin is None:
            if self._header:
                self.passed_headerless = True
                return KEEP
            # Header off: the timestamp's answer stands for every record (_timestamp_answers).
            self.header_off = True
            return STOP
        # A copy from another flow (aggregation) or partition is not this group's record.
        if origin.source_cluster_id != self._cluster or origin.partition != self._key[1]:
            return KEEP
        while self._pending and self._pending[0].offset() <= origin.offset:
            record = self._pending.popleft()
            if origin.offset != record.offset() and self.passed_headerless:
                # Its own copy was not found by the header, and records without it were read
                # past: one of them may be that copy (written with the header off).
                self.unsure.append(record)
                continue
            self._found[(self._key, record.offset())] = _Copy(message.offset(), origin.offset)
        if not self._pending:
            return STOP
        if self._pending[0].offset() - origin.offset <= _GAP:
            return KEEP
        # The hint for this record is already behind us: read on. Asking again for every record
        # read cost a round trip each; exactly chaos found a sync cycle that could no longer
        # finish in time, for good, where a zombie's aborted copies of later records (their
        # timestamps in the time index, before the committed copies) put the hint thousands of
        # records back.
        if self._hinted == self._pending[0].offset():
            return KEEP
        self._hinted = self._pending[0].offset()
        # Far ahead: jump to where its timestamp says the copy can start at the earliest.
        hint = self._destination.offsets_for_times({self._key: self._pending[0].timestamp()[1]})
        start = hint[self._key]
        if start < 0:
            return STOP  # no copy that late yet: it and every later one wait
        if start <= message.offset():
            return KEEP
        self._floor = start
        return start

    def end(self) -> None:
        """The records still pending have no copy yet."""

    def pending(self) -> list[Message]:
        return list(self._pending)


def _find_copies(
    destination: ClusterReader,
    targets: Mapping[Key, Mapping[int, Message]],
    source_cluster_id: str,
    header: bool,
) -> tuple[dict[tuple[Key, int], _Copy], Bounds]:
    """The copy of each record (by destination partition and source offset); a record whose copy
    is not committed yet is left out. And the destination partitions' bounds (with those that
    could not be read this time)."""
    found: dict[tuple[Key, int], _Copy] = {}
    bounds = destination.bounds(targets)
    cursors = {
        key: _CopyOf(key, records.values(), source_cluster_id, destination, found, header)
        for key, records in targets.items()
        if key in bounds  # a destination partition not created yet: everything waits
    }
    starts = destination.offsets_for_times(
        {key: cursor.first.timestamp()[1] for key, cursor in cursors.items()}
    )
    # -1: no destination record that late: the first record's copy, and every later one, waits.
    ranges = {key: (start, bounds[key][1]) for key, start in starts.items() if start >= 0}
    destination.scan(ranges, {key: cursors[key] for key in ranges})
    by_timestamp = {}
    for key in ranges:
        cursor = cursors[key]
        if cursor.header_off:
            by_timestamp[key] = cursor.pending()
        elif cursor.unsure:
            # Past records without the header, a later copy than theirs: the timestamp's answer.
            # Records with no copy found at all wait for it (never a guess beyond stage 2).
            by_timestamp[key] = cursor.unsure
    found.update(_timestamp_answers(destination, by_timestamp))
    return found, bounds


def _timestamp_answers(
    destination: ClusterReader, records: Mapping[Key, list[Message]]
) -> dict[tuple[Key, int], _Copy]:
    """Without the header: the first destination record with each record's timestamp or a later
    one. One request per round, the n-th record of every partition in round n."""
    answers: dict[tuple[Key, int], _Copy] = {}
    queues = {key: deque(pending) for key, pending in records.items() if pending}
    while queues:
        round_records = {key: queue.popleft() for key, queue in queues.items()}
        offsets = destination.offsets_for_times(
            {key: record.timestamp()[1] for key, record in round_records.items()}
        )
        for key, record in round_records.items():
            if offsets[key] >= 0:
                answers[(key, record.offset())] = _Copy(offsets[key], None)
        queues = {key: queue for key, queue in queues.items() if queue}
    return answers


def translate(
    source: ClusterReader,
    destination: ClusterReader,
    *,
    source_topic: str,
    destination_topic: str,
    partition: int,
    committed: int,
    source_cluster_id: str,
    header: bool = True,
) -> Translation | None:
    """One request; None when the source partition does not exist."""
    request = Request(source_topic, destination_topic, partition, committed)
    return translate_all(source, destination, [request], source_cluster_id, header=header).get(
        request
    )


__all__ = [
    "BehindRetention",
    "Request",
    "Translated",
    "Translation",
    "Unavailable",
    "Waiting",
    "translate",
    "translate_all",
]
