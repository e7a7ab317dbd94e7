"""``KafkaNode``: the folder of one local Kafka node (config/, data/, logs/, kafka.pid, bootstrap),
its jars, Java, ports and configuration, and whether its JVM runs; ``LocalBroker`` starts and
stops it."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from guardian.kafka_error import WAYS_OUT, BrokerError
from guardian.kafka_host import HOST, atomic_write, free_port, port_is_free, read_cmdline
from guardian.kafka_jars import default_jars_dir, fetch_jars, jars_complete
from guardian.kafka_java import find_java

DEFAULT_HEAP = "768m"
JAVA_TOOL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Ports:
    """The client (PLAINTEXT) and controller ports of the node."""

    client: int
    controller: int


class KafkaNode:
    """One local Kafka node under ``kafka_dir``: its paths, jars, Java, ports, configuration and
    PID file (``LocalBroker`` adds its life cycle)."""

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
        return jars_complete(self.jars_dir)

    def classpath(self) -> str:
        """The JVM classpath of the broker's jars (also holds kafka-tools' perf tools); fetches if needed."""
        self.fetch()
        return str(self.jars_dir / "*")

    def fetch(self) -> Path:
        """Download the jars once (atomically: a half download is redone next time); the jar folder."""
        return fetch_jars(self.jars_dir, self.env, self.mvn_args)

    # ------------------------------------------------------------- the JVM

    def java(self) -> str:
        """The java executable, checked to be Java 17 or newer."""
        return find_java(self.env)

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
        cmdline = read_cmdline(pid)
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
        elif read_cmdline(pid) is None:
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
            f"{k}={escape_prop(v)}\n" for k, v in props.items()
        )
        atomic_write(self.server_properties, text)
        atomic_write(self.log4j_properties, LOG4J2_PROPERTIES)

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


def escape_prop(value: str) -> str:
    return value.replace("\\", "\\\\")
