"""A local single-node Apache Kafka broker (KRaft) for development, demos and tests (docs/CONTRACTS.md §13).

The broker is the real Apache Kafka server, run with the machine's Java (17 or newer). Its jars come
from Maven Central through ``mvn dependency:copy-dependencies`` and a small POM shipped with this
package (``kafka-broker.pom``); they are fetched once into a cache shared by every data dir:
``$XDG_CACHE_HOME/guardian/kafka-<version>/libs`` (``GUARDIAN_KAFKA_JARS`` overrides it).

One combined broker+controller node with a static voter, bound to 127.0.0.1 on free ports chosen
before its ``server.properties`` is written (``GUARDIAN_KAFKA_PORT`` fixes the client port). Config,
data, PID file, log and the ``bootstrap`` file live under ``Settings.kafka_dir``.

Environment read here (besides the settings):

- ``GUARDIAN_KAFKA_JARS``: the jar folder (default: the shared cache above);
- ``GUARDIAN_KAFKA_PORT``: a fixed client port (default: a free one, kept across restarts);
- ``GUARDIAN_MAVEN_ARGS``: extra ``mvn`` arguments, e.g. ``-o -Dmaven.repo.local=DIR``;
- ``JAVA_HOME``: the Java to use (default: ``java`` on ``PATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import functools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Any, TypeVar

from config.exitcodes import Exit
from config.settings import Settings

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
MIN_JAVA = 17
HOST = "127.0.0.1"
POM_RESOURCE = "kafka-broker.pom"
#: the file written into the jar folder once a download is complete (a half download has none)
COMPLETE_MARKER = ".complete"

DEFAULT_HEAP = "768m"
DEFAULT_UP_TIMEOUT_S = 60.0
DEFAULT_STOP_TIMEOUT_S = 30.0
MVN_TIMEOUT_S = 900.0
JAVA_TOOL_TIMEOUT_S = 120.0
LOCK_TIMEOUT_S = 30.0

WAYS_OUT = (
    "install Java 17+ and Maven (apt-get install openjdk-17-jre-headless maven), "
    "or run 'docker compose up -d kafka' and set GUARDIAN_KAFKA_BOOTSTRAP=127.0.0.1:9092, "
    "or set GUARDIAN_KAFKA_BOOTSTRAP to an existing cluster"
)

_T = TypeVar("_T")


class BrokerError(RuntimeError):
    """The local broker cannot be fetched, started or stopped; the message is one line naming the way out."""


def _say(message: str) -> None:
    print(f"guardian: {message}", file=sys.stderr, flush=True)


def default_jars_dir(env: Mapping[str, str] | None = None) -> Path:
    """The shared jar folder: ``GUARDIAN_KAFKA_JARS``, else ``$XDG_CACHE_HOME/guardian/kafka-V/libs``."""
    env = os.environ if env is None else env
    if env.get("GUARDIAN_KAFKA_JARS"):
        return Path(env["GUARDIAN_KAFKA_JARS"]).expanduser()
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache.expanduser() / "guardian" / f"kafka-{KAFKA_VERSION}" / "libs"


def run_sync(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion from sync code, also when the caller is inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def free_port(host: str = HOST) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on ``host:port`` now (SO_REUSEADDR, as the JVM binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _port_accepts(port: int, host: str = HOST, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _read_cmdline(pid: int) -> str | None:
    """The command line of a live, non-zombie process, or None when there is none."""
    proc = Path("/proc") / str(pid)
    if proc.is_dir():
        try:
            stat = (proc / "stat").read_text(encoding="utf-8", errors="replace")
            if stat.rpartition(")")[2].split()[:1] == ["Z"]:
                return None
            raw = (proc / "cmdline").read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()
    try:
        out = subprocess.run(
            ["ps", "-o", "stat=,args=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip()
    if out.returncode != 0 or not line or line.startswith("Z"):
        return None
    return line.partition(" ")[2].strip()


def _tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in data.splitlines() if line.strip()][-lines:]


@dataclass(frozen=True)
class Ports:
    """The client (PLAINTEXT) and controller ports of the node."""

    client: int
    controller: int


class LocalBroker:
    """One local Kafka node under ``kafka_dir`` (config/, data/, logs/, kafka.pid, bootstrap).

    ``up`` fetches the jars if needed, formats storage once, starts the JVM detached and waits until
    a client's metadata request succeeds; ``down`` stops exactly the process it started.
    """

    def __init__(
        self,
        kafka_dir: Path,
        *,
        jars_dir: Path | None = None,
        port: int | None = None,
        mvn_args: Sequence[str] = (),
        heap: str = DEFAULT_HEAP,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        self.kafka_dir = Path(kafka_dir)
        self.jars_dir = jars_dir if jars_dir is not None else default_jars_dir(self.env)
        self.fixed_port = port
        self.mvn_args = list(mvn_args)
        self.heap = heap
        self._proc: subprocess.Popen[bytes] | None = None
        #: whether the last ``up``/``restart`` started a JVM (False: the broker was already running)
        self.started = False

    @classmethod
    def from_settings(cls, settings: Settings, env: Mapping[str, str] | None = None) -> LocalBroker:
        """The broker of ``settings.kafka_dir``, with GUARDIAN_KAFKA_JARS/PORT and GUARDIAN_MAVEN_ARGS."""
        env = dict(os.environ if env is None else env)
        port_raw = env.get("GUARDIAN_KAFKA_PORT", "").strip()
        port: int | None = None
        if port_raw:
            try:
                port = int(port_raw)
            except ValueError:
                port = -1
            if not 0 < port < 65536:
                raise BrokerError(f"GUARDIAN_KAFKA_PORT must be a TCP port number, not {port_raw!r}")
        return cls(
            settings.kafka_dir,
            jars_dir=default_jars_dir(env),
            port=port,
            mvn_args=shlex.split(env.get("GUARDIAN_MAVEN_ARGS", "")),
            env=env,
        )

    # ----------------------------------------------------------------- paths

    @property
    def config_dir(self) -> Path:
        return self.kafka_dir / "config"

    @property
    def data_dir(self) -> Path:
        return self.kafka_dir / "data"

    @property
    def server_properties(self) -> Path:
        return self.config_dir / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.config_dir / "log4j2.properties"

    @property
    def log_file(self) -> Path:
        return self.kafka_dir / "logs" / "server.log"

    @property
    def pid_file(self) -> Path:
        return self.kafka_dir / "kafka.pid"

    @property
    def bootstrap_file(self) -> Path:
        return self.kafka_dir / "bootstrap"

    # ------------------------------------------------------------- the jars

    def jars_complete(self) -> bool:
        return (self.jars_dir / COMPLETE_MARKER).is_file()

    def classpath(self) -> str:
        """The JVM classpath of the broker's jars (also holds kafka-tools' perf tools); fetches if needed."""
        self.fetch()
        return str(self.jars_dir / "*")

    def fetch(self) -> Path:
        """Download the jars once (atomically: a half download is redone next time); the jar folder."""
        if self.jars_complete():
            return self.jars_dir
        mvn = shutil.which("mvn", path=self.env.get("PATH", os.defpath))
        if mvn is None:
            raise BrokerError(
                f"Maven ('mvn') is not on PATH; it fetches the Kafka {KAFKA_VERSION} jars once into "
                f"{self.jars_dir}: {WAYS_OUT}"
            )
        parent = self.jars_dir.parent
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
                *self.mvn_args,
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={out}",
            ]
            try:
                result = subprocess.run(
                    cmd,
                    cwd=work,
                    env=self.env,
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
                    f"({_mvn_reason(result.stdout + result.stderr, result.returncode)}): check access to "
                    f"Maven Central (and GUARDIAN_MAVEN_ARGS) and retry 'guardian kafka fetch', or {WAYS_OUT}"
                )
            (out / COMPLETE_MARKER).write_text(f"kafka {KAFKA_VERSION}\n", encoding="utf-8")
            if self.jars_dir.exists() and not self.jars_complete():
                shutil.rmtree(self.jars_dir)  # a half download of an older layout
            try:
                out.rename(self.jars_dir)
            except OSError as exc:
                # another process finished the same download first: theirs is as good as ours
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not self.jars_complete():
                    raise
            return self.jars_dir
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # ------------------------------------------------------------- the JVM

    def java(self) -> str:
        """The java executable, checked to be Java 17 or newer."""
        java: str | None = None
        home = self.env.get("JAVA_HOME")
        if home and (Path(home) / "bin" / "java").is_file():
            java = str(Path(home) / "bin" / "java")
        if java is None:
            java = shutil.which("java", path=self.env.get("PATH", os.defpath))
        if java is None:
            raise BrokerError(
                f"Java is not on PATH (the local Kafka broker needs Java {MIN_JAVA}+): {WAYS_OUT}"
            )
        try:
            result = subprocess.run(
                [java, "-version"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BrokerError(f"{java} -version did not answer ({exc}): {WAYS_OUT}") from exc
        major = _java_major(result.stderr + result.stdout)
        if major is None or major < MIN_JAVA:
            found = f"Java {major}" if major is not None else "an unrecognised Java"
            raise BrokerError(f"{found} at {java}, the local Kafka broker needs Java {MIN_JAVA}+: {WAYS_OUT}")
        return java

    def _java_cmd(self, java: str, main: str, *args: str) -> list[str]:
        return [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.log4j_properties}",
            "-cp",
            str(self.jars_dir / "*"),
            main,
            *args,
        ]

    def _run_tool(self, java: str, main: str, *args: str) -> str:
        cmd = self._java_cmd(java, main, *args)
        try:
            result = subprocess.run(
                cmd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=JAVA_TOOL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(f"{main} {' '.join(args[:1])} took over {JAVA_TOOL_TIMEOUT_S:.0f} s") from exc
        if result.returncode != 0:
            lines = [ln for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
            reason = lines[-1].strip() if lines else f"exit code {result.returncode}"
            raise BrokerError(
                f"{main} {' '.join(args[:1])} failed ({reason}); remove {self.kafka_dir} to start afresh, "
                f"or {WAYS_OUT}"
            )
        return result.stdout

    # ------------------------------------------------------------- state

    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    def _is_ours(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            # Our own unreaped child: its PID cannot be reused, and its /proc cmdline may still be empty
            # right after Popen returns (exec is not finished yet), so only its exit status counts.
            return self._proc.poll() is None
        cmdline = _read_cmdline(pid)
        return cmdline is not None and "kafka.Kafka" in cmdline and str(self.server_properties) in cmdline

    def pid(self) -> int | None:
        """The PID of our running broker, or None."""
        pid = self._read_pid()
        return pid if pid is not None and self._is_ours(pid) else None

    def is_running(self) -> bool:
        return self.pid() is not None

    def bootstrap(self) -> str | None:
        """``127.0.0.1:PORT`` of the running broker, or None when it is not running."""
        if not self.is_running():
            return None
        try:
            return self.bootstrap_file.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def clean_stale(self) -> str | None:
        """Remove a PID file naming a dead or foreign process (and the bootstrap file); say what was done."""
        raw: str | None
        try:
            raw = self.pid_file.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raw = None
        if raw is None:
            if self.bootstrap_file.exists() and self._find_orphan() is None:
                self.bootstrap_file.unlink(missing_ok=True)
            return None
        pid = self._read_pid()
        if pid is not None and self._is_ours(pid):
            return None
        if pid is None:
            why = f"holds {raw[:20]!r}, not a PID"
        elif _read_cmdline(pid) is None:
            why = f"names PID {pid}, which is not running"
        else:
            why = f"names PID {pid}, which is not this broker's java"
        self.pid_file.unlink(missing_ok=True)
        self.bootstrap_file.unlink(missing_ok=True)
        return f"removed a stale PID file ({self.pid_file} {why})"

    def _find_orphan(self) -> int | None:
        """Our broker running without a PID file (e.g. the file was deleted), found through /proc."""
        proc = Path("/proc")
        if not proc.is_dir():
            return None
        for entry in proc.iterdir():
            if entry.name.isdigit() and self._is_ours(int(entry.name)):
                return int(entry.name)
        return None

    def _configured_ports(self) -> Ports | None:
        try:
            text = self.server_properties.read_text(encoding="utf-8")
        except OSError:
            return None
        client = re.search(r"^listeners=PLAINTEXT://[^:]+:(\d+)", text, re.MULTILINE)
        ctrl = re.search(r"^controller\.quorum\.voters=1@[^:]+:(\d+)", text, re.MULTILINE)
        if client is None or ctrl is None:
            return None
        return Ports(int(client.group(1)), int(ctrl.group(1)))

    def _choose_ports(self) -> Ports:
        previous = self._configured_ports()
        if self.fixed_port is not None:
            if not port_is_free(self.fixed_port):
                raise BrokerError(
                    f"GUARDIAN_KAFKA_PORT={self.fixed_port} is already in use on {HOST}: unset it "
                    "(a free port is chosen), choose another, or stop what listens there; "
                    f"if it is a Kafka broker, use it with GUARDIAN_KAFKA_BOOTSTRAP={HOST}:{self.fixed_port}"
                )
            client = self.fixed_port
        elif previous is not None and port_is_free(previous.client):
            client = previous.client
        else:
            client = free_port()
        if previous is not None and previous.controller != client and port_is_free(previous.controller):
            controller = previous.controller
        else:
            controller = free_port()
            while controller == client:
                controller = free_port()
        return Ports(client, controller)

    # ------------------------------------------------------------- config

    def _write_config(self, ports: Ports) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{ports.controller}",
            "listeners": f"PLAINTEXT://{HOST}:{ports.client},CONTROLLER://{HOST}:{ports.controller}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{ports.client}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "log.segment.bytes": str(64 * 1024 * 1024),
            "log.retention.hours": "168",
        }
        text = "# written by guardian kafka up; rewritten at every start\n" + "".join(
            f"{k}={_escape_prop(v)}\n" for k, v in props.items()
        )
        _atomic_write(self.server_properties, text)
        _atomic_write(self.log4j_properties, LOG4J2_PROPERTIES)

    def _format_storage(self, java: str) -> None:
        if (self.data_dir / "meta.properties").is_file():
            return
        cluster_id = self._run_tool(java, "kafka.tools.StorageTool", "random-uuid").strip().splitlines()[-1]
        self._run_tool(
            java,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id.strip()}",
            "-c",
            str(self.server_properties),
            "--ignore-formatted",
        )

    # ------------------------------------------------------------- life cycle

    @contextlib.contextmanager
    def _locked(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """One ``up``/``down``/``restart`` at a time per data dir (another process may be starting it)."""
        self.kafka_dir.mkdir(parents=True, exist_ok=True)
        with (self.kafka_dir / ".lock").open("a+b") as handle:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if time.monotonic() > deadline:
                        raise BrokerError(
                            f"another 'guardian kafka' command holds {self.kafka_dir / '.lock'} for over "
                            f"{timeout_s:.0f} s: wait for it, or stop it"
                        ) from exc
                    time.sleep(0.1)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def up(self, timeout_s: float = DEFAULT_UP_TIMEOUT_S) -> str:
        """Start the broker unless it runs; its bootstrap address once a metadata request succeeds."""
        with self._locked(timeout_s + LOCK_TIMEOUT_S):
            return self._up(timeout_s)

    def _up(self, timeout_s: float) -> str:
        self.started = False
        note = self.clean_stale()
        if note:
            _say(note + "; starting a new broker")
        running = self.bootstrap()
        if running:
            return running
        orphan = self._find_orphan()
        if orphan is not None:
            ports = self._configured_ports()
            if ports is not None:
                self.pid_file.write_text(f"{orphan}\n", encoding="utf-8")
                return self._await_ready(ports, timeout_s, orphan)
        java = self.java()
        ports = self._choose_ports()
        self.fetch()
        self._write_config(ports)
        self._format_storage(java)
        return self._start(java, ports, timeout_s)

    def restart(
        self, timeout_s: float = DEFAULT_UP_TIMEOUT_S, stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S
    ) -> str:
        """Stop and start again on the same ports and data (for broker-restart tests); the address."""
        with self._locked(timeout_s + stop_timeout_s + LOCK_TIMEOUT_S):
            return self._restart(timeout_s, stop_timeout_s)

    def _restart(self, timeout_s: float, stop_timeout_s: float) -> str:
        ports = self._configured_ports()
        if ports is None:
            raise BrokerError(f"no broker was set up in {self.kafka_dir}: run 'guardian kafka up' first")
        self._down(stop_timeout_s)
        if not self._wait_ports_free(15):
            raise BrokerError(
                f"the ports {ports.client}/{ports.controller} stayed busy after the broker stopped"
            )
        java = self.java()
        self._write_config(ports)
        return self._start(java, ports, timeout_s)

    def _start(self, java: str, ports: Ports, timeout_s: float) -> str:
        if not port_is_free(ports.client) or not port_is_free(ports.controller):
            raise BrokerError(
                f"port {ports.client} or {ports.controller} on {HOST} was taken before the broker started: "
                "run 'guardian kafka up' again"
            )
        if self._proc is not None:  # a previous child of ours: reap it rather than drop it running
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            self.release()
        cmd = self._java_cmd(java, "kafka.Kafka", str(self.server_properties))
        log: IO[bytes]
        with self.log_file.open("ab") as log:
            log.write(f"\n==== guardian kafka up {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.kafka_dir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        _atomic_write(self.pid_file, f"{self._proc.pid}\n")
        self.started = True
        try:
            return self._await_ready(ports, timeout_s, self._proc.pid)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while it starts: never leave it running
            self._down(DEFAULT_STOP_TIMEOUT_S)
            raise

    def _await_ready(self, ports: Ports, timeout_s: float, pid: int) -> str:
        from streams.admin import probe_broker

        address = f"{HOST}:{ports.client}"
        deadline = time.monotonic() + timeout_s
        while True:
            if not self._is_ours(pid):
                code = self._proc.poll() if self._proc is not None and self._proc.pid == pid else None
                self._forget(pid)
                self.pid_file.unlink(missing_ok=True)
                last = next(
                    (ln for ln in reversed(_tail(self.log_file)) if "ERROR" in ln or "Exception" in ln), ""
                )
                raise BrokerError(
                    f"the Kafka broker exited during start (exit code {code}); see the last lines of "
                    f"{self.log_file}" + (f" ({last.strip()[:200]})" if last else "") + f"; or {WAYS_OUT}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._down(DEFAULT_STOP_TIMEOUT_S)
                raise BrokerError(
                    f"the Kafka broker did not answer on {address} within {timeout_s:.0f} s and was stopped; "
                    f"see {self.log_file}; or {WAYS_OUT}"
                )
            probe = functools.partial(probe_broker, address, min(5.0, remaining))
            if _port_accepts(ports.client) and run_sync(probe):
                _atomic_write(self.bootstrap_file, address + "\n")
                return address
            time.sleep(0.2)

    def down(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> bool:
        """Stop the broker this data dir started (SIGTERM, then SIGKILL); whether one was running."""
        with self._locked(timeout_s + LOCK_TIMEOUT_S):
            return self._down(timeout_s)

    def _down(self, timeout_s: float) -> bool:
        pid = self._read_pid()
        if pid is None or not self._is_ours(pid):
            orphan = self._find_orphan()
            pid = orphan
        stopped = False
        if pid is not None and self._is_ours(pid):
            stopped = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not self._wait_gone(pid, timeout_s):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._wait_gone(pid, 10)
            self._wait_ports_free(10)
        self._forget(pid)
        self.pid_file.unlink(missing_ok=True)
        self.bootstrap_file.unlink(missing_ok=True)
        return stopped

    def _wait_ports_free(self, timeout_s: float) -> bool:
        """Whether the configured ports are free (a JVM's last threads may hold them a moment longer)."""
        ports = self._configured_ports()
        if ports is None:
            return True
        deadline = time.monotonic() + timeout_s
        while not (port_is_free(ports.client) and port_is_free(ports.controller)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _wait_gone(self, pid: int, timeout_s: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            # our child: only its exit status counts (while the JVM exits, /proc shows its main thread
            # as a zombie before the process can be reaped)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _read_cmdline(pid) is None:
                return True
            time.sleep(0.1)
        return _read_cmdline(pid) is None

    def _forget(self, pid: int | None) -> None:
        """Reap our child (no zombie, no ResourceWarning) once it is gone."""
        if (
            self._proc is not None
            and (pid is None or self._proc.pid == pid)
            and self._proc.poll() is not None
        ):
            self._proc = None

    def release(self) -> None:
        """Let a started broker live on after this object (the CLI's ``up``): drop the child handle."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                del proc  # Popen.__del__ runs here and would warn "subprocess is still running"

    def describe(self) -> str:
        pid = self.pid()
        if pid is None:
            return f"not running (data in {self.kafka_dir})"
        return f"running at {self.bootstrap()} (pid {pid}, data in {self.kafka_dir}, log {self.log_file})"


LOG4J2_PROPERTIES = """\
# written by guardian kafka up: WARN and above, plus the broker's "Kafka Server started" line
status = warn
name = guardian-kafka
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
"""


def _escape_prop(value: str) -> str:
    return value.replace("\\", "\\\\")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _java_major(version_text: str) -> int | None:
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        return int(match.group(2))
    return major


def _mvn_reason(output: str, code: int) -> str:
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


# ----------------------------------------------------------------- the command line


def _broker(settings: Settings) -> LocalBroker:
    from streams.admin import quiet_client_logs

    quiet_client_logs()
    return LocalBroker.from_settings(settings)


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka up``: start (or find) the local broker; its address is the last stdout line."""
    try:
        broker = _broker(settings)
    except BrokerError as exc:
        _say(str(exc))
        return 1
    started = time.monotonic()
    try:
        address = broker.up()
    except BrokerError as exc:
        _say(str(exc))
        return 1
    finally:
        broker.release()
    if not broker.started:
        _say(f"the local Kafka broker is already running (pid {broker.pid()}, data in {broker.kafka_dir})")
    else:
        _say(f"the local Kafka broker started in {time.monotonic() - started:.1f} s (log {broker.log_file})")
    if settings.bootstrap and settings.bootstrap != address:
        _say(f"note: GUARDIAN_KAFKA_BOOTSTRAP={settings.bootstrap} is set and wins over this local broker")
    print(address, flush=True)
    return 0


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka down``: stop the broker this data dir started; nothing is left running."""
    try:
        broker = _broker(settings)
        note = broker.clean_stale()
        if note:
            _say(note)
        stopped = broker.down()
    except BrokerError as exc:
        _say(str(exc))
        return 1
    print("stopped the local Kafka broker" if stopped else "the local Kafka broker was not running")
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka status``: exit 0 when running (and where), 3 when not."""
    try:
        broker = _broker(settings)
        note = broker.clean_stale()
    except BrokerError as exc:
        _say(str(exc))
        return 1
    if note:
        _say(note)
    print(broker.describe())
    return Exit.OK if broker.is_running() else Exit.BROKER_UNREACHABLE


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka fetch``: only download the jars (once); prints their folder."""
    try:
        broker = _broker(settings)
        had = broker.jars_complete()
        started = time.monotonic()
        libs = broker.fetch()
    except BrokerError as exc:
        _say(str(exc))
        return 1
    if not had:
        _say(f"fetched the Kafka {KAFKA_VERSION} jars in {time.monotonic() - started:.1f} s")
    print(libs)
    return 0
