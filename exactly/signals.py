"""How `exactly demo` and `exactly chaos` end: SIGINT and SIGTERM raise in the main thread, so
that one clean-up runs whichever way the command ends, and that clean-up runs with both ignored.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import click
from confluent_kafka import KafkaException

from exactly.harness.progress import DemoView
from runtime import ExactlyError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as Python raises KeyboardInterrupt for SIGINT."""


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM Terminated in the main thread.

    SIGINT explicitly too: a shell starts a background job (`exactly demo &` in a script) with
    SIGINT ignored, and Python then leaves it ignored; the command must stop on it all the same.
    """

    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    handlers = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: raise_terminated}
    previous = {number: signal.signal(number, handler) for number, handler in handlers.items()}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def signals_ignored() -> Iterator[None]:
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_to_the_end(
    command: str,
    work: Callable[[], int],
    view: DemoView,
    clean_up: Callable[[], None],
    *,
    failed: int,
) -> int:
    """``work``'s exit status, or 130 / 143 after Ctrl-C / SIGTERM, or ``failed`` after a
    failure of the command itself (named on stderr); ``clean_up`` runs whatever happened,
    shielded from both signals: a second Ctrl-C must not leave half of it undone."""
    status = failed
    try:
        with stop_signals_raise():
            status = work()
    except KeyboardInterrupt:
        status = EXIT_SIGINT
        view.stop_live()
        view.say("interrupted (Ctrl-C): stopping the roles and the clusters", style="bold yellow")
    except Terminated:
        status = EXIT_SIGTERM
        view.stop_live()
        view.say("terminated (SIGTERM): stopping the roles and the clusters", style="bold yellow")
    except (ExactlyError, KafkaException, OSError) as exc:
        view.stop_live()
        click.echo(f"exactly {command}: {exc}", err=True)
    finally:
        with signals_ignored():
            clean_up()
    return status
