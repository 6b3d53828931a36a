"""Supervised child processes of one process: `exactly run`, every role of one flow, the seed's
single `docker run` (docs/design.md §7); and `exactly replicator` / `exactly deduplicator` with
REPLICATION_WORKERS above 1, that many processes of one stage, so that one container uses more
than the one core a Python process can.

- The roles: the replicator and the deduplicator, and offset sync when OFFSETSYNC_GROUPS_INCLUDE
  selects groups. Each is `python -m <role>` with this process's environment; their output is
  this process's (the container's log), each line naming its role (`role=`); this process's
  own lines name the child they are about as `child=`.
- Workers: with REPLICATION_WORKERS=N a stage runs as N children `<role>-1` .. `<role>-N`, each
  a member of the stage's group with an identity of its own (`<identity>-<n>`, so each has its
  own group.instance.id and transactional.id) and its own state directory (`STATE_DIR/worker-<n>`:
  a partition that moves between workers is restored from the changelog, like one that moves
  between hosts).
- METRICS_PORT is this process's (restarts and which children are up, /healthz, /readyz); the
  children serve theirs on the next ports in order (for `exactly run` without workers:
  replicator +1, deduplicator +2, offset sync +3), or none when METRICS_PORT is 0.
- A child that exits is started again after a back-off that doubles from 1 s to 30 s (back to
  1 s once it has run for a minute), logged with its exit status and counted. A role that exits
  2 (its configuration is wrong) is not: everything stops, exit 2. One that exits 3 drained to
  load renewed credential files (runtime/credential_files.py) and is started again at once.
- SIGTERM reaches every role at once; each drains (exit 0) within the drain time or is
  SIGKILLed. Exit 0 when every role drained cleanly, else 1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from exactly.roles import DEDUPLICATOR, OFFSETSYNC, REPLICATOR
from runtime import (
    ConfigError,
    ExactlyError,
    GracefulShutdown,
    Health,
    Settings,
    get_logger,
    load_settings,
)
from runtime.liveness import Heartbeat
from runtime.role import EXIT_CONFIG, EXIT_RELOAD, run_role
from runtime.role_process import RoleProcess

log = get_logger("run")

STAGES = (REPLICATOR, DEDUPLICATOR)
_BACKOFF_FIRST_S = 1.0
_BACKOFF_MAX_S = 30.0
_HEALTHY_AFTER_S = 60.0  # a role that ran this long starts its back-off from the first step again
# Longer than a role's own drain (the open transaction, the acknowledged commit); a pod's
# terminationGracePeriodSeconds must be longer still.
DRAIN_S = 60.0
_LOOK_EVERY_S = 0.2


class _Metrics:
    def __init__(self, children: list[str]) -> None:
        self.registry = CollectorRegistry()
        self.up = Gauge(
            "exactly_run_role_up",
            "1 while the child's process runs, 0 while it waits to be started again.",
            ["role"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "exactly_run_role_restarts",
            "Times a child's process exited by itself and was started again.",
            ["role"],
            registry=self.registry,
        )
        self.add(children)

    def add(self, children: list[str]) -> None:
        for child in children:
            self.up.labels(child).set(0)
            self.restarts.labels(child)


class _Child:
    """One role and when it may be started again."""

    def __init__(self, process: RoleProcess) -> None:
        self.process = process
        self.started = 0.0
        self.backoff_s = _BACKOFF_FIRST_S
        self.restart_at: float | None = None  # set while it waits out its back-off


def roles_of(settings: Settings) -> list[str]:
    roles = [REPLICATOR, DEDUPLICATOR]
    if settings.groups_include:
        roles.append(OFFSETSYNC)
    return roles


@dataclass(frozen=True)
class Plan:
    """One child process: its name, the role it runs, what its environment adds, its port."""

    name: str
    role: str
    env: dict[str, str]
    metrics_port: int


def plan(settings: Settings, roles: list[str]) -> list[Plan]:
    """The children of `roles`, a stage as REPLICATION_WORKERS workers, in port order."""
    plans: list[Plan] = []
    for role in roles:
        workers = settings.workers if role in STAGES else 1
        for n in range(1, workers + 1):
            port = settings.metrics_port + len(plans) + 1 if settings.metrics_port else 0
            env = {"METRICS_PORT": str(port)}
            if workers > 1:
                env |= {
                    "REPLICATION_WORKERS": "1",
                    "REPLICATION_INSTANCE_ID": f"{settings.identity}-{n}",
                    "STATE_DIR": str(Path(settings.state_dir) / f"worker-{n}"),
                }
            name = role if workers == 1 else f"{role}-{n}"
            plans.append(Plan(name, role, env, port))
    return plans


def run() -> int:
    """`exactly run`; the exit status."""
    # Every role's series exist from the start (offset sync's at 0 when it does not run): the
    # registry is served before the configuration says which roles run.
    metrics = _Metrics([REPLICATOR, DEDUPLICATOR, OFFSETSYNC])

    def work(
        settings: Settings, health: Health, shutdown: GracefulShutdown, heartbeat: Heartbeat
    ) -> None:
        _supervise(plan(settings, roles_of(settings)), health, shutdown, heartbeat, metrics)

    return run_role("run", work, registry=metrics.registry)


def run_stage(role: str, run_alone: Callable[[], int]) -> int:
    """`exactly replicator|deduplicator`: the stage itself (``run_alone``), or with
    REPLICATION_WORKERS above 1 that many workers of it, supervised; the exit status."""
    try:
        workers = load_settings().workers
    except ConfigError:
        workers = 1  # the stage itself says what is wrong, in its own words
    if workers == 1:
        return run_alone()
    metrics = _Metrics([])

    def work(
        settings: Settings, health: Health, shutdown: GracefulShutdown, heartbeat: Heartbeat
    ) -> None:
        _supervise(plan(settings, [role]), health, shutdown, heartbeat, metrics)

    return run_role(role, work, registry=metrics.registry)


def _supervise(
    plans: list[Plan],
    health: Health,
    shutdown: GracefulShutdown,
    heartbeat: Heartbeat,
    metrics: _Metrics,
) -> None:
    metrics.add([p.name for p in plans])
    children = {
        p.name: _Child(
            RoleProcess(
                p.role, {**os.environ, **p.env}, None, name=p.name, metrics_port=p.metrics_port
            )
        )
        for p in plans
    }
    log.info(
        "starting the roles",
        roles=",".join(children),
        metrics_ports=_describe({p.name: p.metrics_port for p in plans}),
    )
    for name, child in children.items():
        _start(name, child, metrics)
    with heartbeat:
        try:
            while not shutdown.wait(_LOOK_EVERY_S):
                heartbeat.beat()
                for name, child in children.items():
                    _look_after(name, child, metrics)
                waiting = [name for name, c in children.items() if c.restart_at is not None]
                health.set_ready(not waiting, f"waiting to start again: {','.join(waiting)}")
        finally:
            health.set_ready(False, "stopping")
            clean = _drain(children, metrics)
    if not clean:
        raise RoleNotDrainedError("a role did not drain cleanly (see its lines above)")


def _start(role: str, child: _Child, metrics: _Metrics) -> None:
    pid = child.process.start().pid
    child.started = time.monotonic()
    child.restart_at = None
    metrics.up.labels(role).set(1)
    log.info("role started", child=role, pid=pid, start=child.process.starts)


def _look_after(role: str, child: _Child, metrics: _Metrics) -> None:
    now = time.monotonic()
    if child.restart_at is not None:
        if now >= child.restart_at:
            _start(role, child, metrics)
        return
    status = child.process.unexpected_exit()
    if status is None:
        return
    metrics.up.labels(role).set(0)
    if status == EXIT_CONFIG:
        # Starting it again would fail the same way: an operator must act.
        raise ConfigError(role, f"the role exited {status}: its configuration is wrong")
    metrics.restarts.labels(role).inc()
    if status == EXIT_RELOAD:
        # Drained to load renewed credential files: asked for, not a crash, so no back-off.
        child.restart_at = now
        log.info("role starting again with renewed credentials", child=role)
        return
    if now - child.started >= _HEALTHY_AFTER_S:
        child.backoff_s = _BACKOFF_FIRST_S
    child.restart_at = now + child.backoff_s
    log.warning(
        "role exited; starting again",
        child=role,
        exit_status=status,
        ran_s=round(now - child.started, 1),
        in_s=child.backoff_s,
    )
    child.backoff_s = min(child.backoff_s * 2, _BACKOFF_MAX_S)


def _drain(children: Mapping[str, _Child], metrics: _Metrics) -> bool:
    """SIGTERM to every role at once, then wait for each within one deadline; whether all
    drained, exit 0 or 3 (a role waiting out its back-off has nothing to drain)."""
    running = {role: c for role, c in children.items() if c.process.is_running()}
    for child in running.values():
        child.process.ask_to_stop()
    deadline = time.monotonic() + DRAIN_S
    clean = True
    for role, child in running.items():
        status = child.process.await_stop(deadline - time.monotonic())
        metrics.up.labels(role).set(0)
        if status in (0, EXIT_RELOAD):  # 3: it was draining for renewed credentials already
            log.info("role drained", child=role)
        else:
            clean = False
            log.warning("role did not drain cleanly", child=role, exit_status=status)
    return clean


def _describe(ports: Mapping[str, int]) -> str:
    if not any(ports.values()):
        return "off"
    return ",".join(f"{role}:{port}" for role, port in ports.items())


class RoleNotDrainedError(ExactlyError):
    """A role did not exit 0 within the drain time after SIGTERM (exit 1)."""
