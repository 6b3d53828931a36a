"""`exactly demo`: the product end to end on two local clusters, with crashes, and the verdict.

Exit status: 0 for a clean exactly-once verdict, 1 for any other verdict or a failure of the
demo itself (named on stderr), 130 after Ctrl-C, 143 after SIGTERM. Every way out runs the same
clean-up, so no broker, controller or role outlives the command.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import click
from confluent_kafka import KafkaException

from exactly.demo.clusters import demo_directory
from exactly.demo.progress import DemoView
from exactly.demo.scenario import DemoOptions, DemoRun
from runtime import ExactlyError

EXIT_CLEAN = 0
EXIT_FAILED = 1
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM
_DEFAULTS = DemoOptions()
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread as Python raises KeyboardInterrupt for SIGINT."""


@click.command()
@click.option(
    "--duration",
    type=click.FloatRange(min=10, max=3600),
    default=_DEFAULTS.duration_s,
    show_default=True,
    metavar="SECONDS",
    help="How long the sample traffic runs; the whole demo takes about 30 s longer.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=10, max=5000),
    default=_DEFAULTS.records_per_second,
    show_default=True,
    metavar="RECORDS/S",
    help="Sample records produced per second.",
)
def demo(duration: float, rate: float) -> None:
    """Run both stages and offset sync on two local Kafka clusters under live traffic, SIGKILL
    each stage once, compare source and destination record by record, and move a consumer group
    from the source to the target.

    The clusters (demo-source, demo-target) live in $LOCALKAFKA_STATE_DIR/demo, apart from those
    of `exactly kafka up`; they are made fresh every run and stopped at the end.
    """
    view = DemoView()
    run = DemoRun(DemoOptions(duration, rate), view, demo_directory())
    with _stop_signals_raise():
        status = _run_to_the_end(run, view)
    sys.exit(status)


def _run_to_the_end(run: DemoRun, view: DemoView) -> int:
    """The demo's exit status; the clean-up runs whatever happened, shielded from signals."""
    status = EXIT_FAILED
    try:
        status = EXIT_CLEAN if run.run().clean else EXIT_FAILED
    except KeyboardInterrupt:
        status = EXIT_SIGINT
        view.stop_live()
        view.say("interrupted (Ctrl-C): stopping the roles and the clusters", style="bold yellow")
    except _Terminated:
        status = EXIT_SIGTERM
        view.stop_live()
        view.say("terminated (SIGTERM): stopping the roles and the clusters", style="bold yellow")
    except (ExactlyError, KafkaException, OSError) as exc:
        view.stop_live()
        click.echo(f"exactly demo: {exc}", err=True)
    finally:
        # The clean-up must finish: a second Ctrl-C would leave half of it undone.
        with _signals_ignored():
            if run.cleanup():
                view.say(
                    f"done in {view.elapsed_s:.1f} s; nothing left running "
                    f"(data and logs in {run.directory})",
                    style="dim",
                )
    return status


@contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM _Terminated in the main thread.

    SIGINT explicitly too: a shell starts a background job (`exactly demo &` in a script) with
    SIGINT ignored, and Python then leaves it ignored; the demo must stop on it all the same.
    """

    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    handlers = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: raise_terminated}
    previous = {number: signal.signal(number, handler) for number, handler in handlers.items()}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in _STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
