"""What a chaos run breaks and mends: its role instances and its two clusters.

Each fault of chaos/plan.py is applied by `begin` and undone by `end`. A role instance that
exits while no fault holds it is what an orchestrator would see crash: `supervise` restarts it
and the exit is kept for the report (a configuration error, exit 2, stops the run instead: no
restart can mend it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from exactly.chaos.errors import ChaosError
from exactly.chaos.network import Toxiproxy
from exactly.chaos.plan import Fault, Kind
from localkafka import LocalCluster, RoleProcess, peak_rss_mib

EXIT_CONFIG = 2


@dataclass
class Instance:
    """One role instance, its state directory (stage 2) and what happened to it."""

    process: RoleProcess
    state_dir: Path | None = None
    exits: list[dict[str, object]] = field(default_factory=list)  # unexpected: (t, status)
    peak_rss_mib: float = 0.0


class World:
    def __init__(
        self,
        instances: dict[str, Instance],
        clusters: dict[str, LocalCluster],
        started: float,
        network: Toxiproxy,
    ) -> None:
        self.instances = instances
        self.clusters = clusters
        self.network = network
        self.started = started  # times in the report count from here
        self._held: set[str] = set()  # targets a fault holds down: not restarted by supervise

    def begin(self, fault: Fault) -> str | None:
        """Apply the fault; why it was not, if it was not (then `end` must not be called)."""
        if fault.kind is Kind.NETWORK and self.network.healing(fault.target):
            # Still waiting for a frozen client to read what the last toxic held: a new one
            # would wait with it, and stop the loop that thaws the client (chaos/network.py).
            return "its last network fault is still being healed"
        self._held.add(fault.target)
        if fault.kind is Kind.KILL:
            self.instances[fault.target].process.kill()
        elif fault.kind is Kind.PAUSE:
            self._signal(fault.target, signal.SIGSTOP)
        elif fault.kind is Kind.WIPE:
            instance = self.instances[fault.target]
            instance.process.kill()
            if instance.state_dir is not None:
                shutil.rmtree(instance.state_dir, ignore_errors=True)
        elif fault.kind is Kind.BROKER:
            self.clusters[fault.target].kill()
        elif fault.kind is Kind.CONTROLLER:
            self.clusters[fault.target].controller.kill()
        elif fault.kind is Kind.NETWORK:
            self.network.break_link(fault.target, fault.variant)
        return None

    def end(self, fault: Fault) -> None:
        if fault.kind is Kind.NETWORK:
            self.network.heal_link(fault.target)
        elif fault.kind is Kind.PAUSE:
            self._signal(fault.target, signal.SIGCONT)
        elif fault.kind in (Kind.KILL, Kind.WIPE):
            self.instances[fault.target].process.start()
        else:
            # Starts whichever of broker and controller is not running, on the same data,
            # without waiting for readiness: the roles ride out the rest.
            self.clusters[fault.target].launch(tie_to_parent=True)
        self._held.discard(fault.target)

    def held(self, target: str) -> bool:
        """Whether a fault holds ``target`` now: a role instance killed, frozen or wiped, a
        cluster's broker or controller, or a network link."""
        return target in self._held

    def supervise(self) -> None:
        """Restart a role instance that exited by itself; note its peak memory."""
        for name, instance in self.instances.items():
            process = instance.process
            if process.pid is not None and process.is_running():
                instance.peak_rss_mib = max(instance.peak_rss_mib, peak_rss_mib(process.pid))
            if name in self._held:
                continue
            status = process.unexpected_exit()
            if status is None:
                continue
            instance.exits.append(
                {"t": round(time.monotonic() - self.started, 1), "status": status}
            )
            if status == EXIT_CONFIG:
                raise ChaosError(
                    f"{name} stopped on its configuration (exit 2)\n{process.log_tail(15)}"
                )
            process.start()

    def _signal(self, name: str, number: signal.Signals) -> None:
        pid = self.instances[name].process.pid
        if pid is not None:
            # It may have died a moment ago: supervise restarts it once the fault ends.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, number)  # its own session: the group is the role and its children
