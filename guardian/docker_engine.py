"""A Docker engine for the Docker targets (``make docker``, ``make test-docker``).

``python -m guardian.docker_engine [--keep] -- CMD ...`` runs CMD with a Docker engine that answers:
the one already running (``docker info``), else Debian's ``docker.io`` (installed with ``apt-get``
when ``dockerd`` is missing) started here as root. An engine started here is stopped when CMD ends,
unless ``--keep``. When no engine answers and none can be installed or started, it says so in one
line and exits 1: the Docker targets never fall back to the local broker.

Also here: the docker CLI to use (one with BuildKit: Docker's CLI before 23 builds with
``DOCKER_BUILDKIT=1`` itself, later ones through the buildx plugin) and the compose command
(``docker compose``, else Debian's ``docker-compose`` 1.29, which reads the same file).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

#: where Debian puts dockerd and debootstrap, which a non-login PATH may lack
SBIN = ("/usr/sbin", "/sbin")
ENGINE_START_TIMEOUT_S = 90.0
ENGINE_STOP_TIMEOUT_S = 60.0
APT_TIMEOUT_S = 900.0


class DockerError(RuntimeError):
    """Docker cannot do what a target needs; the message says what and the way out."""


def run(
    cmd: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command, output captured; a command that outlives ``timeout_s`` is a DockerError."""
    try:
        return subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
        )
    except subprocess.TimeoutExpired as exc:
        raise DockerError(f"{' '.join(cmd[:3])} did not finish within {timeout_s:.0f} s") from exc
    except OSError as exc:
        raise DockerError(f"cannot run {cmd[0]}: {exc}") from exc


def search_path(env: Mapping[str, str]) -> str:
    return os.pathsep.join([env.get("PATH", os.defpath), *SBIN])


def executables(name: str, env: Mapping[str, str]) -> list[str]:
    """Every executable called ``name`` on the PATH (and sbin), in PATH order, without repeats."""
    found: list[str] = []
    for folder in search_path(env).split(os.pathsep):
        path = Path(folder or ".") / name
        if path.is_file() and os.access(path, os.X_OK) and str(path.resolve()) not in found:
            found.append(str(path.resolve()))
    return found


def client_major(version_text: str) -> int | None:
    """The major version in ``docker --version`` output (``Docker version 20.10.24+dfsg1, …``)."""
    match = re.search(r"version (\d+)\.", version_text)
    return int(match.group(1)) if match else None


def has_buildkit(docker: str, env: Mapping[str, str]) -> bool:
    """Whether this docker CLI builds with BuildKit: through buildx, or itself (before version 23)."""
    if run([docker, "buildx", "version"], 60, env).returncode == 0:
        return True
    major = client_major(run([docker, "--version"], 60, env).stdout)
    return major is not None and major < 23


def docker_cli(env: Mapping[str, str] | None = None) -> str:
    """The first docker CLI on the PATH that builds with BuildKit."""
    env = os.environ if env is None else env
    candidates = executables("docker", env)
    for docker in candidates:
        if has_buildkit(docker, env):
            return docker
    if candidates:
        raise DockerError(
            f"the docker CLI ({', '.join(candidates)}) cannot build with BuildKit: install the buildx "
            "plugin (apt-get install docker-buildx), or Debian's docker.io"
        )
    raise DockerError("no docker CLI on the PATH: install Docker (apt-get install docker.io)")


def engine_answers(env: Mapping[str, str]) -> bool:
    """Whether a Docker engine answers the docker CLI (``docker info``)."""
    for docker in executables("docker", env):
        try:
            return run([docker, "info", "--format", "{{.ServerVersion}}"], 30, env).returncode == 0
        except DockerError:
            return False
    return False


def apt_install(packages: Sequence[str], why: str, env: Mapping[str, str]) -> None:
    """``apt-get install`` as root, or a DockerError naming what is missing and why."""
    apt = shutil.which("apt-get", path=search_path(env))
    if apt is None or os.geteuid() != 0:
        how = "apt-get is not here" if apt is None else "installing needs root"
        raise DockerError(f"{why}, and it cannot be installed ({how}): install {' '.join(packages)}")
    apt_env = {**env, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-qq", *packages]
    if run(install, APT_TIMEOUT_S, apt_env).returncode == 0:
        return
    update = run([apt, "update", "-qq"], APT_TIMEOUT_S, apt_env)
    result = run(install, APT_TIMEOUT_S, apt_env) if update.returncode == 0 else update
    if result.returncode != 0:
        last = ([ln for ln in result.stderr.splitlines() if ln.strip()] or ["no output"])[-1]
        raise DockerError(f"{why}, and apt-get install {' '.join(packages)} failed: {last.strip()[:200]}")


def compose_command(env: Mapping[str, str] | None = None) -> list[str]:
    """``docker compose`` (v2 plugin) where it works, else ``docker-compose`` (installed if missing)."""
    env = os.environ if env is None else env
    for docker in executables("docker", env):
        if run([docker, "compose", "version"], 60, env).returncode == 0:
            return [docker, "compose"]
    found = executables("docker-compose", env)
    if not found:
        apt_install(["docker-compose"], "no docker compose plugin and no docker-compose", env)
        found = executables("docker-compose", env)
    if not found:
        raise DockerError("no docker compose plugin and no docker-compose: install docker-compose")
    return [found[0]]


@dataclass
class StartedEngine:
    """A dockerd started here, to be stopped by :func:`stop_engine`."""

    proc: subprocess.Popen[bytes]
    log: Path


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def ensure_engine(env: Mapping[str, str] | None = None) -> StartedEngine | None:
    """An engine that answers: None when one already did, else the dockerd started here."""
    env = dict(os.environ if env is None else env)
    if engine_answers(env):
        return None
    if env.get("DOCKER_HOST"):
        raise DockerError(f"no Docker engine answers at DOCKER_HOST={env['DOCKER_HOST']}")
    if not executables("dockerd", env) or not executables("docker", env):
        apt_install(["docker.io"], "no Docker engine answers and dockerd is not installed", env)
    dockerd = executables("dockerd", env)
    if not dockerd:
        raise DockerError("no Docker engine answers and dockerd is not installed: install docker.io")
    if os.geteuid() != 0:
        raise DockerError("no Docker engine answers, and starting dockerd needs root: start Docker's service")
    fd, name = tempfile.mkstemp(prefix="guardian-dockerd-", suffix=".log")
    log = Path(name)
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(
            [dockerd[0]],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**env, "PATH": search_path(env)},
        )
    started = StartedEngine(proc, log)
    deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if engine_answers(env):
            print(
                f"guardian docker: started dockerd (pid {proc.pid}, log {log})", file=sys.stderr, flush=True
            )
            return started
        time.sleep(0.5)
    lines = _tail(log)
    stop_engine(started)
    raise DockerError(
        f"dockerd did not answer within {ENGINE_START_TIMEOUT_S:.0f} s; its last lines:\n{lines}"
    )


def stop_engine(started: StartedEngine) -> None:
    """Stop a dockerd started here (SIGTERM: it stops its containers first), SIGKILL if it lingers."""
    if started.proc.poll() is None:
        started.proc.terminate()
        try:
            started.proc.wait(timeout=ENGINE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            started.proc.kill()
            started.proc.wait(timeout=30)
    started.log.unlink(missing_ok=True)
    print(f"guardian docker: stopped dockerd (pid {started.proc.pid})", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m guardian.docker_engine", description="Run a command with a Docker engine."
    )
    parser.add_argument("--keep", action="store_true", help="leave a dockerd started here running")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        started = ensure_engine()
    except DockerError as exc:
        print(f"guardian docker: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        return subprocess.run(command, check=False).returncode if command else 0
    except KeyboardInterrupt:
        return 130
    finally:
        if started is not None and not args.keep:
            stop_engine(started)
        elif started is not None:
            print(
                f"guardian docker: dockerd (pid {started.proc.pid}) keeps running; stop it with "
                f"'kill {started.proc.pid}'",
                file=sys.stderr,
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
