"""The Docker tooling without a Docker engine: the test broker choice, the docker CLI choice, the
image inputs, the compose override, the clean failures, and the worker slots of scaled replicas."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from guardian.docker_engine import DockerError, apt_install, docker_cli
from guardian.docker_images import (
    GUARDIAN_INPUTS,
    OVERRIDE,
    Images,
    inputs_hash,
    parse_pip_cert,
    tree_inputs,
    write_override,
)
from guardian.worker_slot import NoFreeSlot, claim_slot
from tests.brokers import LOCAL, TESTCONTAINERS, BrokerChoiceError, broker_choice

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the test broker


def test_the_test_broker_is_local_unless_testcontainers_is_asked_for() -> None:
    assert broker_choice({}) == LOCAL
    assert broker_choice({"GUARDIAN_TEST_BROKER": ""}) == LOCAL
    assert broker_choice({"GUARDIAN_TEST_BROKER": "local"}) == LOCAL
    assert broker_choice({"GUARDIAN_TEST_BROKER": "testcontainers"}) == TESTCONTAINERS
    with pytest.raises(BrokerChoiceError, match="local, testcontainers"):
        broker_choice({"GUARDIAN_TEST_BROKER": "docker"})


# ---------------------------------------------------------------- the docker CLI


def _fake_docker(folder: Path, version: str, buildx: bool) -> None:
    folder.mkdir(parents=True)
    script = folder / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "Docker version {version}, build x"; exit 0; fi\n'
        f'if [ "$1" = "buildx" ]; then exit {0 if buildx else 1}; fi\n'
        "exit 1\n",
        encoding="utf-8",
    )
    script.chmod(0o755)


def test_the_docker_cli_chosen_is_the_first_that_builds_with_buildkit(tmp_path: Path) -> None:
    """A Docker 28 CLI without buildx ahead of Debian's 20.10 on the PATH: the 20.10 one builds."""
    _fake_docker(tmp_path / "new", "28.2.2", buildx=False)
    _fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    path = f"{tmp_path / 'new'}:{tmp_path / 'old'}"
    assert docker_cli({"PATH": path}) == str(tmp_path / "old" / "docker")
    _fake_docker(tmp_path / "plugin", "28.2.2", buildx=True)
    assert docker_cli({"PATH": f"{tmp_path / 'plugin'}:{tmp_path / 'old'}"}) == str(
        tmp_path / "plugin" / "docker"
    )
    with pytest.raises(DockerError, match="buildx"):
        docker_cli({"PATH": str(tmp_path / "new")})


def test_nothing_to_install_docker_with_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DockerError, match=r"cannot be installed .*install docker\.io"):
        apt_install(["docker.io"], "no Docker engine answers", {"PATH": str(tmp_path)})


def test_no_engine_at_docker_host_fails_in_one_line_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    result = subprocess.run(
        [sys.executable, "-m", "guardian.docker_engine", "--", "touch", str(marker)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "no Docker engine answers" in result.stderr
    assert not marker.exists()


# ---------------------------------------------------------------- image inputs and the override


def test_an_image_is_rebuilt_when_a_copied_file_changes_but_not_for_caches(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n", encoding="utf-8")
    before = inputs_hash(tree_inputs(tmp_path, ["pkg"]))
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"cache")
    assert inputs_hash(tree_inputs(tmp_path, ["pkg"])) == before
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n", encoding="utf-8")
    assert inputs_hash(tree_inputs(tmp_path, ["pkg"])) != before


def test_the_pip_ca_bundle_comes_from_pip_config(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("cert", encoding="utf-8")
    assert parse_pip_cert(f":env:.default-timeout='180'\nglobal.cert='{ca}'\n") == ca
    assert parse_pip_cert(f"global.cert='{tmp_path / 'missing.crt'}'\n") is None
    assert parse_pip_cert("global.index-url='https://example.org'\n") is None


def test_the_override_names_local_images_and_is_removed_when_the_registry_serves(tmp_path: Path) -> None:
    local = Images(base="guardian/debian:bookworm", kafka="guardian/kafka:4.1.1", guardian="g", local=True)
    write_override(tmp_path, local)
    text = (tmp_path / OVERRIDE).read_text(encoding="utf-8")
    assert "image: guardian/kafka:4.1.1" in text
    assert text.count("BASE_IMAGE: guardian/debian:bookworm") == 3
    write_override(tmp_path, Images("python:3.11-slim", "apache/kafka:4.1.1", "g", local=False))
    assert not (tmp_path / OVERRIDE).exists()
    # an override the user wrote is theirs
    (tmp_path / OVERRIDE).write_text("services: {}\n", encoding="utf-8")
    write_override(tmp_path, local)
    assert (tmp_path / OVERRIDE).read_text(encoding="utf-8") == "services: {}\n"


# ---------------------------------------------------------------- worker slots


def test_replicas_sharing_a_data_folder_take_distinct_worker_ids(tmp_path: Path) -> None:
    first_id, first = claim_slot(tmp_path)
    second_id, second = claim_slot(tmp_path)
    assert (first_id, second_id) == ("w0", "w1")
    os.close(first)  # that worker ended: its ID is free again
    again_id, again = claim_slot(tmp_path)
    assert again_id == "w0"
    with pytest.raises(NoFreeSlot):
        claim_slot(tmp_path, limit=2)
    os.close(second)
    os.close(again)


def test_guardian_worker_holds_its_id_for_the_life_of_the_worker(tmp_path: Path) -> None:
    """The lock survives the exec into ``guardian worker``: a second replica started meanwhile gets
    another ID, and the worker gets the arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "guardian"
    fake.write_text('#!/bin/sh\necho "$GUARDIAN_WORKER_ID $*"\nread -r _line\n', encoding="utf-8")
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GUARDIAN_DATA_DIR": str(tmp_path / "data"),
    }
    env.pop("GUARDIAN_WORKER_ID", None)
    cmd = [sys.executable, "-m", "guardian.worker_slot", "--loglevel", "warn"]
    first = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "w0 worker --loglevel warn"
        second = subprocess.run(
            cmd, env=env, input="\n", capture_output=True, text=True, timeout=60, check=False
        )
        assert second.stdout.strip() == "w1 worker --loglevel warn"
    finally:
        first.communicate(input="\n", timeout=60)
    third = subprocess.run(cmd, env=env, input="\n", capture_output=True, text=True, timeout=60, check=False)
    assert third.stdout.strip() == "w0 worker --loglevel warn"


def test_the_image_copies_every_package_the_project_installs() -> None:
    """A package missing from the Dockerfile is missing from the image (``guardian console`` failed
    with ModuleNotFoundError in compose once): every package of pyproject's list is copied by the
    Dockerfile and is an input of the image's cache key."""
    root = Path(__file__).resolve().parents[2]
    include = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"][
        "include"
    ]
    packages = {name.rstrip("*") for name in include}
    copied = {
        line.split()[1] for line in (root / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")
    }
    assert packages <= copied, sorted(packages - copied)
    assert packages <= set(GUARDIAN_INPUTS), sorted(packages - set(GUARDIAN_INPUTS))
    on_disk = {p.parent.name for p in root.glob("*/__init__.py")} - {"tests"}
    assert on_disk <= packages, sorted(on_disk - packages)  # a new package is installed at all
