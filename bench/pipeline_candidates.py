"""The candidates of bench/pipeline_vs_mirrormaker.py as processes on the bench's two clusters:
the pipeline's two roles, MirrorMaker 2 (set up by the subclass that compares them), and either
one as the candidate of a phase under paced traffic."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.mirrormaker import MirrorMaker2
from bench.replicator_throughput import PARTITIONS
from localkafka import LocalCluster, RoleProcess


class Candidates:
    """The bench's clusters and what both candidates run with; the phases are its subclasses'."""

    def __init__(self, clusters: list[LocalCluster], base: Path, libs: Path, *, verify: bool):
        self.source, self.target = (c.bootstrap_servers for c in clusters)
        # Node 1's replica of a topic stands for its size (every node holds one at RF 3).
        self.data_dirs = [next(iter(c.nodes.values())).data_dir for c in clusters]
        self.broker_pids = [node.pid for c in clusters for node in c.nodes.values()]
        self.base = base
        self.libs = libs
        self.verify = verify
        # Extra settings of both roles (bench/commit_limits.py varies the commit limits).
        self.pipeline_env: dict[str, str] = {}
        self.staging_compressions = ["lz4"]
        self.workers = [1]  # REPLICATION_WORKERS of the pipeline's candidates beyond the first
        # Extra producer settings of MirrorMaker 2 and its heap (bench/scale_sizes.py).
        self.mm2_producer: dict[str, str] = {}
        self.mm2_heap = "1g"

    @contextmanager
    def _roles(
        self,
        flow: str,
        topic: str,
        extra: dict[str, str] | None = None,
        own: dict[str, dict[str, str]] | None = None,
    ) -> Iterator[tuple[RoleProcess, RoleProcess]]:
        """Both stages of ``flow`` copying ``topic``, with ``extra`` settings and each role's
        ``own`` (role -> settings: a metrics port of its own, say)."""
        env = {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": self.source,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": self.target,
            "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
            "REPLICATION_DESTINATION_TOPIC": "pipeline.{topic}",
            "REPLICATION_FLOW": flow,
            "REPLICATION_STAGING_PARTITIONS": str(PARTITIONS),
            "STATE_DIR": str(self.base / "state" / flow),
            "METRICS_PORT": "0",
            **self.pipeline_env,
            **(extra or {}),
        }
        logs = self.base / "roles" / flow
        with ExitStack() as stack:
            started = []
            for role in ("replicator", "deduplicator"):
                role_env = {**env, **(own or {}).get(role, {})}
                # The kit's process dies with the bench (even a SIGKILLed one): no role
                # outlives the bench and its clusters. Workers are started by the command line.
                if env.get("REPLICATION_WORKERS", "1") == "1":
                    process = RoleProcess(role, role_env, logs)
                else:
                    process = RoleProcess("exactly", role_env, logs, args=(role,), name=role)
                started.append(stack.enter_context(process))
            yield started[0], started[1]

    def _mirrormaker(
        self, alias: str, topic: str, *, exactly_once: bool, pattern: str | None = None
    ) -> MirrorMaker2:
        """MirrorMaker 2 from ``topic`` (or every topic ``pattern`` matches) on the source, as
        the comparison sets it up."""
        raise NotImplementedError

    @contextmanager
    def _candidate(
        self, candidate: str, topic: str, tag: str
    ) -> Iterator[tuple[str, Callable[[], None]]]:
        if candidate == "pipeline":
            with self._roles(f"bench-{tag}", topic) as (replicator, deduplicator):
                yield f"pipeline.{topic}", lambda: check_roles(replicator, deduplicator)
        else:
            with self._mirrormaker(f"mm2eos{tag}", topic, exactly_once=True) as mm2:
                yield mm2.destination_topic, lambda: check_mm2(mm2)


def add_pipeline_env(parser: argparse.ArgumentParser) -> None:
    """--pipeline-env NAME=VALUE: what the bench puts in ``Candidates.pipeline_env``."""
    parser.add_argument(
        "--pipeline-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable of both stages (repeatable), e.g. a librdkafka property",
    )


def check_roles(*roles: RoleProcess) -> None:
    for role in roles:
        if not role.is_running():
            raise RuntimeError(f"{role.name} exited with {role.returncode}\n{role.log_tail()}")


def check_mm2(mm2: MirrorMaker2) -> None:
    if not mm2.is_running():
        # Its own end (an OutOfMemoryError, its heap too small for what it was given): this
        # copy has no result, the next one is made all the same.
        raise CandidateFailedError(f"MirrorMaker 2 exited\n{mm2.log_tail()}\n{mm2.stdout_tail()}")
    killed = mm2.dead_task()
    if killed is not None:
        # Its partitions would never be copied: a copy that waited for them would time out.
        raise CandidateFailedError(f"a MirrorMaker 2 task died: {killed}")


class CandidateFailedError(RuntimeError):
    """A candidate stopped copying for a reason of its own (not the bench's): the copy has no
    result, and the bench goes on with the next."""
