"""`exactly chaos`: the fault-injection run we ship, and its verdict.

Exit status: 0 when the run ends exactly once (record by record and by `exactly validate`,
both consumer groups' failovers, every role drained), 1 for any other verdict, 2 when the run
itself failed (bad options, a cluster that would not start; named on stderr), 130 after
Ctrl-C, 143 after SIGTERM. Every way out runs the same clean-up, so no broker, controller or
role outlives the command.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import click

from exactly.chaos.html import HTML_NAME
from exactly.chaos.options import ChaosOptions
from exactly.chaos.plan import DEFAULT_SPACING_S
from exactly.chaos.run import ChaosRun, chaos_directory
from exactly.harness.progress import DemoView
from exactly.signals import run_to_the_end

EXIT_CLEAN = 0
EXIT_NOT_CLEAN = 1
EXIT_RUN_FAILED = 2
_DEFAULTS = ChaosOptions()


@click.command()
@click.option(
    "--minutes",
    # From one minute: a shorter window cannot be sure to hold one fault of each kind.
    type=click.FloatRange(min=1, max=24 * 60),
    default=_DEFAULTS.minutes,
    show_default=True,
    help="Length of the fault window (traffic runs throughout; draining and the verdicts follow).",
)
@click.option(
    "--faults",
    type=click.IntRange(min=1),
    default=None,
    help="Faults to inject in the window, every kind at least once; more than fit is an error. "
    f"Default: one every {DEFAULT_SPACING_S:g} s of the window (200 in 10 minutes), as many of "
    "them as fit.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=10, max=50_000),
    default=_DEFAULTS.rate,
    show_default=True,
    metavar="RECORDS/S",
    help="Records produced to the source per second, in transactions (some aborted).",
)
@click.option(
    "--nodes",
    type=click.Choice(["1", "3"]),
    default=str(_DEFAULTS.nodes),
    show_default=True,
    help="Nodes per cluster: 1 is a broker and a separate KRaft controller; 3 are combined "
    "broker+controller nodes (replication factor 3, min.insync.replicas 2), of which a broker "
    "fault SIGKILLs one and a controller fault the active controller.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed of the fault plan: the same seed, the same plan (default: random, printed).",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("chaos-report"),
    show_default=True,
    help="Directory for chaos-report.json and chaos-report.html.",
)
def chaos(
    minutes: float,
    faults: int | None,
    rate: float,
    nodes: str,
    seed: int | None,
    report_dir: Path,
) -> None:
    """Replicate sample traffic between two fresh local Kafka clusters while SIGKILLing,
    freezing (SIGSTOP) and wiping the roles, SIGKILLing the brokers and controllers and
    slowing, throttling, resetting or cutting the network between each role and each cluster
    (toxiproxy, built with Go on the first run), at random times and overlapping; then drain
    and prove exactly-once record by record and with `exactly validate --require-complete`
    (Spark), and that a consumer group moved by offsetsync resumes on the target at exactly its
    next record.

    The clusters live in $LOCALKAFKA_STATE_DIR/chaos, made fresh every run (with --nodes
    nodes each): the command never touches any other cluster.
    """
    seed = random.randrange(1 << 31) if seed is None else seed
    options = ChaosOptions(minutes=minutes, faults=faults, rate=rate, seed=seed, nodes=int(nodes))
    view = DemoView()
    run = ChaosRun(options, view, chaos_directory(), report_dir)

    def clean_up() -> None:
        try:
            json_path = run.report()
            view.say(f"report: {json_path} and {json_path.with_name(HTML_NAME)}")
        finally:  # whatever the report met, everything this run started stops
            if run.cleanup():
                view.say(f"done; nothing left running (data and logs in {run.directory})")

    def work() -> int:
        if run.run().clean:
            view.say("CHAOS RUN CLEAN: exactly once through every fault", style="bold green")
            return EXIT_CLEAN
        view.say("CHAOS RUN NOT CLEAN: see the verdicts above and the report", style="bold red")
        return EXIT_NOT_CLEAN

    sys.exit(run_to_the_end("chaos", work, view, clean_up, failed=EXIT_RUN_FAILED))
