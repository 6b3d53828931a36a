"""What the demo shows: events as lines, live counts, and the verdict.

On a terminal the counts are a live panel redrawn in place (rich), with the events printed
above it; anywhere else (a pipe, a CI log, a test) they are a plain line every few seconds, so
the output stays readable as a file.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from exactly.harness.failover import FailoverResult
from exactly.harness.verdict import Verdict

_PLAIN_EVERY_S = 5.0
_MAX_EXAMPLES = 12
# Without a terminal rich assumes 80 columns, which truncates the verdict table's topic names.
_PLAIN_WIDTH = 120


@dataclass(frozen=True, slots=True)
class RoleStatus:
    name: str
    running: bool
    pid: int | None
    starts: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The counts at one moment; None: a role has not (yet) shown that metric."""

    phase: str
    committed: int  # produced to the source in committed transactions
    aborted: int  # produced in aborted transactions: must never be copied
    staged: int | None  # stage 1: source records copied into staging envelopes
    destination: int  # readable (read_committed) in the destination topics
    duplicates: int | None  # stage 2: staging records dropped as already written
    orphans: int | None
    dead_letters: int | None
    roles: tuple[RoleStatus, ...]


class DemoView:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(
            highlight=False, width=None if sys.stdout.isatty() else _PLAIN_WIDTH
        )
        self._started = time.monotonic()
        self._live: Live | None = None
        self._last_plain = 0.0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def say(self, text: str, style: str | None = None) -> None:
        """One event line, stamped with the seconds since the demo began."""
        line = Text(f"[{self.elapsed_s:6.1f} s] ", style="dim")
        line.append(text, style=style)
        self.console.print(line, soft_wrap=True)

    def start_live(self, snapshot: Snapshot) -> None:
        if self.console.is_terminal:
            self._live = Live(self._panel(snapshot), console=self.console, refresh_per_second=4)
            self._live.start()
        else:
            self._plain(snapshot, force=True)

    def update(self, snapshot: Snapshot) -> None:
        if self._live is not None:
            self._live.update(self._panel(snapshot))
        else:
            self._plain(snapshot)

    def stop_live(self, snapshot: Snapshot | None = None) -> None:
        if self._live is not None:
            if snapshot is not None:
                self._live.update(self._panel(snapshot))
            self._live.stop()
            self._live = None
        elif snapshot is not None:
            self._plain(snapshot, force=True)

    def show_verdict(self, verdict: Verdict, aborted_produced: int) -> None:
        self.console.print(_verdict_table(verdict))
        for example in verdict.examples(_MAX_EXAMPLES):
            self.console.print(Text(f"  {example}", style="red"), soft_wrap=True)
        copied = verdict.total("uncommitted")
        aborted = f"aborted transactions: {aborted_produced} records on the source, " + (
            "none in the destination"
            if copied == 0
            else f"{copied} destination records copy no committed source record"
        )
        self.console.print(Text(aborted, style="green" if copied == 0 else "red"), soft_wrap=True)
        style = "bold green" if verdict.clean else "bold red"
        self.console.print(Text(verdict.headline(), style=style), soft_wrap=True)

    def show_failover(self, result: FailoverResult | None, group: str, topic: str) -> None:
        """The failover's headline, under the verdict's: the run is clean only when both are."""
        if result is None:
            text, style = (
                f"FAILOVER NOT RUN: {group} was not moved, the destination had not caught up",
                "bold red",
            )
        elif result.exact:
            text, style = (
                f"FAILOVER EXACT: {group} resumed on the target at the next record in "
                f"{result.partitions} partitions of {topic}, 0 read again, 0 skipped",
                "bold green",
            )
        else:
            text, style = (
                f"FAILOVER NOT EXACT: {group} read {result.read} records of {topic} on the "
                f"target, {result.re_read} read again, {result.skipped} skipped",
                "bold red",
            )
        self.console.print(Text(text, style=style), soft_wrap=True)

    # -- rendering --------------------------------------------------------------------------------

    def _panel(self, snapshot: Snapshot) -> RenderableType:
        title = Text(f"exactly demo · {self.elapsed_s:.0f} s · {snapshot.phase}", style="bold")
        counts = Table.grid(padding=(0, 2))
        counts.add_column()
        counts.add_column(justify="right")
        counts.add_column(style="dim")
        counts.add_row(
            "source: committed records",
            _number(snapshot.committed),
            f"+{snapshot.aborted:,} in aborted transactions",
        )
        counts.add_row("stage 1: copied into staging", _number(snapshot.staged), "")
        counts.add_row(
            "destination: readable records", _number(snapshot.destination), "read_committed"
        )
        counts.add_row(
            "stage 2: duplicates dropped",
            _number(snapshot.duplicates),
            f"orphans {_number(snapshot.orphans)}, dead letters {_number(snapshot.dead_letters)}",
        )
        roles = Table.grid(padding=(0, 2))
        for role in snapshot.roles:
            roles.add_row(role.name, _role_state(role))
        return Group(title, counts, roles)

    def _plain(self, snapshot: Snapshot, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_plain < _PLAIN_EVERY_S:
            return
        self._last_plain = now
        self.say(
            f"{snapshot.phase}: source {snapshot.committed} committed "
            f"(+{snapshot.aborted} aborted) | staging {_count(snapshot.staged)} "
            f"| destination {snapshot.destination} "
            f"| duplicates dropped {_count(snapshot.duplicates)}",
            style="dim",
        )


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _count(value: int | None) -> str:
    """Without thousands separators: a plain line is for grep and logs."""
    return "-" if value is None else str(value)


def _role_state(role: RoleStatus) -> str:
    starts = f"{role.starts} start{'s' if role.starts != 1 else ''}"
    if role.running:
        return f"running, pid {role.pid}, {starts}"
    return f"not running, {starts}"


def _verdict_table(verdict: Verdict) -> Table:
    table = Table(title="source against destination, record by record", title_justify="left")
    table.add_column("partition")
    for column in ("source", "destination", "matched", "missing", "duplicated", "changed"):
        table.add_column(column, justify="right")
    for p in verdict.partitions:
        style = None if p.clean else "red"
        table.add_row(
            Text(p.name),
            str(p.source),
            str(p.destination),
            str(p.matched),
            str(p.missing),
            str(p.duplicated),
            str(p.changed),
            style=style,
        )
    table.add_section()
    table.add_row(
        "total",
        *(
            str(verdict.total(counter))
            for counter in ("source", "destination", "matched", "missing", "duplicated", "changed")
        ),
        style="bold",
    )
    return table
