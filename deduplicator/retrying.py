"""How stage 2 retries a transactional call: while its error is retriable, up to a deadline or
until the process is asked to stop, alive (heartbeat) and saying so now and then."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from deduplicator.errors import TransactionFailedError
from deduplicator.limits import RETRY_DEADLINE_S, RETRY_LOG_INTERVAL_S, SLOW_CALL_S
from runtime import ErrorClass, call_retrying, classify, get_logger, kafka_error_of

# The loop's logger: these lines kept the name they had when the loop retried its calls.
log = get_logger("deduplicator.loop")


def retrying(
    operation: str,
    call: Callable[[], object],
    *,
    beat: Callable[[], None],
    should_stop: Callable[[], bool],
    until_stopped: bool = False,
    observe: Callable[[str, float], None] = lambda operation, seconds: None,
) -> None:
    """Call again while the error is retriable, up to RETRY_DEADLINE_S (then
    TransactionFailedError); abortable and fatal errors raise at once, as KafkaException.

    ``until_stopped``: retry for as long as the error stays retriable, until ``should_stop()``.
    For the calls a successor would only repeat against the same cluster: init_transactions,
    and commit_transaction, whose outcome stays unknown until the coordinator answers
    (invariant 5: waiting for the answer guesses nothing). While the target cannot write (a
    coordinator moving, fewer in-sync replicas than min.insync.replicas) the role waits, live,
    and says so; it does not exit into a restart that would meet the same cluster.

    ``observe(operation, seconds)``: the call's time, its retries included, once it succeeded
    (where a commit's time goes: a coordinator answering CONCURRENT_TRANSACTIONS shows here)."""
    retries = 0
    said_at = -math.inf

    def say(error: KafkaError) -> None:
        nonlocal retries, said_at
        retries += 1
        beat()  # waiting on Kafka on purpose: the loop is not stuck
        if time.monotonic() - said_at >= RETRY_LOG_INTERVAL_S:
            said_at = time.monotonic()
            log.warning("retrying", operation=operation, error=error.str(), retries=retries)
        if until_stopped and should_stop():
            raise TransactionFailedError(f"{operation}: stopping while {error.str()}")

    deadline_s = math.inf if until_stopped else RETRY_DEADLINE_S
    started = time.monotonic()
    try:
        call_retrying(call, deadline_s=deadline_s, on_retry=say)
        seconds = time.monotonic() - started
        observe(operation, seconds)
        if seconds >= SLOW_CALL_S:
            # The copy stood still this long: said with the call, so a stall in a rolling
            # restart can be put down to the coordinator that held it.
            log.info("slow call", operation=operation, seconds=round(seconds, 1), retries=retries)
    except KafkaException as exc:
        error = kafka_error_of(exc)
        if classify(error) is ErrorClass.RETRIABLE:
            raise TransactionFailedError(
                f"{operation}: {error.str()} (retried for {RETRY_DEADLINE_S:.0f} s)"
            ) from exc
        raise


def retrying_with(
    beat: Callable[[], None],
    should_stop: Callable[[], bool],
    observe: Callable[[str, float], None],
) -> Callable[..., None]:
    """``retrying`` bound to one loop's heartbeat, stop request and timing."""
    return functools.partial(retrying, beat=beat, should_stop=should_stop, observe=observe)
