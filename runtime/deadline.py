"""A hard deadline for a client call that may block past its own timeout.

librdkafka's `send_offsets_to_transaction()` can block forever when its group coordinator went
away: the coordinator request's timeout is never checked (librdkafka #5456), and a coordinator
that left the metadata is not looked up again (#5511). Seen here with librdkafka 2.16.0 after a
SIGKILL of the target broker. A hang stops the pipeline silently; a crash is what every role is
built to survive (the successor fences the producer and restores from the committed state). So:
past the deadline, say why and exit with status 1, for the orchestrator to restart the process.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from runtime.logs import get_logger

EXIT_HUNG = 1
log = get_logger(__name__)


@contextmanager
def hard_deadline(seconds: float, call: str) -> Iterator[None]:
    """Exit the process if the block has not finished within `seconds`."""
    finished = threading.Event()

    def watch() -> None:
        if finished.wait(seconds):
            return
        log.error(
            "client call blocked past its hard deadline; exiting for a restart",
            call=call,
            seconds=seconds,
        )
        sys.stderr.flush()
        os._exit(EXIT_HUNG)

    threading.Thread(target=watch, name=f"deadline {call}", daemon=True).start()
    try:
        yield
    finally:
        finished.set()
