"""Who this instance is to Kafka, and the guard that keeps two live instances from being one.

Each stage instance has one stable identity: ``REPLICATION_INSTANCE_ID``, or else the host
name (a StatefulSet pod's name, a container's id, a machine's name). It becomes stage 1's and
stage 2's ``group.instance.id`` (static membership: a restarted instance takes its partitions
back at once instead of after the group's session timeout) and stage 2's ``transactional.id``.

Two live instances with one identity fence each other in turn, each restart taking the
partitions from the other. With the default identity such twins share a host name, so they
almost always share a host: before it joins anything, an instance takes a lock named after
its flow, role and identity in the host's temporary directory, and a second live instance
with that identity stops at start-up with one line naming it, never fencing the first. The
kernel drops the lock with the process, so a SIGKILLed instance's successor starts at once.
Twins on different hosts (the same ``REPLICATION_INSTANCE_ID`` given twice) are caught by
the broker instead: the older one is fenced and exits saying so (runtime.role).
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import tempfile
from pathlib import Path

from runtime.closeable import Closeable
from runtime.errors import IdentityTakenError
from runtime.values import FLOW_NAME_MAX

_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9._-]+")


def host_identity() -> str:
    """The host name as an identity: the characters a client id may hold, at most 100."""
    name = _NOT_IN_A_NAME.sub("-", socket.gethostname()).strip("-")
    return name[:FLOW_NAME_MAX] or "localhost"


class IdentityClaim(Closeable):
    """Held for the life of a stage instance; released by ``close()`` or the process's end.

    Where no temporary directory can be written (a read-only root file system, as our
    Kubernetes manifests run) there is no claim, and ``skipped`` says why: one container per
    pod holds one role, so twins there are on different hosts, the broker's case.
    """

    def __init__(self, flow: str, role: str, identity: str, directory: Path | None = None) -> None:
        self.skipped: str | None = None
        self._fd = -1
        try:
            directory = directory or Path(tempfile.gettempdir())
            # The user id in the name: another user's file in a shared /tmp cannot be opened.
            path = directory / f"exactly.{os.getuid()}.{flow}.{role}.{identity}.lock"
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:  # gettempdir() raises FileNotFoundError when none is writable
            self.skipped = f"no writable temporary directory: {exc}"
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            self.close()
            raise IdentityTakenError(
                "REPLICATION_INSTANCE_ID",
                f"another {role} of flow {flow!r} with this instance id is running on this "
                f"host (pid {holder}); give each instance its own",
                identity,
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # releases the lock; the file stays, harmless and reused
            self._fd = -1
