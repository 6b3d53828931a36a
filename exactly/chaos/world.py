"""What a chaos run breaks and mends: its role instances and its two clusters.

Each fault of chaos/plan.py is applied by `begin` and undone by `end`. A role instance that
exits while no fault holds it is what an orchestrator would see crash: `supervise` restarts it
and the exit is kept for the report (a configuration error, exit 2, stops the run instead: no
restart can mend it).

A cluster fault takes one JVM: on a one-broker cluster its broker (node 2) or its separate
controller (node 1); on a cluster of several combined nodes, `broker` SIGKILLs the node the
plan drew and `controller` the node that is the active KRaft controller, found in the nodes'
logs (chaos/quorum.py), or the plan's node when no log names a running one. The report says
which node each took.
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
from exactly.chaos.quorum import active_controller
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

    def begin(self, fault: Fault) -> dict[str, object]:
        """Apply the fault; what the report adds to it: the node a cluster fault took, or why
        the fault was skipped ("skipped": then `end` must not be called)."""
        if fault.kind is Kind.NETWORK and self.network.healing(fault.target):
            # Still waiting for a frozen client to read what the last toxic held: a new one
            # would wait with it, and stop the loop that thaws the client (chaos/network.py).
            return {"skipped": "its last network fault is still being healed"}
        self._held.add(fault.target)
        if fault.kind in (Kind.BROKER, Kind.CONTROLLER):
            return self._kill_node(fault)
        if fault.kind is Kind.KILL:
            self.instances[fault.target].process.kill()
        elif fault.kind is Kind.PAUSE:
            self._signal(fault.target, signal.SIGSTOP)
        elif fault.kind is Kind.WIPE:
            instance = self.instances[fault.target]
            instance.process.kill()
            if instance.state_dir is not None:
                shutil.rmtree(instance.state_dir, ignore_errors=True)
        elif fault.kind is Kind.NETWORK:
            self.network.break_link(fault.target, fault.variant)
        return {}

    def end(self, fault: Fault) -> None:
        if fault.kind is Kind.NETWORK:
            self.network.heal_link(fault.target)
        elif fault.kind is Kind.PAUSE:
            self._signal(fault.target, signal.SIGCONT)
        elif fault.kind in (Kind.KILL, Kind.WIPE):
            self.instances[fault.target].process.start()
        else:
            # Starts whichever node (broker or controller) is not running, on the same data,
            # without waiting for readiness: the roles ride out the rest.
            self.clusters[fault.target].launch(tie_to_parent=True)
        self._held.discard(fault.target)

    def _kill_node(self, fault: Fault) -> dict[str, object]:
        """SIGKILL the one JVM of the cluster the fault takes (the module's docstring)."""
        cluster = self.clusters[fault.target]
        if cluster.controller is not None:  # one broker, one separate controller
            if fault.kind is Kind.CONTROLLER:
                cluster.controller.kill()
                return {"hit": "the controller (its own JVM)"}
            (node,) = cluster.nodes
            cluster.kill_node(node)
            return {"node": node, "hit": f"node {node}, the only broker"}
        if fault.kind is Kind.BROKER:
            cluster.kill_node(fault.node)
            return {"node": fault.node, "hit": f"node {fault.node}"}
        started = time.monotonic()
        running = [(i, node.log_path) for i, node in cluster.nodes.items() if node.is_running()]
        active = active_controller(running)
        took_ms = round((time.monotonic() - started) * 1000, 1)
        node = fault.node if active is None else active
        cluster.kill_node(node)
        hit = (
            f"node {node}, the active controller"
            if active is not None
            else f"node {node} (no log named a running active controller)"
        )
        return {"node": node, "hit": hit, "controller_lookup_ms": took_ms}

    def held(self, target: str) -> bool:
        """Whether a fault holds ``target`` now: a role instance killed, frozen or wiped, a
        cluster's broker or controller (one of its nodes), or a network link."""
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
