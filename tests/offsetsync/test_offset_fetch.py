"""Groups' committed offsets fetched by a process of their own (offsetsync.offset_fetch):
librdkafka's admin client crashes its process when a fetch meets a moving coordinator
(librdkafka #5040), and such a crash must cost one cycle's offsets, not offset sync."""

from __future__ import annotations

import logging
import os
import signal

import pytest

import offsetsync.offset_fetch
from offsetsync.offset_fetch import Committed, LogSetup, OffsetFetchProcess
from tests.kafka_helpers import create_topic
from tests.offsetsync.groups import commit_offsets

_LOGS = LogSetup("INFO", "offsetsync", json=False)


@pytest.fixture
def committed_group(target_cluster, unique_topic, unique_group) -> tuple[str, str]:
    topic, group = unique_topic("fetched"), unique_group("fetched")
    create_topic(target_cluster.bootstrap_servers, topic, 2)
    commit_offsets(target_cluster.bootstrap_servers, group, topic, {0: 4, 1: 9})
    return topic, group


def _offsets(answer: object) -> dict[tuple[str, int], int]:
    assert isinstance(answer, list), answer
    return {(c.topic, c.partition): c.offset for c in answer if isinstance(c, Committed)}


def test_a_crashed_fetch_process_costs_one_fetch_and_is_started_anew(
    target_cluster, committed_group, caplog
):
    topic, group = committed_group
    fetch = OffsetFetchProcess({"bootstrap.servers": target_cluster.bootstrap_servers}, _LOGS)
    try:
        assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}
        crashed = fetch.pid
        assert crashed is not None
        os.kill(crashed, signal.SIGSEGV)  # what librdkafka #5040 does to it
        with caplog.at_level(logging.WARNING, logger="offsetsync"):
            assert fetch.fetch([group]) == {}  # unknown this cycle, not "no offsets"
        assert [getattr(r, "event_fields", {}).get("exit_status") for r in caplog.records] == [-11]
        assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}
        assert fetch.pid not in (None, crashed)
    finally:
        fetch.close()
    assert fetch.pid is None


def test_a_fetch_process_that_never_answers_is_killed_at_the_deadline(
    target_cluster, committed_group, monkeypatch
):
    topic, group = committed_group
    monkeypatch.setattr(offsetsync.offset_fetch, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(offsetsync.offset_fetch, "_GRACE_S", 0.5)
    fetch = OffsetFetchProcess({"bootstrap.servers": target_cluster.bootstrap_servers}, _LOGS)
    try:
        assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}
        stuck = fetch.pid
        assert stuck is not None
        os.kill(stuck, signal.SIGSTOP)  # stuck where no deadline of its own reaches
        assert fetch.fetch([group]) == {}
        assert fetch.pid is None
        with pytest.raises(ProcessLookupError):  # killed and reaped, not left behind
            os.kill(stuck, 0)
        assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}
    finally:
        fetch.close()


def test_the_fetch_process_ends_by_itself_when_its_stdin_closes(target_cluster, committed_group):
    """As when the role exits, however it exits (SIGKILL included): nothing is left behind."""
    _topic, group = committed_group
    fetch = OffsetFetchProcess({"bootstrap.servers": target_cluster.bootstrap_servers}, _LOGS)
    fetch.fetch([group])
    assert fetch.close() == 0  # not killed: close() kills one still there after a second
