"""The transactional producers stage 2 left to a call that hung (librdkafka #5456, #5511;
runtime/deadline.py): each kept with the thread it blocks, never closed under it, destroyed once
the call ends, and never met by the interpreter's teardown."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time

from confluent_kafka import KafkaException, Producer

from deduplicator.limits import HUNG_CALL_WAIT_S, MAX_HUNG_PRODUCERS
from runtime import get_logger
from runtime.deadline import exit_hung
from runtime.errors import ClientHungError

# The loop's logger: these lines kept the name they had when the loop kept its hung producers.
log = get_logger("deduplicator.loop")


class HungProducers:
    def __init__(self) -> None:
        self._hung: list[tuple[Producer, threading.Thread]] = []

    def __len__(self) -> int:
        return len(self._hung)

    def add(self, producer: Producer, hung: ClientHungError) -> None:
        """Leave ``producer`` to the call that ``hung`` in it. When MAX_HUNG_PRODUCERS are stuck
        already, first wait for one of their calls to end (HUNG_CALL_WAIT_S), and exit for a
        restart if none does (runtime.deadline.exit_hung)."""
        if len(self._hung) >= MAX_HUNG_PRODUCERS and not self._one_ends():
            exit_hung(hung.call, hung.seconds)
        log.warning(
            "transactional producer hung; replacing it",
            call=hung.call,
            seconds=hung.seconds,
            hung_producers=len(self._hung) + 1,
        )
        assert isinstance(hung.thread, threading.Thread)
        self._hung.append((producer, hung.thread))

    def _one_ends(self) -> bool:
        """Whether a stuck producer's call ends within HUNG_CALL_WAIT_S (its producer then
        reaped)."""
        wait_s = HUNG_CALL_WAIT_S
        log.warning(
            "transactional producers hung; waiting for one of their calls to end",
            hung_producers=len(self._hung),
            wait_s=wait_s,
        )
        started = time.monotonic()
        while True:
            self.reap()
            waited = time.monotonic() - started
            if len(self._hung) < MAX_HUNG_PRODUCERS:
                log.info("a hung call ended", waited_s=round(waited, 1))
                return True
            if waited >= wait_s:
                return False
            self._hung[0][1].join(min(0.5, wait_s - waited))

    def reap(self) -> None:
        """Destroy the producers whose hung call has ended (fenced, by then): purged and served,
        so that the collector frees them now and not at the interpreter's exit."""
        for producer, thread in [entry for entry in self._hung if not entry[1].is_alive()]:
            # Fenced by its successor, as intended: the fatal error it keeps raising is ours.
            with contextlib.suppress(KafkaException):
                producer.purge()
            with contextlib.suppress(KafkaException):
                producer.flush(0)
            self._hung.remove((producer, thread))

    def leave(self, clean_status: int = 0) -> None:
        """On the way out: a producer still stuck in its call must not meet the interpreter's
        teardown (clients destroyed under a running call, or at exit, crash natively). Its
        transaction is fenced and aborted already; exit now, as a clean drain would
        (``clean_status``: 0, or 3 to start again with renewed credentials) unless an error is
        on its way out (1)."""
        self.reap()
        if not self._hung:
            return
        failing = sys.exc_info()[0] is not None
        log.warning(
            "a replaced producer is still stuck in its call; exiting without teardown",
            hung_producers=len(self._hung),
        )
        logging.shutdown()
        os._exit(1 if failing else clean_status)
