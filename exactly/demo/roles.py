"""Stage 1, stage 2 and the offset sync as child processes, the way an operator runs them:
`python -m replicator`, `python -m deduplicator` and `python -m offsetsync`, configured by the
environment only.

Each role runs in a session of its own, so Ctrl-C in the terminal reaches the demo alone and the
demo stops the roles itself, in order; and with a parent-death signal, so that not even a demo
killed with SIGKILL leaves one behind. Output goes to `<log dir>/<role>.log`, appended across
restarts with a marker line per start.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

REPLICATOR = "replicator"
DEDUPLICATOR = "deduplicator"
OFFSETSYNC = "offsetsync"
_PR_SET_PDEATHSIG = 1
_KILL_WAIT_S = 10.0
# Metrics ports below both localkafka's broker ports (20000-32000) and the ephemeral range
# (32768+): a port a broker or an outgoing socket takes while a role restarts would make the
# role's restart fail.
_METRICS_PORTS = (15000, 20000)


def free_metrics_ports(count: int) -> list[int]:
    """`count` distinct ports that are free now, each kept by one role across its restarts."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(*_METRICS_PORTS)
        if port not in ports and _port_is_free(port):
            ports.append(port)
    return ports


def free_port_block(count: int) -> int:
    """The first of `count` consecutive ports that are free now: a process's metrics port and
    its roles' on the ports after it (`exactly run`)."""
    while True:
        first = random.randrange(_METRICS_PORTS[0], _METRICS_PORTS[1] - count)
        if all(_port_is_free(first + i) for i in range(count)):
            return first


class RoleProcess:
    """One role as a child process that the demo (or `exactly run`) starts, SIGKILLs, restarts
    and stops. Without a log directory its output is this process's own (a container's log)."""

    def __init__(
        self, role: str, env: Mapping[str, str], log_dir: Path | None, metrics_port: int
    ) -> None:
        self.role = role
        self.metrics_port = metrics_port
        self.env = dict(env)
        self.log_path = None if log_dir is None else log_dir / f"{role}.log"
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._expected_exit = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> int:
        """Start the role; its pid."""
        command = [sys.executable, "-m", self.role]
        self.starts += 1
        with contextlib.ExitStack() as stack:
            log = None
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                log = stack.enter_context(self.log_path.open("ab"))
                log.write(f"=== exactly demo: start {self.starts} at {time.ctime()}\n".encode())
                log.flush()
            self._process = subprocess.Popen(
                command,
                env=self.env,
                cwd=None if self.log_path is None else self.log_path.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=None if log is None else subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(),
            )
        self._expected_exit = False
        return self._process.pid

    def kill(self) -> int | None:
        """SIGKILL the role's process group, as a crash would; the pid it had."""
        process = self._process
        if process is None:
            return None
        self._expected_exit = True
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it died on its own a moment ago
                os.killpg(process.pid, signal.SIGKILL)
        process.wait(_KILL_WAIT_S)
        return process.pid

    def terminate(self, timeout_s: float) -> int | None:
        """SIGTERM (the role drains and exits 0), SIGKILL after `timeout_s`.

        The exit status, or None when it had to be SIGKILLed (or never ran).
        """
        self.ask_to_stop()
        return self.await_stop(timeout_s)

    def ask_to_stop(self) -> None:
        """SIGTERM, without waiting: several roles drain side by side."""
        process = self._process
        if process is None:
            return
        self._expected_exit = True
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)

    def await_stop(self, timeout_s: float) -> int | None:
        """After ``ask_to_stop``: the exit status, or None when it had to be SIGKILLed after
        ``timeout_s`` (or never ran)."""
        process = self._process
        if process is None:
            return None
        try:
            return process.wait(max(timeout_s, 0))
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def unexpected_exit(self) -> int | None:
        """The exit status when the role ended by itself (not by the demo's hand), else None."""
        if self._process is None or self._expected_exit:
            return None
        return self._process.poll()

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        if self.log_path is None:
            return "(its output is this process's own)"
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_path})"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- last {lines} lines of {self.log_path}:\n{tail}"


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))  # where the roles serve /metrics
        except OSError:
            return False
    return True


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function that makes the kernel SIGKILL the child when the demo dies.

    prctl is looked up here, in the parent: the child between fork and exec must not load
    libraries (another thread of the demo may have held the loader's lock at the fork).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec
