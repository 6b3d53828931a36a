"""What every role process does around its work (docs/design.md §7): configuration from the
environment (one line and exit 2 when it is wrong), logging, metrics and health over HTTP,
SIGTERM drain, liveness from the loop's heartbeat, and exit 1 for a fatal error so that the
orchestrator restarts the process."""

from __future__ import annotations

import faulthandler
import gc
import signal
import sys
from collections.abc import Callable, Mapping
from contextlib import ExitStack

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry, ProcessCollector

from runtime.broker_reach import BROKER_REACH
from runtime.credential_files import (
    CertificateValidity,
    CredentialFiles,
    CredentialWatch,
    WatchedFile,
)
from runtime.errors import ConfigError, ExactlyError, FencedError
from runtime.flow_label import FlowLabelledRegistry
from runtime.http import Health, serve_http
from runtime.identity import IdentityClaim
from runtime.kafka_errors import kafka_error_of, to_client_error
from runtime.liveness import Heartbeat
from runtime.logs import EventLogger, configure_logging, get_logger
from runtime.settings import Settings, load_settings
from runtime.shutdown import GracefulShutdown

EXIT_FATAL = 1
EXIT_CONFIG = 2
# Drained to start again with renewed credential files (runtime/credential_files.py): a restart
# asked for, not a failure. Not 0, which a `restart: on-failure` policy would leave stopped.
EXIT_RELOAD = 3
# Longer than anything a role loop may legitimately wait for (admin calls, rebalance flushes).
LOOP_SILENCE_S = 120.0

Work = Callable[[Settings, Health, GracefulShutdown, Heartbeat], None]


def run_role(
    role: str,
    work: Work,
    *,
    registry: CollectorRegistry,
    member: bool = False,
    clusters: tuple[str, ...] = (),
) -> int:
    """Run `work` as the process's role; returns the exit status.

    Fatal (exit 1, the orchestrator restarts us) is decided by class: every error of ours
    derives from ``ExactlyError`` (runtime/errors.py), and a ``KafkaException`` a role did not
    translate is fatal too. Anything else is a bug and keeps its traceback.

    A ``member`` (a stage, a static member of its group) holds its identity's host-local claim
    for its whole life, from before its first client (runtime/identity.py).

    ``clusters`` are those its clients connect to (``"source"``, ``"destination"``): their
    credential files are watched, and renewed ones end the work by a drain and ``EXIT_RELOAD``.
    """
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"exactly {role}: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if member and settings.workers > 1:
        # Never silently one worker where N were asked for.
        print(
            f"exactly {role}: configuration error: REPLICATION_WORKERS={settings.workers}: "
            f"`python -m {role}` is one worker; `exactly {role}` or `exactly run` starts "
            f"{settings.workers}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        return _serve(role, work, settings, registry=registry, member=member, clusters=clusters)
    finally:
        _destroy_clients()


def _serve(
    role: str,
    work: Work,
    settings: Settings,
    *,
    registry: CollectorRegistry,
    member: bool,
    clusters: tuple[str, ...],
) -> int:
    # What the credential files hold now, as close as can be to when the settings read the
    # `_FILE` values and before any client loads a certificate.
    credential_files = CredentialFiles(settings, clusters)
    exit_status = 0
    configure_logging(settings.log_level, role, json=settings.log_format == "json")
    # A crash in a client's native code (SIGSEGV, SIGABRT) prints every thread's Python stack
    # to the role's log before the process dies, so that a signal exit says where it came from.
    faulthandler.enable(all_threads=True)
    # `kill -USR1 <pid>` prints every thread's Python stack to stderr: what a stuck loop (a
    # 503 on /healthz) is waiting in, without stopping the process.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    log = get_logger(role)
    health = Health()
    try:
        with ExitStack() as held:
            if member:  # first: a twin's one line, not a taken metrics port
                claim = held.enter_context(IdentityClaim(settings.flow, role, settings.identity))
                log.info(
                    "instance identity",
                    identity=settings.identity,
                    host_claim=claim.skipped or "held",
                )
            # Resident memory, CPU seconds, open files: what a pod's requests and limits are
            # set by.
            ProcessCollector(registry=registry)
            # Brokers the process's clients fail to reach (the ExactlyBrokerUnreachable alert).
            registry.register(BROKER_REACH)
            # When its client certificates expire (the ExactlyCertificateExpiring alert).
            registry.register(CertificateValidity(settings, clusters))
            server = serve_http(
                settings.metrics_port,
                registry=FlowLabelledRegistry(registry, settings.flow),
                health=health,
                host=settings.metrics_host,
            )
            if server is not None:
                held.enter_context(server)
            shutdown = held.enter_context(GracefulShutdown())
            if settings.credentials_check_ms > 0:

                def on_renewed(files: list[WatchedFile]) -> None:
                    if shutdown.requested:
                        return  # already draining: the files are loaded at the next start
                    log.info(
                        "credential files renewed; draining to start again with them",
                        files=", ".join(str(file) for file in files),
                    )
                    shutdown.request("credential files renewed", exit_status=EXIT_RELOAD)

                interval_s = settings.credentials_check_ms / 1000
                held.enter_context(CredentialWatch(credential_files, interval_s, on_renewed))
            work(settings, health, shutdown, Heartbeat(health, LOOP_SILENCE_S))
            exit_status = shutdown.exit_status
    except ConfigError as exc:
        # A combination only this role needs (checked by its work before it starts).
        print(f"exactly {role}: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KafkaException as exc:
        _log_fatal(log, role, settings, to_client_error(kafka_error_of(exc)))
        return EXIT_FATAL
    except ExactlyError as exc:
        _log_fatal(log, role, settings, exc)
        return EXIT_FATAL
    if exit_status == EXIT_RELOAD:
        log.info(f"{role} stopped to start again with renewed credentials", exit_status=exit_status)
        return exit_status
    log.info(f"{role} stopped cleanly")
    return 0


def _destroy_clients() -> None:
    """Destroy every Kafka client the work left while the interpreter is still whole. A client
    in a reference cycle (its callbacks are bound methods of the loop that owns it) outlives
    the work, and freeze_startup_garbage puts it out of the collector's reach: its native
    threads would then still run while the interpreter and the TLS library are torn down at
    exit. The likely cause of the one SIGSEGV (-11) seen in CI from a stage that had logged
    its fatal error and was to exit 1."""
    gc.unfreeze()
    gc.collect()


def _log_fatal(log: EventLogger, role: str, settings: Settings, error: ExactlyError) -> None:
    if isinstance(error, FencedError):
        # A live twin on another host (runtime/identity.py): say which identity and the cure,
        # since a restart of this one would only fence the other in turn.
        log.error(
            f"{role} fenced: another live instance has joined with this instance's identity",
            identity=settings.identity,
            hint="give each instance its own REPLICATION_INSTANCE_ID",
            error=str(error),
        )
        return
    log.error(f"{role} stopped by a fatal error", error=str(error))


def freeze_startup_garbage() -> None:
    """docs/design.md §10: keep the collector out of the hot loop. Everything made during start-up
    is long-lived; freezing it spares every collection from scanning it, and the loop's own
    garbage (message rows, envelopes) is freed by reference counting."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def on_consumer_group_protocol(config: Mapping[str, object]) -> bool:
    """Whether a consumer of ``config`` is on the consumer group protocol of KIP-848
    (``group.protocol=consumer``): the broker assigns, incrementally, and librdkafka refuses a
    client-side assignor with it; librdkafka's default is the classic protocol."""
    return str(config.get("group.protocol", "classic")) == "consumer"


def static_membership(settings: Settings, role: str) -> dict[str, str]:
    """group.instance.id, always: a restarted instance takes its partitions back at once
    instead of waiting for the group's session timeout (runtime/identity.py)."""
    return {"group.instance.id": settings.names.group_instance_id(role, settings.identity)}
