"""Offset sync while the group coordinators move (issue 31): between two commits of the group
(the node coordinating it on the source SIGKILLed, the group commits again with its new
coordinator, and the target's coordinator of the group dies too), and inside one cycle, between
the listing that shows the group and the fetch of its offsets. Offset sync rides it out and the
group resumes on the target exactly where it stopped."""

from __future__ import annotations

import dataclasses
import threading
import time

from confluent_kafka import KafkaException

from exactly.harness.errors import DemoError
from exactly.harness.failover import process_and_stop, resume_on_target
from localkafka.replicas import group_coordinator
from offsetsync.app import assemble
from offsetsync.clients import connect
from offsetsync.metrics import OffsetSyncMetrics
from runtime import load_settings
from tests.kafka_helpers import produce_numbered, read_all
from tests.nodes.flow import HOLD_S, PARTITIONS, RESTART_S, assert_both_verdicts, make_flow
from tests.offsetsync.groups import await_committed, commit_offsets, committed_offsets
from tests.replication.staging import await_records

RECORDS = 1200
_NOT_MOVED_BACK = "exactly_offsetsync_not_moved_back_total"


def test_offsetsync_follows_a_group_whose_coordinators_move(
    three_nodes, roles, unique_topic, unique_group, tmp_path
):
    source, target = three_nodes["source"], three_nodes["target"]
    group = unique_group("moving")
    flow, stages = _copied(three_nodes, roles, unique_topic, tmp_path, group)
    sync = roles.start("offsetsync", flow.env)

    process_and_stop(
        source.bootstrap_servers, group, flow.topic, dict.fromkeys(range(PARTITIONS), 30)
    )
    await_committed(target.bootstrap_servers, group, flow.topic, partitions=PARTITIONS)

    # Its source coordinator dies between two commits of the group; the second commit goes to
    # the node that took the coordinator's partition over.
    node = group_coordinator(source.bootstrap_servers, group)
    source.kill_node(node)
    committed = _commit_while_it_moves(source, group, flow.topic, 120)
    source.start_node(node, tie_to_parent=True, ready_timeout_s=RESTART_S)
    # And the target's coordinator of the group, where offset sync commits.
    node = group_coordinator(target.bootstrap_servers, group)
    target.kill_node(node)
    time.sleep(HOLD_S)
    target.start_node(node, tie_to_parent=True, ready_timeout_s=RESTART_S)

    expected = {p: 120 for p in range(PARTITIONS)}
    assert committed == expected  # no transaction markers on this source: offsets are counts
    _await_resumed_exactly(source, target, group, flow.topic, expected)
    # The records the group read were copied before the coordinators moved; both verdicts
    # still end the scenario, as they end every other one.
    _stop_and_judge(flow, [sync, *stages])


def _copied(three_nodes, roles, unique_topic, tmp_path, group: str):
    """A flow whose offset sync selects ``group``, its RECORDS copied by both stages (left
    running); the flow and the stages."""
    flow = make_flow(
        three_nodes,
        unique_topic,
        tmp_path,
        OFFSETSYNC_GROUPS_INCLUDE=group,
        OFFSETSYNC_INTERVAL_MS="300",
    )
    produce_numbered(flow.source.bootstrap_servers, flow.topic, PARTITIONS, 0, RECORDS)
    stages = [roles.start(role, flow.env) for role in ("replicator", "deduplicator")]
    await_records(flow.target.bootstrap_servers, {flow.topic}, RECORDS, 180)
    return flow, stages


def _stop_and_judge(flow, running) -> None:
    """Every role of ``running`` still up and stopped cleanly; then both verdicts."""
    for role in running:
        assert role.is_running(), f"{role.name} exited {role.returncode}\n{role.log_tail()}"
        assert role.terminate(30) == 0, role.log_tail()
    records, _ = assert_both_verdicts(flow, 60)
    assert records == RECORDS


def _commit_while_it_moves(source, group, topic, count, timeout_s=60.0):
    """The group processes ``count`` records of each partition and commits, as an application
    does while its coordinator moves: a commit refused meanwhile is tried again."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return process_and_stop(
                source.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), count)
            )
        except (KafkaException, DemoError):
            assert time.monotonic() < deadline, "the group could not commit for 60 s"
            time.sleep(1)


def _await_resumed_exactly(source, target, group, topic, expected, timeout_s=120.0):
    """The group, resumed on the target, reads exactly the records it had not processed on the
    source. First the target's committed offsets are awaited from outside the group: a consumer
    that joined it to look would keep it active, and offset sync leaves an active group alone."""
    records = read_all(source.bootstrap_servers, topic, PARTITIONS)
    unread = {
        p: [r.value for r in records if r.partition == p][offset:] for p, offset in expected.items()
    }
    positions = _copied_positions(records, target, topic, expected)
    await_committed(target.bootstrap_servers, group, topic, positions, timeout_s=timeout_s)
    read = resume_on_target(target.bootstrap_servers, group, topic, PARTITIONS)
    assert {p: [r.value for r in records] for p, records in read.items()} == unread


def _copied_positions(records, target, topic, counts: dict[int, int]) -> dict[int, int]:
    """Where the copy of each partition's record ``counts[p]`` among the source's ``records``
    (the first a group that read that many has not read) sits on the target: stage 2's commit
    markers make the target's offsets differ from the source's. Every value is unique."""
    copied = {r.value: r.offset for r in read_all(target.bootstrap_servers, topic, PARTITIONS)}
    return {
        p: copied[[r.value for r in records if r.partition == p][count]]
        for p, count in counts.items()
    }


class _MovedAfterListing:
    """A cluster's groups as offset sync's cycle asks them (ClusterGroups), whose first offset
    fetch of ``group`` finds the group's coordinator SIGKILLed: the cycle listed the group
    with the coordinator alive, and fetches after it died. Armed by ``arm``; ``killed`` is the
    node, for the test to restart."""

    def __init__(self, cluster, group: str) -> None:
        self._cluster = cluster
        self._group = group
        self._armed = False
        self.groups = None  # the ClusterGroups of the current clients (set by _Hooked)
        self.killed: int | None = None

    def arm(self) -> None:
        self._armed, self.killed = True, None

    def __getattr__(self, name):
        return getattr(self.groups, name)

    def committed(self, groups):
        groups = list(groups)
        if self._armed and self._group in groups:
            self._armed = False
            node = group_coordinator(self._cluster.bootstrap_servers, self._group)
            self._cluster.kill_node(node)
            # Told only once the node is down: the test restarts it after HOLD_S from here.
            self.killed = node
        return self.groups.committed(groups)


class _Hooked:
    """Offset sync's loop in this process, its clients' groups wrapped by the hooks (made anew
    with them when the loop makes its clients anew), running until ``stop``."""

    def __init__(self, env: dict[str, str], source_hook, target_hook) -> None:
        self._settings = load_settings(env)
        self._metrics = OffsetSyncMetrics()
        self._hooks = source_hook, target_hook
        self._stop = threading.Event()
        self.failed: BaseException | None = None
        # Assembled as the role assembles it, over the wrapped clients.
        self.sync, self._checkpoints = assemble(
            self._settings,
            self._metrics,
            self._connect,
            should_stop=self._stop.is_set,
            wait=self._stop.wait,
        )
        self._thread = threading.Thread(target=self._run, name="offsetsync-hooked", daemon=True)

    def _connect(self):
        clients = connect(self._settings, self._metrics)
        source_hook, target_hook = self._hooks
        source_hook.groups, target_hook.groups = clients.source_groups, clients.target_groups
        return dataclasses.replace(clients, source_groups=source_hook, target_groups=target_hook)

    def _run(self) -> None:
        try:
            self.sync.run()
        except BaseException as exc:  # a role would have exited: the test says so
            self.failed = exc

    def __enter__(self) -> _Hooked:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)
        stopped = not self._thread.is_alive()
        if stopped:  # a loop still running keeps its clients: closing them would race it
            self.sync.close()
            self._checkpoints.close()
        if exc[0] is None:  # the test's own failure says more
            assert stopped, "offset sync's loop did not stop in 60 s"

    def assert_running(self) -> None:
        assert self.failed is None, f"offset sync's loop ended: {self.failed!r}"

    def metric(self, name: str) -> float:
        """Offset sync's metric ``name`` as /metrics shows it."""
        return self._metrics.registry.get_sample_value(name) or 0.0

    def await_metric(self, name: str, at_least: float, timeout_s: float = 60.0) -> None:
        """Until offset sync's metric ``name`` reaches ``at_least``."""
        deadline = time.monotonic() + timeout_s
        while self.metric(name) < at_least:
            self.assert_running()
            assert time.monotonic() < deadline, f"{name} below {at_least} after {timeout_s} s"
            time.sleep(0.2)


def test_offsetsync_while_a_coordinator_moves_between_its_listing_and_its_fetch(
    three_nodes, roles, unique_topic, unique_group, tmp_path
):
    """A cycle lists the group, then its coordinator dies before the cycle fetches the group's
    offsets: on the source (the offsets just committed are not seen this cycle), then on the
    target (the offsets there are not known this cycle, so nothing may be committed over them).
    Offset sync keeps its loop, commits nothing it did not read, and the group resumes on the
    target exactly where it stopped on the source."""
    source, target = three_nodes["source"], three_nodes["target"]
    group = unique_group("listed")
    flow, stages = _copied(three_nodes, roles, unique_topic, tmp_path, group)

    on_source, on_target = _MovedAfterListing(source, group), _MovedAfterListing(target, group)
    process_and_stop(
        source.bootstrap_servers, group, flow.topic, dict.fromkeys(range(PARTITIONS), 30)
    )
    on_source.arm()
    with _Hooked(flow.env, on_source, on_target) as sync:
        # The source's coordinator of the group dies between the first listing and its fetch;
        # cycles go on without it for a while, and it comes back.
        _ride_out(source, on_source, sync)
        _await_resumed_exactly(
            source, target, group, flow.topic, dict.fromkeys(range(PARTITIONS), 30)
        )

        # The group, failed over, reads on at the target (as its application does there),
        # while it commits at the source, behind that: the target's coordinator of it dies
        # between a listing that shows it and its fetch. Not knowing where the group is there,
        # offset sync must not commit; knowing it again, it must not move the group back.
        records = read_all(source.bootstrap_servers, flow.topic, PARTITIONS)
        at_150 = dict.fromkeys(range(PARTITIONS), 150)
        ahead = _copied_positions(records, target, flow.topic, at_150)
        commit_offsets(target.bootstrap_servers, group, flow.topic, ahead)
        # Armed first: a cycle may see the source's commit before the committing consumer has
        # closed, and the hook fires only on a cycle with something to move.
        on_target.arm()
        moved_back = sync.metric(_NOT_MOVED_BACK)
        committed = _commit_while_it_moves(source, group, flow.topic, 120)
        assert committed == dict.fromkeys(range(PARTITIONS), 120)
        _ride_out(target, on_target, sync)
        sync.await_metric(_NOT_MOVED_BACK, moved_back + PARTITIONS)
        assert committed_offsets(target.bootstrap_servers, group, flow.topic) == {
            (flow.topic, p): offset for p, offset in ahead.items()
        }
        sync.assert_running()
    _stop_and_judge(flow, stages)


def _ride_out(cluster, hook: _MovedAfterListing, sync: _Hooked, timeout_s: float = 60.0) -> None:
    """The node ``hook`` kills, once a cycle fetches its group, left down for HOLD_S (the
    group's coordination moves meanwhile) and started again; offset sync's loop still runs."""
    deadline = time.monotonic() + timeout_s
    while hook.killed is None:
        sync.assert_running()
        assert time.monotonic() < deadline, f"no cycle fetched the group in {timeout_s:.0f} s"
        time.sleep(0.1)
    time.sleep(HOLD_S)
    cluster.start_node(hook.killed, tie_to_parent=True, ready_timeout_s=RESTART_S)
    sync.assert_running()
