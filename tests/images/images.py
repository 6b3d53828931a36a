"""The images the image tests run: a base made from Debian's packages, the product's two images
built from the repository's Dockerfile on it, and test-only stand-ins for the images
docker-compose.yml names that no registry here serves.

The test base stands in for `python:3.11-slim-bookworm` (the Dockerfile's default
PYTHON_IMAGE): Debian bookworm with Debian's Python 3.11 (3.11.2, at /usr/bin, `python` from
python-is-python3) instead of the python.org build in /usr/local, made by `debootstrap
--variant=minbase` from the Debian archive this host's apt uses, and imported.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from localkafka import KAFKA_VERSION, ensure_kafka
from runtime.cache import cache_root
from tests.images.engine import Build, Engine, build, host_ca_bundle

BASE_IMAGE = "kafka-exactly-test/python:3.11-bookworm"
ROLES_IMAGE = "kafka-exactly:test"
VALIDATOR_IMAGE = "kafka-exactly-validator:test"
KAFKA_STANDIN = f"kafka-exactly-test/kafka:{KAFKA_VERSION}"
PROMETHEUS_STANDIN = "kafka-exactly-test/prometheus:debian"
_BASE_PACKAGES = "python3,python3-venv,python-is-python3,ca-certificates"
_STANDINS = Path(__file__).with_name("standins")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def debian_mirror() -> str:
    """The Debian archive this host's apt reads (deb822 or one-line sources)."""
    for sources in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        found = re.search(r"^URIs:\s*(\S+)", sources.read_text(), re.MULTILINE)
        if found and "security" not in found.group(1):
            return found.group(1)
    listing = Path("/etc/apt/sources.list")
    if listing.exists():
        found = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", listing.read_text(), re.M)
        if found:
            return found.group(1)
    return "http://deb.debian.org/debian"


def ensure_base_image(engine: Engine) -> str:
    """The test base, imported once per engine from a root file system made once per cache."""
    if engine.has_image(BASE_IMAGE):
        return BASE_IMAGE
    tarball = cache_root() / "images" / "debian-bookworm-python3.11.tar"
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="exactly-rootfs-") as scratch:
            root = Path(scratch) / "root"
            subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={_BASE_PACKAGES}",
                    "bookworm",
                    str(root),
                    debian_mirror(),
                ],
                check=True,
                capture_output=True,
                timeout=900,
            )
            for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for path in (root / leftover).glob("*"):
                    if path.is_file():
                        path.unlink()
            partial = tarball.with_suffix(".part")
            subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
            partial.rename(tarball)
    engine.docker(
        "import",
        "--change",
        f"ENV PATH={_PATH}",
        "--change",
        'CMD ["python3"]',
        str(tarball),
        BASE_IMAGE,
        timeout=300,
    )
    return BASE_IMAGE


def build_product_image(
    engine: Engine, context: Path, target: str, tag: str, *, timeout: float = 1800
) -> Build:
    """One target of the repository's Dockerfile, as its head comment says to build it, on the
    test base, with this host's CA bundle as the `ca-bundle` secret."""
    bundle = host_ca_bundle()
    return build(
        engine,
        context,
        target=target,
        tag=tag,
        build_args={"PYTHON_IMAGE": ensure_base_image(engine)},
        secrets={"ca-bundle": bundle} if bundle else None,
        timeout=timeout,
    )


def ensure_kafka_standin(engine: Engine) -> str:
    if engine.has_image(KAFKA_STANDIN):
        return KAFKA_STANDIN
    with tempfile.TemporaryDirectory(prefix="exactly-kafka-image-") as scratch:
        context = Path(scratch)
        shutil.copytree(_STANDINS / "kafka", context, dirs_exist_ok=True)
        shutil.copytree(ensure_kafka().libs_dir, context / "libs")
        build(
            engine,
            context,
            target=None,
            tag=KAFKA_STANDIN,
            build_args={"BASE_IMAGE": ensure_base_image(engine)},
            timeout=900,
        )
    return KAFKA_STANDIN


def ensure_prometheus_standin(engine: Engine) -> str:
    if not engine.has_image(PROMETHEUS_STANDIN):
        build(
            engine,
            _STANDINS / "prometheus",
            target=None,
            tag=PROMETHEUS_STANDIN,
            build_args={"BASE_IMAGE": ensure_base_image(engine)},
            timeout=900,
        )
    return PROMETHEUS_STANDIN
