"""Run a role (`python -m <role>`) as an OS process, the way a test crashes and restarts it.

    with role_processes(tmp_path) as started:   # tests/conftest.py's `roles` fixture
        started.start("replicator", env)        # -> RoleProcess

Every process gets the test's environment minus the product's own variables (so a developer's
shell settings never leak into a test), plus the ones the test gives; its stdout and stderr go
to `<log_dir>/<name>.log`, appended across restarts with a marker line per start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import localkafka

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
# How long a role is given to write its stacks (faulthandler, from a signal handler) to its log.
STACK_DUMP_S = 1.0


class RoleProcess(localkafka.RoleProcess):
    """The kit's process handle (localkafka.processes), failing a test loudly: a role that does
    not stop or exit when asked raises AssertionError with its log's tail."""

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
        super().__init__(role, env, log_dir, args=args, name=name, cwd=cwd)

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM, wait for a graceful exit and return its code; SIGKILL and fail after timeout."""
        if self.pid is None:
            raise RuntimeError(f"{self.name} was never started")
        status = super().terminate(timeout_s)
        if status is None:
            raise AssertionError(
                f"{self.name} did not exit within {timeout_s} s of SIGTERM; killed it.\n"
                f"{self.log_tail()}"
            )
        return status

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit on its own; its exit code."""
        status = super().wait(timeout_s)
        if status is None:
            raise AssertionError(
                f"{self.name} still running after {timeout_s} s.\n{self.log_tail()}"
            )
        return status


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

    @staticmethod
    def ended(process: RoleProcess) -> str:
        """' (exited N)' for a role that is no longer running, else nothing."""
        return "" if process.is_running() else f" (exited {process.returncode})"

    def dump_stacks(self) -> None:
        """Have every role still running print its threads' Python stacks to its log (SIGUSR1,
        runtime/role.py): a test that failed on a role standing still shows where it waits."""
        running = [process for process in self.started if process.is_running()]
        for process in running:
            assert process.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGUSR1)
        if running:
            time.sleep(STACK_DUMP_S)


@contextmanager
def role_processes(log_dir: Path) -> Iterator[RoleProcesses]:
    """A RoleProcesses whose processes are all SIGKILLed when the block ends (fixture teardown);
    a block that fails prints each role's log tail."""
    processes = RoleProcesses(log_dir)
    try:
        yield processes
    except BaseException:
        # A failed assertion often names only what is missing: the roles' own words say why,
        # and where each one still running waits. Printed, pytest shows it with the failure.
        processes.dump_stacks()
        for process in processes.started:
            print(f"--- {process.name}{processes.ended(process)}")
            print(process.log_tail(80))
        raise
    finally:
        processes.kill_all()
