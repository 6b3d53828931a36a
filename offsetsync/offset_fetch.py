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
stderr (as role ``offsetsync.offset-fetch``). It ends when its stdin closes (the role exited,
however it exited). Its requests are not in offset sync's requests metric: its client's
statistics stay in it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from offsetsync.admin_session import (
    COORDINATOR_REQUEST_TIMEOUT_S,
    GROUP_CONNECTIONS,
    TIMEOUT_S,
    AdminSession,
)
from runtime import LIBRDKAFKA_LOG, configure_logging, get_logger, kafka_error_of

log = get_logger("offsetsync")

# Beyond the fetching process's own deadline (TIMEOUT_S): a process that has not answered by
# then is stuck where no deadline of ours reaches, and is killed.
_GRACE_S = 5.0
# What a new process needs before it can ask anything (an interpreter and our imports: 0.6-0.8 s
# on a busy two-core machine): a fetch that lost its process tries once more in a new one if
# this much of its deadline is left.
_START_S = 2.0
_COMMAND = (sys.executable, "-m", "offsetsync.offset_fetch")
_LENGTH = struct.Struct(">I")
# No answer comes near this (a few hundred bytes a group); a length beyond it is a broken
# stream, not a message to allocate for.
_MAX_MESSAGE = 256 * 1024 * 1024
_CHUNK = 64 * 1024
# How often an idle fetching process serves its client's queue (librdkafka's log lines).
_IDLE_POLL_S = 1.0


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
    (module note); started at the first fetch and again after each one it did not survive."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        logs: LogSetup,
        *,
        command: Sequence[str] = _COMMAND,
    ) -> None:
        self._setup = {"config": dict(client_config), "logs": logs}
        self._command = list(command)
        self._process: subprocess.Popen[bytes] | None = None

    def fetch(self, groups: Iterable[str]) -> dict[str, Answer]:
        """Each group's answer. Empty when no process answered: every group's offsets are
        unknown this cycle. A process lost quickly (a crash) is replaced and asked once more
        within the same deadline; one that ran out the deadline is not."""
        groups = list(groups)
        if not groups:
            return {}
        deadline = time.monotonic() + TIMEOUT_S + _GRACE_S
        for _attempt in range(2):
            try:
                return self._ask(groups, deadline)
            except Exception as exc:
                # Whatever broke the exchange (a crash, a stall, a broken stream), the process
                # goes and the groups stay unknown; never the role.
                self._lost(exc)
            if deadline - time.monotonic() < _START_S + 1.0:
                break
        return {}

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
        return _end(process, wait_s=5.0)

    def _ask(self, groups: list[str], deadline: float) -> dict[str, Answer]:
        process = self._process
        if process is None:
            # Held at once: whatever fails from here on ends it (_lost), never leaves it behind.
            process = self._process = subprocess.Popen(
                self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            # Never blocked on a process that stopped reading or writing: each wait is ours
            # (_await), by the fetch's deadline.
            os.set_blocking(_fd(process.stdin), False)
            os.set_blocking(_fd(process.stdout), False)
            # Through the pipe: the secrets among the client properties are not in its argv.
            _write(_fd(process.stdin), self._setup, deadline)
        elif process.poll() is not None:
            raise EOFError("it ended while idle")
        # The fetching process's own deadline leaves the grace for its answer to arrive.
        budget = max(0.5, deadline - time.monotonic() - _GRACE_S)
        _write(_fd(process.stdin), (groups, budget), deadline)
        answers = _read(_fd(process.stdout), deadline)
        return {group: _answer(encoded) for group, encoded in answers.items()}

    def _lost(self, cause: Exception) -> None:
        process, self._process = self._process, None
        status = None if process is None else _end(process, wait_s=1.0)
        if isinstance(cause, TimeoutError):
            message = "the offset fetch process did not answer in time: killed"
        else:
            message = (
                "the offset fetch process ended without answering (librdkafka #5040 crashes it "
                "when a group's coordinator moves)"
            )
        log.warning(
            f"{message}; its groups' offsets are unknown until a new one answers",
            exit_status=status,
            cause=f"{type(cause).__name__}: {cause}",
        )


def _fd(pipe: Any) -> int:
    if pipe is None:
        raise EOFError("no pipe")
    return int(pipe.fileno())


def _end(process: subprocess.Popen[bytes], *, wait_s: float) -> int:
    """Close its pipes and reap it, killed if it lingers past ``wait_s``; its exit status."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            # Unbuffered bytes of a broken pipe: nobody reads them any more.
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        return process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _answer(encoded: tuple[str, Any]) -> Answer:
    kind, value = encoded
    if kind == "offsets":
        return [Committed(*row) for row in value]
    if kind == "error":
        code, reason, fatal, retriable, abortable = value
        return KafkaException(
            KafkaError(code, reason, fatal=fatal, retriable=retriable, txn_requires_abort=abortable)
        )
    return TimeoutError("no answer from the group's coordinator in time")


def _encode(answer: Answer) -> tuple[str, Any]:
    if isinstance(answer, KafkaException):
        error = kafka_error_of(answer)
        flags = (error.fatal(), error.retriable(), error.txn_requires_abort())
        return "error", (error.code(), error.str(), *flags)
    if isinstance(answer, TimeoutError):
        return "unanswered", None
    return "offsets", [(c.topic, c.partition, c.offset, c.metadata, c.error) for c in answer]


def _write(fd: int, message: object, deadline: float | None = None) -> None:
    """All of one message, or TimeoutError past ``deadline`` (a reader that stopped reading)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        _await(fd, selectors.EVENT_WRITE, deadline)
        with contextlib.suppress(BlockingIOError):  # the room was taken meanwhile: wait again
            view = view[os.write(fd, view[:_CHUNK]) :]


def _read(fd: int, deadline: float | None = None) -> Any:
    """The next message; EOFError when the pipe closed first, TimeoutError past ``deadline``."""
    (length,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size, deadline))
    if length > _MAX_MESSAGE:
        raise ValueError(f"a message of {length} bytes: the stream is broken")
    return pickle.loads(_read_exactly(fd, length, deadline))  # our own process's bytes


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, missing = [], size
    while missing:
        _await(fd, selectors.EVENT_READ, deadline)
        try:
            chunk = os.read(fd, min(missing, _CHUNK))
        except BlockingIOError:  # nothing after all: wait again
            continue
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _await(fd: int, event: int, deadline: float | None) -> None:
    if deadline is None:
        return  # a blocking call waits by itself
    if not _ready(fd, event, max(0.0, deadline - time.monotonic())):
        raise TimeoutError("no answer from the offset fetch process in time")


def _ready(fd: int, event: int, timeout_s: float) -> bool:
    """Whether ``fd`` is ready for ``event`` within ``timeout_s``."""
    with selectors.DefaultSelector() as selector:  # any descriptor number, unlike select()
        selector.register(fd, event)
        return bool(selector.select(timeout_s))


class GroupOffsetFetch:
    """The fetching process's work: each group's stable committed offsets through admin
    clients of its own (AdminSession: never timed out by librdkafka, replaced when unanswered)."""

    def __init__(self, new_admin: Callable[[], AdminClient], *, connections: int = 1) -> None:
        # A broker answers one connection's requests one after another: a cycle's fetches
        # overlap only across clients (AdminSession's note).
        self._session = AdminSession(new_admin, connections=connections)

    def fetch(self, groups: Iterable[str], timeout_s: float | None = None) -> dict[str, Answer]:
        # Only stable offsets: a transactional commit still in flight is not an offset yet.
        admins = self._session.spread()
        futures = {
            group: next(admins).list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)],
                require_stable=True,
                request_timeout=COORDINATOR_REQUEST_TIMEOUT_S,
            )[group]
            for group in groups
        }
        answers: dict[str, Answer] = {}
        for group, answer in self._session.answers(futures, timeout_s).items():
            if isinstance(answer, (KafkaException, TimeoutError)):
                answers[group] = answer
            else:
                answers[group] = [Committed.of(tp) for tp in answer.topic_partitions]
        return answers

    def serve(self) -> None:
        """Deliver the clients' queued log lines (left unserved, they pile up for as long as
        a client lives) and destroy the clients replaced."""
        self._session.poll()
        self._session.release()

    def close(self) -> None:
        """Destroy the clients replaced so far (the current ones go with this object)."""
        self._session.release()


def main() -> None:
    # The role's signals are the role's: a terminal's Ctrl-C or a SIGTERM to the process group
    # must not end this process before the role, which ends it by closing its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The answers' own descriptor; anything else written to stdout (a library's print) goes to
    # stderr, the role's log, and never into the stream of answers.
    requests, answers = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        setup = _read(requests)
    except EOFError:
        return
    logs: LogSetup = setup["logs"]
    configure_logging(logs.level, f"{logs.role}.offset-fetch", json=logs.json)
    # A crash says where, in the role's log; `kill -USR1` prints where it waits.
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = {**setup["config"], "logger": LIBRDKAFKA_LOG}
    fetch = GroupOffsetFetch(lambda: AdminClient(config), connections=GROUP_CONNECTIONS)
    while True:
        if not _ready(requests, selectors.EVENT_READ, _IDLE_POLL_S):
            fetch.serve()
            continue
        try:
            groups, timeout_s = _read(requests)
        except EOFError:
            return
        found = fetch.fetch(groups, timeout_s)
        try:
            _write(answers, {group: _encode(answer) for group, answer in found.items()})
        except BrokenPipeError:
            return
        fetch.serve()


if __name__ == "__main__":
    main()
