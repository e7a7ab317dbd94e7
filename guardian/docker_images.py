"""``make docker``: the images docker-compose.yml and the container test tier run, built here when no
registry can give them (``python -m guardian.docker_images``).

Three images:

- **base**: ``python:3.11-slim`` when it can be pulled; else a Debian bookworm image made on this
  machine from Debian's packages (``debootstrap --variant=minbase`` into a folder, ``docker import``);
- **kafka**: ``apache/kafka:4.1.1`` when it can be pulled; else ``guardian/kafka:4.1.1``, built from
  ``images/kafka`` and the Maven jars of ``guardian kafka fetch`` (the same KRaft single-node
  settings, the same ``KAFKA_*`` environment names);
- **guardian** (``guardian:local``): ``Dockerfile`` on the base (Python 3.11, the project installed with
  pip, a non-root user, a healthcheck on ``/ready``).

Each build is skipped when its inputs did not change: the image carries the hash of its inputs as
the label ``org.guardian.inputs``. BuildKit is required (a docker CLI with built-in BuildKit, or with
buildx); the CA bundle pip is configured with (``pip config list``: ``cert``, or ``PIP_CERT``) goes
to the build as the secret ``pip_ca``, never into a layer. When local images stand in for the
registry's, ``docker-compose.override.yml`` (read by ``docker compose`` and ``docker-compose``
next to ``docker-compose.yml``) names them; it is removed again when the registry's images serve.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from guardian.docker_engine import DockerError, apt_install, docker_cli, executables, run
from guardian.kafka_local import KAFKA_VERSION, BrokerError, LocalBroker, default_jars_dir

ROOT = Path(__file__).resolve().parents[1]
LABEL = "org.guardian.inputs"
REGISTRY_BASE = "python:3.11-slim"
REGISTRY_KAFKA = f"apache/kafka:{KAFKA_VERSION}"
LOCAL_BASE = "guardian/debian:bookworm"
LOCAL_KAFKA = f"guardian/kafka:{KAFKA_VERSION}"
GUARDIAN_IMAGE = "guardian:local"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
OVERRIDE = "docker-compose.override.yml"
OVERRIDE_MARK = "# written by `make docker`"
#: what the Guardian image copies from the project (the rest of the context is ignored)
GUARDIAN_INPUTS = (
    "Dockerfile",
    "pyproject.toml",
    "README.md",
    "config",
    "guardian",
    "topics",
    "tables",
    "pipeline",
    "supervisor",
    "streams",
    "simulator",
    "report",
    "bench",
    "chaos",
    "console",
)
PULL_TIMEOUT_S = 300.0
BUILD_TIMEOUT_S = 1800.0
DEBOOTSTRAP_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Images:
    """The images chosen for compose and the tests; ``local``: built here for want of a registry."""

    base: str
    kafka: str
    guardian: str
    local: bool


def _say(message: str) -> None:
    print(f"guardian docker: {message}", file=sys.stderr, flush=True)


def inputs_hash(parts: Iterable[tuple[str, bytes]]) -> str:
    """A short digest of named inputs (the order given is part of it)."""
    digest = hashlib.sha256()
    for name, data in parts:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:32]


def tree_inputs(root: Path, names: Sequence[str]) -> list[tuple[str, bytes]]:
    """(relative path, bytes) of every file under ``names`` below ``root``, sorted, caches left out."""
    found: list[tuple[str, bytes]] = []
    for name in names:
        path = root / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            rel = file.relative_to(root).as_posix()
            if "__pycache__" in file.parts or rel.endswith(".pyc"):
                continue
            found.append((rel, file.read_bytes()))
    return found


def pip_ca_bundle(env: Mapping[str, str], python: str = sys.executable) -> Path | None:
    """The CA bundle pip is configured with (``PIP_CERT``, else ``pip config list``), if any."""
    if env.get("PIP_CERT"):
        path = Path(env["PIP_CERT"])
        return path if path.is_file() else None
    try:
        out = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=dict(env),
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_pip_cert(out)


def parse_pip_cert(config_list: str) -> Path | None:
    """The existing file named by a ``cert`` line of ``pip config list`` output, if any."""
    for line in config_list.splitlines():
        match = re.fullmatch(r"\s*[\w:.-]*\.cert\s*=\s*'?([^']*)'?\s*", line)
        if match and Path(match.group(1)).is_file():
            return Path(match.group(1))
    return None


class Builder:
    """Builds, skips or pulls each image with one docker CLI (see the module docstring)."""

    def __init__(self, root: Path = ROOT, env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.env = dict(os.environ if env is None else env)
        self.docker = docker_cli(self.env)
        self.build_env = {**self.env, "DOCKER_BUILDKIT": "1"}

    # ------------------------------------------------------------ queries

    def label(self, image: str) -> str | None:
        """The inputs label of a local image; None when there is no such image."""
        result = run([self.docker, "image", "inspect", "--format", "{{json .Config.Labels}}", image], 60)
        if result.returncode != 0:
            return None
        match = re.search(rf'"{re.escape(LABEL)}":"([0-9a-f]+)"', result.stdout)
        return match.group(1) if match else ""

    def image_id(self, image: str) -> str:
        result = run([self.docker, "image", "inspect", "--format", "{{.Id}}", image], 60)
        if result.returncode != 0:
            raise DockerError(f"no image {image}: {result.stderr.strip()[-200:]}")
        return result.stdout.strip()

    def pull(self, image: str) -> bool:
        """Whether ``image`` is here after a pull attempt (a registry may not answer)."""
        result = run([self.docker, "pull", "--quiet", image], PULL_TIMEOUT_S)
        if result.returncode == 0:
            return True
        reason = (result.stderr.strip().splitlines() or ["no answer"])[-1][:160]
        _say(f"cannot pull {image} ({reason}): the one made here serves")
        return False

    # ------------------------------------------------------------ builds

    def base(self) -> tuple[str, bool]:
        """The base image and whether it was made here."""
        if self.pull(REGISTRY_BASE):
            return REGISTRY_BASE, False
        wanted = inputs_hash([("debootstrap", f"{DEBIAN_SUITE} minbase {DEBIAN_MIRROR}".encode())])
        if self.label(LOCAL_BASE) == wanted:
            _say(f"{LOCAL_BASE}: up to date")
            return LOCAL_BASE, True
        if not executables("debootstrap", self.env):
            apt_install(
                ["debootstrap"], "python:3.11-slim cannot be pulled and debootstrap is missing", self.env
            )
        debootstrap = executables("debootstrap", self.env)[0]
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="guardian-rootfs-") as tmp:
            rootfs = Path(tmp) / "rootfs"
            result = run(
                [debootstrap, "--variant=minbase", DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR],
                DEBOOTSTRAP_TIMEOUT_S,
            )
            if result.returncode != 0:
                raise DockerError(f"debootstrap failed: {_last_line(result.stdout + result.stderr)}")
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            try:
                imported = subprocess.run(
                    [self.docker, "import", "--change", f"LABEL {LABEL}={wanted}", "-", LOCAL_BASE],
                    stdin=tar.stdout,
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=False,
                )
            finally:
                if tar.stdout is not None:
                    tar.stdout.close()
                tar.wait(timeout=600)
            if imported.returncode != 0 or tar.returncode != 0:
                raise DockerError(f"docker import of the Debian base failed: {_last_line(imported.stderr)}")
        _say(f"{LOCAL_BASE}: made from Debian's packages in {time.monotonic() - started:.0f} s")
        return LOCAL_BASE, True

    def build(
        self, image: str, dockerfile: Path, context: Path, base: str, extra: list[tuple[str, bytes]]
    ) -> None:
        """``docker build`` unless ``image`` carries the hash of these inputs already."""
        wanted = inputs_hash([("base", self.image_id(base).encode()), *extra])
        if self.label(image) == wanted:
            _say(f"{image}: up to date")
            return
        cmd = [
            self.docker,
            "build",
            "--build-arg",
            f"BASE_IMAGE={base}",
            "--label",
            f"{LABEL}={wanted}",
            "-t",
            image,
            "-f",
            str(dockerfile),
        ]
        ca = pip_ca_bundle(self.env)
        if ca is not None:
            cmd += ["--secret", f"id=pip_ca,src={ca}"]
        started = time.monotonic()
        result = subprocess.run(
            [*cmd, str(context)],
            env=self.build_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
            raise DockerError(f"building {image} failed:\n{tail}")
        _say(f"{image}: built in {time.monotonic() - started:.0f} s")

    def kafka(self, base: str) -> str:
        if self.pull(REGISTRY_KAFKA):
            return REGISTRY_KAFKA
        folder = self.root / "images" / "kafka"
        try:
            fetcher = LocalBroker(
                Path(tempfile.gettempdir()),
                jars_dir=default_jars_dir(self.env),
                mvn_args=shlex.split(self.env.get("GUARDIAN_MAVEN_ARGS", "")),
                env=self.env,
            )
            libs = fetcher.fetch()
        except BrokerError as exc:
            raise DockerError(f"no Kafka jars for {LOCAL_KAFKA}: {exc}") from exc
        jar_list = sorted(p for p in libs.iterdir() if p.suffix == ".jar")
        extra = tree_inputs(folder, sorted(p.name for p in folder.iterdir()))
        extra += [(f"libs/{p.name}", str(p.stat().st_size).encode()) for p in jar_list]
        with tempfile.TemporaryDirectory(prefix="guardian-kafka-context-") as tmp:
            context = Path(tmp)
            for item in folder.iterdir():
                shutil.copy2(item, context / item.name)
            (context / "libs").mkdir()
            for jar in jar_list:
                _link_or_copy(jar, context / "libs" / jar.name)
            self.build(LOCAL_KAFKA, context / "Dockerfile", context, base, extra)
        return LOCAL_KAFKA

    def guardian(self, base: str) -> str:
        extra = tree_inputs(self.root, GUARDIAN_INPUTS)
        self.build(GUARDIAN_IMAGE, self.root / "Dockerfile", self.root, base, extra)
        return GUARDIAN_IMAGE

    def all(self) -> Images:
        base, local_base = self.base()
        kafka = self.kafka(base)
        guardian = self.guardian(base)
        return Images(base=base, kafka=kafka, guardian=guardian, local=local_base or kafka == LOCAL_KAFKA)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def override_text(images: Images) -> str:
    """The compose override naming the images built here."""
    return (
        f"{OVERRIDE_MARK}: no image registry answered, so these images were built on this machine.\n"
        "# Delete this file (or run `make docker` where a registry answers) to use the registry's images.\n"
        "services:\n"
        "  kafka:\n"
        f"    image: {images.kafka}\n"
        + "".join(
            f"  {service}:\n    build:\n      context: .\n      args:\n        BASE_IMAGE: {images.base}\n"
            for service in ("topics", "worker", "simulator")
        )
    )


def write_override(root: Path, images: Images) -> None:
    """Write (or remove) ``docker-compose.override.yml``; never touches one a user wrote."""
    path = root / OVERRIDE
    ours = not path.exists() or path.read_text(encoding="utf-8").startswith(OVERRIDE_MARK)
    if not ours:
        _say(f"{path} was not written by make docker: left as is")
        return
    if images.local:
        path.write_text(override_text(images), encoding="utf-8")
    else:
        path.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m guardian.docker_images", description=__doc__.split("\n")[0]
    )
    parser.parse_args(argv)
    try:
        images = Builder().all()
        write_override(ROOT, images)
    except DockerError as exc:
        _say(str(exc))
        return 1
    print(f"base {images.base}, kafka {images.kafka}, guardian {images.guardian}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
