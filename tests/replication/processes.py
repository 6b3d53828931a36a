"""Run a role (`python -m <role>`) as an OS process, the way a test crashes and restarts it.

    @pytest.fixture
    def roles(tmp_path):
        with role_processes(tmp_path) as started:
            yield started          # started.start("replicator", env) -> RoleProcess

Every process gets the test's environment minus the product's own variables (so a developer's
shell settings never leak into a test), plus the ones the test gives; its stdout and stderr go
to `<log_dir>/<name>.log`, appended across restarts with a marker line per start.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from runtime.settings import role_environment

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
_POLL_S = 0.1


class RoleProcess:
    """One role as a child process; a context manager that kills it on exit, whatever happened."""

    def __init__(
        self,
        role: str,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        args: Sequence[str] = (),
        name: str | None = None,
        cwd: Path = REPOSITORY_ROOT,
    ) -> None:
        self.role = role
        self.name = name or role
        self.command = [sys.executable, "-m", role, *args]
        self.env = role_environment(env)
        self.cwd = cwd
        self.log_path = Path(log_dir) / f"{self.name}.log"
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where the latest start's output begins in the log file

    def start(self) -> RoleProcess:
        if self.is_running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"=== start {self.starts}: {' '.join(self.command)}\n".encode())
            log.flush()
            self._log_start = log.tell()
            # A session of its own: a kill reaches the role's children too, never pytest.
            self._process = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL (a crash, not a shutdown) and wait until it is gone."""
        if self._process is None:
            return
        if self._process.poll() is None:
            with suppress(ProcessLookupError):  # it died on its own a moment ago
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait(30)

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM, wait for a graceful exit and return its code; SIGKILL and fail after timeout."""
        if self._process is None:
            raise RuntimeError(f"{self.name} was never started")
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                return self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"{self.name} did not exit within {timeout_s} s of SIGTERM; killed it.\n"
                    f"{self.log_tail()}"
                ) from None
        return self._process.returncode

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit on its own; its exit code."""
        if self._process is None:
            raise RuntimeError(f"{self.name} was never started")
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout_s} s.\n{self.log_tail()}"
            ) from None

    def log_text(self, *, since_start: bool = False) -> str:
        """The whole log, or only what the latest start wrote."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start if since_start else 0)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        tail = "\n".join(self.log_text().splitlines()[-lines:])
        return f"--- last {lines} lines of {self.log_path}:\n{tail}"

    def wait_for_log(
        self, pattern: str, timeout_s: float = 30.0, *, since_start: bool = True
    ) -> re.Match[str]:
        """Poll the log (by default only the latest start's part) until `pattern` appears.

        Fails with the log's tail if the timeout passes or the process exits first.
        """
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout_s
        while True:
            exited = not self.is_running()  # before reading: no output is lost to the race
            match = regex.search(self.log_text(since_start=since_start))
            if match:
                return match
            if exited:
                raise AssertionError(
                    f"{self.name} exited with {self.returncode} before logging {pattern!r}.\n"
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name} did not log {pattern!r} within {timeout_s} s.\n{self.log_tail()}"
                )
            time.sleep(_POLL_S)

    def __enter__(self) -> RoleProcess:
        if self._process is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else f"exited {self.returncode}"
        return f"RoleProcess({self.name!r}, pid={self.pid}, {state})"


class RoleProcesses:
    """Starts roles with logs in one directory and kills every one of them in kill_all()."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self.started: list[RoleProcess] = []

    def start(
        self,
        role: str,
        env: Mapping[str, str],
        *,
        args: Sequence[str] = (),
        name: str | None = None,
    ) -> RoleProcess:
        """Start `python -m role`; several of one role need distinct names (their log files)."""
        names = {process.name for process in self.started}
        name = name or role
        if name in names:
            name = f"{name}-{sum(p.role == role for p in self.started) + 1}"
        process = RoleProcess(role, env, self.log_dir, args=args, name=name)
        self.started.append(process)
        return process.start()

    def kill_all(self) -> None:
        for process in self.started:
            process.kill()


@contextmanager
def role_processes(log_dir: Path) -> Iterator[RoleProcesses]:
    """A RoleProcesses whose processes are all SIGKILLed when the block ends (fixture teardown)."""
    processes = RoleProcesses(log_dir)
    try:
        yield processes
    finally:
        processes.kill_all()
