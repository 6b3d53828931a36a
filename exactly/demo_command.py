"""`exactly demo`: the product end to end on two local clusters, with crashes, and the verdict.

Exit status: 0 for a clean exactly-once verdict, 1 for any other verdict or a failure of the
demo itself (named on stderr), 130 after Ctrl-C, 143 after SIGTERM. Every way out runs the same
clean-up, so no broker, controller or role outlives the command.
"""

from __future__ import annotations

import sys

import click

from exactly.demo.options import DemoOptions
from exactly.demo.scenario import DemoRun
from exactly.demo.two_way import ActiveActiveRun
from exactly.harness.clusters import demo_directory
from exactly.harness.progress import DemoView
from exactly.signals import run_to_the_end

EXIT_CLEAN = 0
EXIT_FAILED = 1
_DEFAULTS = DemoOptions()


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
@click.option(
    "--secure",
    is_flag=True,
    help="Clusters with secured listeners: the roles reach the source over SASL_SSL (SCRAM) and "
    "the target over mutual TLS, each as its own user with only its ACLs.",
)
@click.option(
    "--topology",
    type=click.Choice(["one-way", "active-active"]),
    default="one-way",
    show_default=True,
    help="one-way: a flow from the source to the target, with a consumer-group failover. "
    "active-active: a flow each way on the same topic names, producers in both clusters, a "
    "verdict per direction and the loop-prevention counters (docs/topologies.md).",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1, max=5),
    default=_DEFAULTS.nodes,
    show_default=True,
    help="Nodes per cluster: 3 replicates as production does (replication factor 3, "
    "min.insync.replicas 2), and a target node is SIGKILLed halfway as well.",
)
@click.option(
    "--no-audit",
    is_flag=True,
    help="Skip the Spark audit (exactly validate --require-complete) that ends the one-way "
    "demo, for a quicker run (about 25 s less).",
)
def demo(
    duration: float, rate: float, secure: bool, topology: str, nodes: int, no_audit: bool
) -> None:
    """Run both stages and offset sync on two local Kafka clusters under live traffic, SIGKILL
    each stage once, compare source and destination record by record, and move a consumer group
    from the source to the target.

    The clusters (demo-source, demo-target) live in $LOCALKAFKA_STATE_DIR/demo, apart from those
    of `exactly kafka up`; they are made fresh every run and stopped at the end.
    """
    if secure and topology == "active-active":
        raise click.UsageError("--secure runs the one-way demo only", click.get_current_context())
    if nodes > 1 and (secure or topology == "active-active"):
        raise click.UsageError(
            "--nodes runs the plain one-way demo only", click.get_current_context()
        )
    view = DemoView()
    options = DemoOptions(duration, rate, secure=secure, audit=not no_audit, nodes=nodes)
    run: DemoRun | ActiveActiveRun = (
        ActiveActiveRun(options, view, demo_directory())
        if topology == "active-active"
        else DemoRun(options, view, demo_directory())
    )

    def clean_up() -> None:
        if run.cleanup():
            view.say(
                f"done in {view.elapsed_s:.1f} s; nothing left running "
                f"(data and logs in {run.directory})",
                style="dim",
            )

    def work() -> int:
        return EXIT_CLEAN if run.run().clean else EXIT_FAILED

    sys.exit(run_to_the_end("demo", work, view, clean_up, failed=EXIT_FAILED))
