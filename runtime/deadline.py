"""A hard deadline for a client call that may block past its own timeout.

librdkafka's `send_offsets_to_transaction()` can block forever when its group coordinator went
away: the coordinator request's timeout is never checked (librdkafka #5456), and a coordinator
that left the metadata is not looked up again (#5511). Seen here with librdkafka 2.16.0 after a
SIGKILL of the target broker, and on a cluster of three nodes after a SIGKILL of the node that
was the transaction or group coordinator (one target node kill in three). A hang stops the
pipeline silently. Two ways out:

- ``call_with_deadline``: the call runs on a thread of its own and ClientHungError is raised
  past the deadline, for the caller to leave the stuck client to its call and go on with a new
  one (stage 2: a new producer of the same transactional.id fences the stuck one);
- ``hard_deadline`` (and ``exit_hung``): say why and exit with status 1, for the orchestrator to
  restart the process; a crash is what every role is built to survive (the successor fences the
  producer and restores from the committed state).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from runtime.errors import ClientHungError
from runtime.logs import get_logger

T = TypeVar("T")

EXIT_HUNG = 1
log = get_logger(__name__)


@contextmanager
def hard_deadline(seconds: float, call: str) -> Iterator[None]:
    """Exit the process if the block has not finished within `seconds`."""
    finished = threading.Event()

    def watch() -> None:
        if not finished.wait(seconds):
            exit_hung(call, seconds)

    threading.Thread(target=watch, name=f"deadline {call}", daemon=True).start()
    try:
        yield
    finally:
        finished.set()


def exit_hung(call: str, seconds: float) -> None:
    """Say that ``call`` hung and exit at once with EXIT_HUNG: no teardown waits on the stuck
    client."""
    log.error(
        "client call blocked past its hard deadline; exiting for a restart",
        call=call,
        seconds=seconds,
    )
    sys.stderr.flush()
    os._exit(EXIT_HUNG)


def call_with_deadline(call: Callable[[], T], seconds: float, name: str) -> T:
    """``call()``'s result or exception, or ClientHungError once it has run ``seconds``: it goes
    on in its daemon thread, which the error carries, while the caller replaces the client."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"bounded {name}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ClientHungError(name, seconds, thread)
    if failure:
        raise failure[0]
    return outcome[0]
