"""A role (``python -m <module>``) as a child process, the way ``exactly run`` (and the demo,
the tests and the benches) start, crash, restart and stop one; and the pieces of it others reuse
(``die_with_parent``, ``log_tail``).

Each process runs in a session of its own, so a SIGKILL reaches the role's children too and
Ctrl-C in a terminal reaches only the parent, which stops the roles itself; and with a
parent-death signal, so that not even a parent killed with SIGKILL leaves one behind. Its
environment is ours without the product's own variables (``runtime.settings.role_environment``)
plus the ones given. Its output goes to ``<log dir>/<name>.log``, appended across restarts with a
marker line per start, or, without a log directory, to our own output (a container's log).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Self

from runtime.closeable import Closeable
from runtime.settings import role_environment

_PR_SET_PDEATHSIG = 1
_KILL_WAIT_S = 30.0
_POLL_S = 0.1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the child when its parent dies (Linux).

    prctl is looked up here, in the parent: the child between fork and exec must not load
    libraries (another thread of the parent may have held the loader's lock at the fork).
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


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, under a line that names it."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    tail = "\n".join(text.splitlines()[-lines:])
    return f"--- last {lines} lines of {path}:\n{tail}"


class RoleProcess(Closeable):
    """One role as a child process; a context manager that SIGKILLs it on exit, whatever
    happened. ``start`` returns the handle itself, so ``RoleProcess(...).start()`` reads well."""

    def __init__(
        self,
        module: str,
        env: Mapping[str, str],
        log_dir: Path | None,
        *,
        args: Sequence[str] = (),
        name: str | None = None,
        cwd: Path | None = None,
        metrics_port: int | None = None,
    ) -> None:
        self.role = module
        self.name = name or module
        self.command = [sys.executable, "-m", module, *args]
        self.env = role_environment(env)
        self.cwd = cwd
        self.metrics_port = metrics_port
        self.log_path = None if log_dir is None else Path(log_dir) / f"{self.name}.log"
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where the latest start's output begins in the log file
        self._expected_exit = False

    # -- starting and stopping ----------------------------------------------------------------

    def start(self) -> Self:
        if self.is_running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        with contextlib.ExitStack() as stack:
            log = None
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                log = stack.enter_context(self.log_path.open("ab"))
                command = " ".join(self.command)
                log.write(f"=== start {self.starts} at {time.ctime()}: {command}\n".encode())
                log.flush()
                self._log_start = log.tell()
            self._process = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=None if log is None else subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        self._expected_exit = False
        return self

    def kill(self) -> int | None:
        """SIGKILL the role's process group, as a crash would, and wait until it is gone; the
        pid it had (None if it never ran)."""
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
        """SIGTERM (the role drains and exits 0), SIGKILL after ``timeout_s``: the exit status,
        or None when it had to be SIGKILLed (or never ran)."""
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

    def wait(self, timeout_s: float) -> int | None:
        """Wait for the role to exit on its own: its exit status, or None if it still runs."""
        if self._process is None:
            raise RuntimeError(f"{self.name} was never started")
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    # -- what it is doing ---------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def unexpected_exit(self) -> int | None:
        """The exit status when the role ended by itself (not by our hand), else None."""
        if self._process is None or self._expected_exit:
            return None
        return self._process.poll()

    def log_text(self, *, since_start: bool = False) -> str:
        """The whole log, or only what the latest start wrote."""
        if self.log_path is None:
            return ""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start if since_start else 0)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None:
            return "(its output is this process's own)"
        return log_tail(self.log_path, lines)

    def wait_for_log(
        self, pattern: str, timeout_s: float = 30.0, *, since_start: bool = True
    ) -> re.Match[str]:
        """Poll the log (by default only the latest start's part) until ``pattern`` appears;
        a ``TimeoutError`` naming the log's tail if the timeout passes or the role exits first."""
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout_s
        while True:
            exited = not self.is_running()  # before reading: no output is lost to the race
            match = regex.search(self.log_text(since_start=since_start))
            if match:
                return match
            if exited:
                raise TimeoutError(
                    f"{self.name} exited with {self.returncode} before logging {pattern!r}.\n"
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} did not log {pattern!r} within {timeout_s} s.\n{self.log_tail()}"
                )
            time.sleep(_POLL_S)

    def close(self) -> None:
        """What leaving a ``with`` block does: SIGKILL, whatever happened."""
        self.kill()

    def __enter__(self) -> Self:
        if self._process is None:
            self.start()
        return self

    def __repr__(self) -> str:
        state = "running" if self.is_running() else f"exited {self.returncode}"
        return f"RoleProcess({self.name!r}, pid={self.pid}, {state})"
