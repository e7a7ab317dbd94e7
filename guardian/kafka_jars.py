"""The local Kafka broker's jars: where they live, and fetching them once from Maven Central with
``mvn dependency:copy-dependencies`` and the POM shipped in this package (``kafka-broker.pom``)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from guardian.kafka_error import WAYS_OUT, BrokerError

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
POM_RESOURCE = "kafka-broker.pom"
#: the file written into the jar folder once a download is complete (a half download has none)
COMPLETE_MARKER = ".complete"
MVN_TIMEOUT_S = 900.0


def default_jars_dir(env: Mapping[str, str] | None = None) -> Path:
    """The shared jar folder: ``GUARDIAN_KAFKA_JARS``, else ``$XDG_CACHE_HOME/guardian/kafka-V/libs``."""
    env = os.environ if env is None else env
    if env.get("GUARDIAN_KAFKA_JARS"):
        return Path(env["GUARDIAN_KAFKA_JARS"]).expanduser()
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache.expanduser() / "guardian" / f"kafka-{KAFKA_VERSION}" / "libs"


def jars_complete(jars_dir: Path) -> bool:
    """Whether ``jars_dir`` holds a finished download (a half download has no marker)."""
    return (jars_dir / COMPLETE_MARKER).is_file()


def fetch_jars(jars_dir: Path, env: Mapping[str, str], mvn_args: Sequence[str]) -> Path:
    """Download the jars once (atomically: a half download is redone next time); the jar folder."""
    if jars_complete(jars_dir):
        return jars_dir
    mvn = shutil.which("mvn", path=env.get("PATH", os.defpath))
    if mvn is None:
        raise BrokerError(
            f"Maven ('mvn') is not on PATH; it fetches the Kafka {KAFKA_VERSION} jars once into "
            f"{jars_dir}: {WAYS_OUT}"
        )
    parent = jars_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=parent))
    try:
        pom = work / "pom.xml"
        pom.write_bytes(resources.files("guardian").joinpath(POM_RESOURCE).read_bytes())
        out = work / "libs"
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            *mvn_args,
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out}",
        ]
        try:
            result = subprocess.run(
                cmd,
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=MVN_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(
                f"downloading the Kafka {KAFKA_VERSION} jars with Maven took over {MVN_TIMEOUT_S:.0f} s: "
                f"check access to Maven Central and retry 'guardian kafka fetch', or {WAYS_OUT}"
            ) from exc
        main_jar = out / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
        if result.returncode != 0 or not main_jar.is_file():
            raise BrokerError(
                f"downloading the Kafka {KAFKA_VERSION} jars with Maven failed "
                f"({mvn_reason(result.stdout + result.stderr, result.returncode)}): check access to "
                f"Maven Central (and GUARDIAN_MAVEN_ARGS) and retry 'guardian kafka fetch', or {WAYS_OUT}"
            )
        (out / COMPLETE_MARKER).write_text(f"kafka {KAFKA_VERSION}\n", encoding="utf-8")
        if jars_dir.exists() and not jars_complete(jars_dir):
            shutil.rmtree(jars_dir)  # a half download of an older layout
        try:
            out.rename(jars_dir)
        except OSError as exc:
            # another process finished the same download first: theirs is as good as ours
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not jars_complete(jars_dir):
                raise
        return jars_dir
    finally:
        shutil.rmtree(work, ignore_errors=True)


def mvn_reason(output: str, code: int) -> str:
    clean = re.sub(r"\x1b\[[0-9;]*m", "", output)
    errors = [ln.removeprefix("[ERROR]").strip() for ln in clean.splitlines() if ln.startswith("[ERROR]")]
    errors = [
        e
        for e in errors
        if e and not e.startswith(("-> [Help", "To see the full", "Re-run Maven", "For more"))
    ]
    if errors:
        reason = re.sub(r"\s*-> \[Help \d+\]$", "", errors[0])
        return reason if len(reason) <= 300 else reason[:299] + "…"
    return f"mvn exit code {code}"
