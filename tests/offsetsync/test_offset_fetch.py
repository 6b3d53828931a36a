"""Groups' committed offsets fetched by a process of their own (offsetsync.offset_fetch):
librdkafka's admin client crashes its process when a fetch meets a moving coordinator
(librdkafka #5040), and such a crash must cost one cycle's offsets, not offset sync."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

import offsetsync.offset_fetch
from offsetsync.offset_fetch import Committed, LogSetup, OffsetFetchProcess, _answer, _encode
from runtime import classify, kafka_error_of
from tests.kafka_helpers import create_topic
from tests.offsetsync.groups import commit_offsets

_LOGS = LogSetup("INFO", "offsetsync", json=False)


@pytest.fixture
def committed_group(target_cluster, unique_topic, unique_group) -> tuple[str, str]:
    topic, group = unique_topic("fetched"), unique_group("fetched")
    create_topic(target_cluster.bootstrap_servers, topic, 2)
    commit_offsets(target_cluster.bootstrap_servers, group, topic, {0: 4, 1: 9})
    return topic, group


@pytest.fixture
def fetch(target_cluster) -> Iterator[OffsetFetchProcess]:
    """A fetch process of the target cluster, ended with the test."""
    fetching = OffsetFetchProcess({"bootstrap.servers": target_cluster.bootstrap_servers}, _LOGS)
    try:
        yield fetching
    finally:
        fetching.close()


def _offsets(answer: object) -> dict[tuple[str, int], int]:
    assert isinstance(answer, list), answer
    return {(c.topic, c.partition): c.offset for c in answer if isinstance(c, Committed)}


def test_a_fetch_process_crashed_while_idle_is_replaced_within_the_fetch(
    fetch, committed_group, caplog
):
    topic, group = committed_group
    assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}
    crashed = fetch.pid
    assert crashed is not None
    os.kill(crashed, signal.SIGSEGV)  # what librdkafka #5040 does to it
    with caplog.at_level(logging.WARNING, logger="offsetsync"):
        assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}
    assert _exit_statuses(caplog) == [-11]
    assert fetch.pid not in (None, crashed)
    fetch.close()
    assert fetch.pid is None


def test_a_fetch_process_that_never_answers_is_killed_at_the_deadline(
    fetch, committed_group, monkeypatch
):
    topic, group = committed_group
    # Started and connected under the real deadline: a new process takes most of a second.
    assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}
    stuck = fetch.pid
    assert stuck is not None
    os.kill(stuck, signal.SIGSTOP)  # stuck where no deadline of its own reaches
    with monkeypatch.context() as short:
        short.setattr(offsetsync.offset_fetch, "TIMEOUT_S", 0.5)
        short.setattr(offsetsync.offset_fetch, "_GRACE_S", 0.5)
        started = time.monotonic()
        assert fetch.fetch([group]) == {}  # too little time left to start another
        assert time.monotonic() - started < 5
    assert fetch.pid is None
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left behind
        os.kill(stuck, 0)
    assert _offsets(fetch.fetch([group])[group]) == {(topic, 0): 4, (topic, 1): 9}


def test_the_fetch_process_ends_by_itself_when_its_stdin_closes(fetch, committed_group):
    """As when the role exits, however it exits (SIGKILL included): nothing is left behind."""
    _topic, group = committed_group
    fetch.fetch([group])
    assert fetch.close() == 0  # not killed: close() kills one still there after 5 s


# Stand-ins for the fetching process, for what no broker can be made to do on demand. Each
# reads the setup and the request as the real one does.
_READS = "from offsetsync.offset_fetch import _read; _read(0); _read(0)"
_CRASHES = f"{_READS}; import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
_GARBLES = (
    f"{_READS}; import os, sys; os.write(1, b'\\x00\\x00\\x00\\x05junk!'); sys.stdin.buffer.read()"
)


@pytest.mark.parametrize(
    ("child", "status"),
    [(_CRASHES, -11), (_GARBLES, 0), ("pass", 0)],
    ids=["crashes on every request", "answers garbage", "exits at start"],
)
def test_a_fetch_process_lost_twice_leaves_every_group_unknown_and_nothing_behind(
    child, status, caplog
):
    fetch = OffsetFetchProcess({}, _LOGS, command=[sys.executable, "-c", child])
    with caplog.at_level(logging.WARNING, logger="offsetsync"):
        assert fetch.fetch(["g1", "g2"]) == {}  # unknown, not "no offsets"; never raised
    # Asked once more in a new process, then given up: each one reaped (an exit status).
    assert _exit_statuses(caplog) == [status, status]
    assert fetch.pid is None


def test_a_group_error_keeps_its_class_through_the_pipe():
    for error in (
        KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True),
        KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"),
        KafkaError(KafkaError._FATAL, "fatal", fatal=True),
    ):
        answer = _answer(_encode(KafkaException(error)))
        assert isinstance(answer, KafkaException)
        rebuilt = kafka_error_of(answer)
        assert (rebuilt.code(), rebuilt.str()) == (error.code(), error.str())
        assert classify(rebuilt) is classify(error)
    rows = [Committed("t", 0, 7, "m", None), Committed("t", 1, -1001, None, "UNSTABLE")]
    assert _answer(_encode(rows)) == rows


def _exit_statuses(caplog: pytest.LogCaptureFixture) -> list[object]:
    return [
        getattr(record, "event_fields", {}).get("exit_status")
        for record in caplog.records
        if "offset fetch process" in record.getMessage()
    ]
