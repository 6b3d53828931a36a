"""Groups' committed offsets, fetched by a process of their own.

librdkafka's admin client crashes its process (SIGSEGV, librdkafka #5040, open in 2.16) when an
offset fetch is answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: it asks the consumer-group
handler, which an admin client does not have, to look for the coordinator again. A broker
answers so while it shuts down (an operator's restart, a rolling upgrade) and while it takes
over or hands over a group's coordination, so a fetch that meets a moving coordinator took the
whole of offset sync down: silent, exit -11 (a one-broker source restarted in CI, and four of
six runs with a three-node source's coordinator SIGKILLed). In a process of its own, such a
crash costs one cycle's offsets of that cluster: the groups are unknown this cycle (nothing is
decided on them), and the next fetch starts a new process.

The fetching process is this module run as ``python -m offsetsync.offset_fetch``: requests on
its stdin, answers on its stdout (each a length-prefixed pickle), its log lines on the role's
stderr. It ends when its stdin closes (the role exited, however it exited).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, TypeAlias

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from offsetsync.admin_session import COORDINATOR_REQUEST_TIMEOUT_S, TIMEOUT_S, AdminSession
from runtime import LIBRDKAFKA_LOG, configure_logging, get_logger

log = get_logger("offsetsync")

# Beyond the fetching process's own deadline (TIMEOUT_S): a process that has not answered by
# then is stuck where no deadline of ours reaches, and is killed.
_GRACE_S = 5.0
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Committed:
    """One partition of a group's offset fetch: its offset (negative: none committed), its
    metadata, and the error the cluster gave for it instead (an open transaction's pending
    commit)."""

    topic: str
    partition: int
    offset: int
    metadata: str | None
    error: str | None

    @classmethod
    def of(cls, found: TopicPartition) -> Committed:
        error = None if found.error is None else found.error.str()
        return cls(found.topic, found.partition, found.offset, found.metadata, error)


# A group's answer: its partitions; the KafkaException its fetch failed with; or TimeoutError,
# unanswered in time.
Answer: TypeAlias = list[Committed] | KafkaException | TimeoutError


@dataclass(frozen=True, slots=True)
class LogSetup:
    """How the fetching process writes its lines: as its role's own."""

    level: str
    role: str
    json: bool


class OffsetFetchProcess:
    """Fetches groups' committed offsets of one cluster through a process that may crash
    (module note); started at the first fetch and after each one it did not survive."""

    def __init__(self, client_config: Mapping[str, str], logs: LogSetup) -> None:
        self._setup = {"config": dict(client_config), "logs": logs}
        self._process: subprocess.Popen[bytes] | None = None

    def fetch(self, groups: Iterable[str]) -> dict[str, Answer]:
        """Each group's answer. Empty when the process did not answer: every group's offsets are
        unknown this cycle."""
        groups = list(groups)
        if not groups:
            return {}
        process = self._process or self._start()
        try:
            assert process.stdin is not None
            assert process.stdout is not None
            _send(process.stdin, groups)
            answers = _receive(process.stdout, deadline=time.monotonic() + TIMEOUT_S + _GRACE_S)
        except (OSError, EOFError, TimeoutError) as exc:
            self._lost(process, exc)
            return {}
        return {group: _answer(encoded) for group, encoded in answers.items()}

    @property
    def pid(self) -> int | None:
        """The fetching process's, while one runs."""
        return None if self._process is None else self._process.pid

    def close(self) -> int | None:
        """End the process (it ends by itself when its stdin closes; this waits for it); its
        exit status."""
        if self._process is None:
            return None
        process, self._process = self._process, None
        return _end(process)

    def _start(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "offsetsync.offset_fetch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert process.stdin is not None
        _send(process.stdin, self._setup)  # through the pipe: no secret in argv or environ
        self._process = process
        return process

    def _lost(self, process: subprocess.Popen[bytes], cause: BaseException) -> None:
        self._process = None
        status = _end(process)
        log.warning(
            "the offset fetch process ended without answering (librdkafka #5040 crashes it "
            "when a group's coordinator moves): this cycle's groups of the cluster are unknown, "
            "the next fetch starts it anew",
            exit_status=status,
            cause=type(cause).__name__,
        )


def _end(process: subprocess.Popen[bytes]) -> int | None:
    """Close its pipes and reap it, killed if it lingers; its exit status."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            # A broken pipe's buffered bytes: nobody reads them any more.
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        return process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _answer(encoded: tuple[str, Any]) -> Answer:
    kind, value = encoded
    if kind == "offsets":
        return [Committed(*row) for row in value]
    if kind == "error":
        code, reason, fatal, retriable = value
        return KafkaException(KafkaError(code, reason, fatal=fatal, retriable=retriable))
    return TimeoutError(f"no answer in {TIMEOUT_S:.0f} s")


def _send(pipe: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_LENGTH.pack(len(data)) + data)
    pipe.flush()


def _receive(pipe: IO[bytes], deadline: float | None = None) -> Any:
    """The next message; EOFError when the pipe closed first, TimeoutError past ``deadline``."""
    (length,) = _LENGTH.unpack(_read(pipe, _LENGTH.size, deadline))
    return pickle.loads(_read(pipe, length, deadline))  # our own process's bytes, never a peer's


def _read(pipe: IO[bytes], size: int, deadline: float | None) -> bytes:
    fd = pipe.fileno()
    chunks, missing = [], size
    while missing:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"no answer within {TIMEOUT_S + _GRACE_S:.0f} s")
        chunk = os.read(fd, missing)
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


class GroupOffsetFetch:
    """The fetching process's work: each group's stable committed offsets through an admin
    client of its own (AdminSession: never timed out by librdkafka, replaced when unanswered)."""

    def __init__(self, new_admin: Callable[[], AdminClient]) -> None:
        self._session = AdminSession(new_admin)

    def fetch(self, groups: Iterable[str]) -> dict[str, Answer]:
        # Only stable offsets: a transactional commit still in flight is not an offset yet.
        futures = {
            group: self._session.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)],
                require_stable=True,
                request_timeout=COORDINATOR_REQUEST_TIMEOUT_S,
            )[group]
            for group in groups
        }
        answers: dict[str, Answer] = {}
        for group, answer in self._session.answers(futures).items():
            if isinstance(answer, (KafkaException, TimeoutError)):
                answers[group] = answer
            else:
                answers[group] = [Committed.of(tp) for tp in answer.topic_partitions]
        return answers


def _encode(answer: Answer) -> tuple[str, Any]:
    if isinstance(answer, KafkaException):
        error = answer.args[0]
        return "error", (error.code(), error.str(), error.fatal(), error.retriable())
    if isinstance(answer, TimeoutError):
        return "unanswered", None
    return "offsets", [(c.topic, c.partition, c.offset, c.metadata, c.error) for c in answer]


def main() -> None:
    # The role's signals are the role's: a terminal's Ctrl-C or a SIGTERM to the process group
    # must not end this process before the role, which ends it by closing its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    try:
        setup = _receive(requests)
    except EOFError:
        return
    logs: LogSetup = setup["logs"]
    configure_logging(logs.level, logs.role, json=logs.json)
    faulthandler.enable(all_threads=True)  # a crash says where, in the role's log
    config = {**setup["config"], "logger": LIBRDKAFKA_LOG}
    fetch = GroupOffsetFetch(lambda: AdminClient(config))
    while True:
        try:
            groups = _receive(requests)
        except EOFError:
            return
        try:
            _send(answers, {group: _encode(a) for group, a in fetch.fetch(groups).items()})
        except BrokenPipeError:
            return


if __name__ == "__main__":
    main()
