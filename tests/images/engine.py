"""A Docker engine for the image tests (`make test-images`), and the docker commands they type.

The engine is the one DOCKER_HOST names when it answers; otherwise Debian's `dockerd` (package
docker.io, which `make test-images` installs) started on a private socket and stopped when the
tests end, its images kept in the cache beside the Kafka jars so that a second run builds from
cached layers. The client is Debian's too (`/usr/bin/docker`, 20.10): it builds with BuildKit
by itself, where a newer client without the buildx plugin cannot.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localkafka import die_with_parent
from runtime.cache import cache_root

DEBIAN_DOCKER = Path("/usr/bin/docker")
DEBIAN_DOCKERD = Path("/usr/sbin/dockerd")
_START_TIMEOUT_S = 60.0


class EngineUnavailableError(RuntimeError):
    """No engine answers and none can be started here (the reason is the message)."""


@dataclass(frozen=True)
class Engine:
    host: str  # DOCKER_HOST
    client: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "1"}

    def docker(
        self, *args: str, timeout: float = 120, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`docker args...`; its output in the error when ``check`` and it fails."""
        done = subprocess.run(
            [str(self.client), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
            )
        return done

    def answers(self) -> bool:
        return (
            self.docker("version", "--format", "{{.Server.Version}}", check=False).returncode == 0
        )

    def has_image(self, tag: str) -> bool:
        return self.docker("image", "inspect", tag, check=False).returncode == 0

    def image_size_mb(self, tag: str) -> float:
        return int(self.docker("image", "inspect", tag, "--format", "{{.Size}}").stdout) / 1e6


@dataclass(frozen=True)
class Build:
    tag: str
    seconds: float
    log: str

    def cached_steps(self) -> list[str]:
        """The steps BuildKit took from its cache: with `--progress=plain` each step is
        announced as `#N [stage i/n] INSTRUCTION` and, when cached, said `#N CACHED`."""
        titles: dict[str, str] = {}
        cached = []
        for line in self.log.splitlines():
            number, _, rest = line.partition(" ")
            if rest.startswith("["):
                titles.setdefault(number, rest)
            elif rest == "CACHED" and number in titles:
                cached.append(titles[number])
        return cached


def build(
    engine: Engine,
    context: Path,
    *,
    target: str | None,
    tag: str,
    build_args: dict[str, str] | None = None,
    secrets: dict[str, Path] | None = None,
    dockerfile: Path | None = None,
    timeout: float = 1800,
) -> Build:
    """`docker build` with BuildKit's plain log, timed."""
    argv = ["build", "--progress=plain", "--tag", tag]
    if target:
        argv += ["--target", target]
    if dockerfile is not None:
        argv += ["--file", str(dockerfile)]
    for name, value in (build_args or {}).items():
        argv += ["--build-arg", f"{name}={value}"]
    for name, path in (secrets or {}).items():
        argv += ["--secret", f"id={name},src={path}"]
    started = time.monotonic()
    done = engine.docker(*argv, str(context), timeout=timeout, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise AssertionError(f"building {tag} failed after {seconds:.0f} s\n{done.stderr[-6000:]}")
    return Build(tag, seconds, done.stderr)


@contextlib.contextmanager
def docker_engine() -> Iterator[Engine]:
    """The engine DOCKER_HOST names if it answers, else a private dockerd for the block."""
    if not DEBIAN_DOCKER.exists():
        raise EngineUnavailableError(f"no {DEBIAN_DOCKER}: `make test-images` installs docker.io")
    given = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    existing = Engine(given, DEBIAN_DOCKER)
    if existing.answers():
        yield existing
        return
    if not DEBIAN_DOCKERD.exists() or os.geteuid() != 0:
        raise EngineUnavailableError("no Docker engine answers, and dockerd cannot be started here")
    with tempfile.TemporaryDirectory(prefix="exactly-dockerd-") as run_dir:
        yield from _private_engine(Path(run_dir))


def _private_engine(run_dir: Path) -> Iterator[Engine]:
    socket = run_dir / "docker.sock"
    data_root = cache_root() / "docker"
    data_root.mkdir(parents=True, exist_ok=True)
    log = (run_dir / "dockerd.log").open("w")
    daemon = subprocess.Popen(
        [
            str(DEBIAN_DOCKERD),
            "--host",
            f"unix://{socket}",
            "--pidfile",
            str(run_dir / "docker.pid"),
            "--exec-root",
            str(run_dir / "exec"),
            "--data-root",
            str(data_root),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # A test session killed outright leaves no engine running (its containers die with it).
        preexec_fn=die_with_parent(),
    )
    engine = Engine(f"unix://{socket}", DEBIAN_DOCKER)
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not (socket.exists() and engine.answers()):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise EngineUnavailableError(
                    f"dockerd did not start: {(run_dir / 'dockerd.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield engine
    finally:
        # Containers the tests left: stopped with the engine (its shutdown stops them too, but
        # within its own timeout); then the engine and its containerd.
        running = engine.docker("ps", "-q", check=False).stdout.split()
        if running:
            engine.docker("rm", "--force", *running, check=False, timeout=120)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(10)
        log.close()
        _unmount_under(run_dir)


def _unmount_under(directory: Path) -> None:
    """dockerd leaves its network namespace's bind mount (exec/netns/default) mounted when it
    exits: unmount what is still mounted under ``directory`` (deepest first) so it can go."""
    mounted = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(f"{directory}/")
    ]
    for point in sorted(mounted, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)


def host_ca_bundle() -> Path | None:
    """The CA bundle the host's pip trusts (pip's `cert`, else the system's): a build that
    downloads is given it as its `ca-bundle` secret, for a TLS-inspecting proxy's CA."""
    for candidate in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None
