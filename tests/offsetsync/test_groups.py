"""Offset sync's requests to a group's coordinator (its offsets read and committed) and
librdkafka #4605: librdkafka 2.16 aborts the process when it times such a request out while it
is still looking for the coordinator, and the coordinator turns up later in the same client.
Neither ClusterGroups nor the offset fetch lets librdkafka time one out: each waits by its own
deadline and replaces the admin client that holds an unanswered one (AdminSession)."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ListConsumerGroupsResult

import offsetsync.admin_session
from offsetsync.admin_session import COORDINATOR_REQUEST_TIMEOUT_S
from offsetsync.groups import ClusterGroups
from offsetsync.metrics import OffsetSyncMetrics
from offsetsync.offset_fetch import GroupOffsetFetch
from tests.kafka_helpers import create_topic
from tests.offsetsync.groups import commit_offsets

ROOT = Path(__file__).resolve().parents[2]
_SILENT = logging.getLogger("tests.offsetsync.silent")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


class _Admin:
    """Answers the requests of the groups in ``answered`` at once and leaves every other one
    pending, as librdkafka does while it looks for the group's coordinator."""

    def __init__(self, answered: set[str]) -> None:
        self.answered = answered
        self.timeouts: list[float] = []
        self.polls = 0

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        return 0

    def _future(self, group: str, partitions: list[TopicPartition]) -> dict[str, Future]:
        future: Future = Future()
        if group in self.answered:
            future.set_result(ConsumerGroupTopicPartitions(group, partitions))
        return {group: future}

    def list_consumer_group_offsets(self, requests, require_stable, request_timeout):
        (request,) = requests
        self.timeouts.append(request_timeout)
        return self._future(request.group_id, [TopicPartition("t", 0, 5)])

    def alter_consumer_group_offsets(self, requests, request_timeout):
        (request,) = requests
        self.timeouts.append(request_timeout)
        return self._future(
            request.group_id,
            [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in request.topic_partitions],
        )

    def list_consumer_groups(self, request_timeout):
        """Left pending unless "(listing)" is answered: a listing sent to a broker that left
        the cluster meanwhile, which librdkafka neither answers nor times out."""
        self.timeouts.append(request_timeout)
        future: Future = Future()
        if "(listing)" in self.answered:
            future.set_result(ListConsumerGroupsResult(valid=[], errors=[]))
        return future


def _maker(*admins: _Admin) -> tuple[Callable[[], _Admin], list[_Admin]]:
    """Makes ``admins`` one after another; the list of those made so far."""
    queue, made = list(admins), []

    def new_admin() -> _Admin:
        made.append(queue.pop(0))
        return made[-1]

    return new_admin, made


def _groups(*admins: _Admin) -> tuple[ClusterGroups, list[_Admin]]:
    """ClusterGroups whose admin clients are ``admins``, in the order it makes them."""
    new_admin, made = _maker(*admins)
    return ClusterGroups(new_admin, {}, GroupOffsetFetch(lambda: _Admin(set()))), made


def _fetched(*admins: _Admin) -> tuple[ClusterGroups, list[_Admin]]:
    """ClusterGroups whose offset fetch (as its process runs it) uses ``admins`` in turn."""
    new_admin, made = _maker(*admins)
    return ClusterGroups(lambda: _Admin(set()), {}, GroupOffsetFetch(new_admin)), made


def test_librdkafka_never_times_out_a_request_to_a_coordinator():
    admin, fetching = _Admin({"g1"}), _Admin({"g1"})
    new_admin, made = _maker(admin)
    groups = ClusterGroups(new_admin, {}, GroupOffsetFetch(lambda: fetching))
    assert groups.committed(["g1"])["g1"].offsets == {("t", 0): 5}
    assert groups.commit({"g1": {("t", 0): 6}}, "m") == {"g1": {("t", 0): None}}
    assert admin.timeouts == fetching.timeouts == [COORDINATOR_REQUEST_TIMEOUT_S]
    assert made == [admin]  # all answered: the same client goes on
    # A timeout librdkafka takes (3600 s is its maximum).
    real = AdminClient({"bootstrap.servers": "127.0.0.1:9", "logger": _SILENT})
    real.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("g1")],
        request_timeout=COORDINATOR_REQUEST_TIMEOUT_S,
    )


def test_an_unanswered_fetch_leaves_its_group_out_and_the_admin_client_is_made_anew(
    monkeypatch,
):
    monkeypatch.setattr(offsetsync.admin_session, "TIMEOUT_S", 0.2)
    first, second = _Admin({"g1"}), _Admin({"g1", "g2"})
    groups, made = _fetched(first, second)
    started = time.monotonic()
    found = groups.committed(["g1", "g2", "g3"])
    # One deadline for the cycle's requests, not one each.
    assert time.monotonic() - started < 0.35
    assert sorted(found) == ["g1"]  # the others' offsets unknown this cycle, not "none"
    assert made == [first, second]
    # Asked again through the new client, which answers.
    assert sorted(groups.committed(["g1", "g2"])) == ["g1", "g2"]
    assert len(second.timeouts) == 2
    assert made == [first, second]


def test_an_unanswered_commit_is_timed_out_on_each_of_its_partitions(monkeypatch):
    monkeypatch.setattr(offsetsync.admin_session, "TIMEOUT_S", 0.2)
    first, second = _Admin({"g1"}), _Admin(set())
    groups, made = _groups(first, second)
    outcomes = groups.commit({"g1": {("t", 0): 6}, "g2": {("t", 0): 6, ("t", 1): 9}}, "m")
    assert outcomes["g1"] == {("t", 0): None}
    assert {key: error.name() for key, error in outcomes["g2"].items()} == {
        ("t", 0): "_TIMED_OUT",
        ("t", 1): "_TIMED_OUT",
    }
    assert made == [first, second]


def test_a_cycle_s_requests_are_spread_over_the_clients_and_all_made_anew_on_one_unanswered(
    monkeypatch,
):
    # A broker answers one connection's requests one after another: spread over clients, each
    # with its own connections, they wait on each other less (AdminSession).
    monkeypatch.setattr(offsetsync.admin_session, "TIMEOUT_S", 0.2)
    groups = [f"g{i}" for i in range(6)]
    first, second, third = _Admin(set(groups)), _Admin(set(groups) - {"g4"}), _Admin(set())
    fourth, fifth, sixth = _Admin(set(groups)), _Admin(set(groups)), _Admin(set(groups))
    new_admin, made = _maker(first, second, third, fourth, fifth, sixth)
    fetch = GroupOffsetFetch(new_admin, connections=3)
    assert made == [first, second, third]
    found = fetch.fetch(groups)
    assert [len(admin.timeouts) for admin in (first, second, third)] == [2, 2, 2]
    # In turn: g2 and g5 went to the third client, g4 to the second; none of them answered.
    # Which client held them is not known, so every client goes.
    assert sorted(g for g, answer in found.items() if isinstance(answer, list)) == [
        "g0",
        "g1",
        "g3",
    ]
    assert made == [first, second, third, fourth, fifth, sixth]
    assert all(isinstance(answer, list) for answer in fetch.fetch(groups).values())
    assert [len(admin.timeouts) for admin in (fourth, fifth, sixth)] == [2, 2, 2]


def test_serving_callbacks_polls_every_client():
    # Each client's statistics (the requests metric) queue until served: one left unpolled
    # would grow for as long as the role runs.
    admins = [_Admin(set()) for _ in range(3)]
    new_admin, _made = _maker(*admins)
    groups = ClusterGroups(new_admin, {}, GroupOffsetFetch(lambda: _Admin(set())), connections=3)
    groups.serve_callbacks()
    assert [admin.polls for admin in admins] == [1, 1, 1]


def test_each_client_counts_its_own_requests():
    # Several clients live at once, each with totals of its own since it started: one shared
    # count would take each one's total for a restart of the other's and count it again.
    metrics = OffsetSyncMetrics()
    first, second = metrics.request_counter("target"), metrics.request_counter("target")
    for on_stats, sent in ((first, 10), (second, 4), (first, 15), (second, 9), (first, 16)):
        on_stats(json.dumps({"brokers": {"b1": {"tx": sent}}}))
    assert (
        metrics.registry.get_sample_value(
            "exactly_offsetsync_requests_total", {"cluster": "target"}
        )
        == 16 + 9
    )


def test_a_session_without_a_client_is_refused():
    with pytest.raises(ValueError, match="not 0"):
        offsetsync.admin_session.AdminSession(lambda: _Admin(set()), connections=0)


def test_commits_are_spread_over_the_clients():
    first, second = _Admin({"g0", "g1", "g2"}), _Admin({"g0", "g1", "g2"})
    new_admin, _made = _maker(first, second)
    groups = ClusterGroups(new_admin, {}, GroupOffsetFetch(lambda: _Admin(set())), connections=2)
    outcomes = groups.commit({g: {("t", 0): 6} for g in ("g0", "g1", "g2")}, "m")
    assert outcomes == {g: {("t", 0): None} for g in ("g0", "g1", "g2")}
    assert [len(first.timeouts), len(second.timeouts)] == [2, 1]


def test_an_unanswered_listing_fails_the_cycle_and_the_admin_client_is_made_anew(monkeypatch):
    # Seen on three nodes: offset sync's cycle blocked on the listing for minutes, silent.
    monkeypatch.setattr(offsetsync.admin_session, "TIMEOUT_S", 0.2)
    first, second = _Admin(set()), _Admin({"(listing)"})
    groups, made = _groups(first, second)
    with pytest.raises(KafkaException) as failed:
        groups.states()
    assert failed.value.args[0].code() == KafkaError._TIMED_OUT  # retriable: the next cycle
    assert made == [first, second]
    assert groups.states() == {}  # the new client answers


def test_a_group_request_unanswered_while_the_broker_is_frozen_does_not_abort(
    target_cluster, unique_topic, unique_group
):
    """Frozen (SIGSTOP), the broker leaves the group's FindCoordinator unanswered; on the thaw
    the lookup completes. Had librdkafka timed the request out meanwhile, the process would
    abort there (17 of 18 runs of this freeze, librdkafka timing the request out at 1 s or
    less; the other one read freed memory that happened to pass the assertion)."""
    broker = target_cluster.broker
    if broker is None:
        pytest.skip(f"{target_cluster.kind} clusters give no broker control")
    bootstrap = target_cluster.bootstrap_servers
    topic, group = unique_topic("frozen"), unique_group("frozen")
    create_topic(bootstrap, topic, 1)
    commit_offsets(bootstrap, group, topic, {0: 7})
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.offsetsync.frozen_group_request", bootstrap, group],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        # Thawed well inside its session with the controller (6 s, localkafka): fenced, it
        # would leave the next test a cluster without leaders.
        thaw = threading.Timer(3.0, broker.resume)
        broker.pause()
        try:
            thaw.start()
            child.stdin.write("frozen\n")
            child.stdin.flush()
            unanswered = child.stdout.readline()
            thaw.join()
        finally:
            thaw.cancel()
            broker.resume()
        with contextlib.suppress(BrokenPipeError):  # it aborted at the thaw
            child.stdin.write("thawed\n")
            child.stdin.flush()
        out, err = child.communicate(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err[-3000:]  # -6: librdkafka's abort
    assert json.loads(unanswered) == {}
    assert json.loads(out) == {group: [[topic, 0, 7]]}


class _LostProcess:
    """An offset fetch whose process never answers (lost to librdkafka #5040 each time)."""

    def fetch(self, groups, timeout_s=None):
        return {}

    def close(self):
        pass


@pytest.mark.parametrize("process", ["answers", "lost"])
def test_groups_not_listed_are_read_together_each_with_its_own_offsets(
    target_cluster, unique_topic, unique_group, process
):
    """A first cycle on a target meets every group unlisted. They are asked of the fetching
    process together and, when it is lost, of consumers of their own, several at once: either
    way each group's answer must be its own (a mix-up would commit one group's position for
    another, or move a group back), and a group with no offsets there has none."""
    bootstrap = target_cluster.bootstrap_servers
    topic = unique_topic("unlisted")
    create_topic(bootstrap, topic, 2)
    committed = {unique_group(f"unlisted-{n}"): {0: 100 + n, 1: 200 + n} for n in range(12)}
    never = [unique_group(f"never-{n}") for n in range(12)]
    for group, offsets in committed.items():
        commit_offsets(bootstrap, group, topic, offsets)
    config = {"bootstrap.servers": bootstrap}
    fetch = (
        GroupOffsetFetch(lambda: AdminClient(config)) if process == "answers" else _LostProcess()
    )
    groups = ClusterGroups(lambda: AdminClient(config), config, fetch)  # type: ignore[arg-type]
    keys = [(topic, 0), (topic, 1)]
    try:
        found = groups.committed_unlisted({group: keys for group in [*committed, *never]})
    finally:
        groups.close()
    assert {g: (o.offsets, o.unknown) for g, o in found.items()} == {
        **{
            g: ({(topic, p): o for p, o in offsets.items()}, frozenset())
            for g, offsets in committed.items()
        },
        **{g: ({}, frozenset()) for g in never},
    }
